"""The writer process: batches of files written atomically, acknowledged in order;
errors and a dead child fail the batches naming the files; closing reaps it.  It also
commits checkpoints (manifest built on the previous one, garbage collected) exactly as
a commit in process would, refuses an inconsistent one naming why, and dies with its
parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tstate.checkpoint.delta import encode_delta, restore_bin
from tstate.checkpoint.store import CheckpointStore, data_file_path, file_ref
from tstate.engine.checkpointing.writer import FileWriter, commit_request
from tstate.errors import CheckpointError
from tstate.hash_kind import HashKind
from tstate.state.bin import Bin
from tstate.state.payload import encode_bin
from tstate.types import StateCodec


def test_batches_are_written_and_acknowledged(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        futures = [w.write([(f"data/op/{i}/f{j}.bin", bytes([i, j]) * 1000) for j in range(5)]) for i in range(20)]
        for f in futures:
            assert f.result(timeout=60) is None
        for i in range(20):
            for j in range(5):
                assert (tmp_path / f"data/op/{i}/f{j}.bin").read_bytes() == bytes([i, j]) * 1000
        assert not [n for _, _, ns in os.walk(tmp_path) for n in ns if ".tmp-" in n]  # no temporaries left
    finally:
        w.close()
    assert w._proc.returncode == 0  # reaped


def test_a_file_that_cannot_be_written_fails_its_batch_naming_it(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        (tmp_path / "data").write_bytes(b"a file where a directory should be")
        bad = w.write([("data/op/0/x.bin", b"x")])
        with pytest.raises(CheckpointError, match=r"data/op/0/x\.bin: cannot be written"):
            bad.result(timeout=60)
        (tmp_path / "data").unlink()
        assert w.write([("data/op/0/y.bin", b"y")]).result(timeout=60) is None  # it goes on
    finally:
        w.close()


def test_a_dead_writer_fails_what_it_did_not_acknowledge(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    w.kill()
    f = w.write([("data/op/0/z.bin", b"z")])
    with pytest.raises(CheckpointError, match=r"data/op/0/z\.bin.*not written|writer process"):
        f.result(timeout=60)
    assert not w.alive


def test_ready_is_set_once_the_child_runs_and_batches_sent_before_are_kept(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        early = w.write([("data/op/0/early.bin", b"x")])  # before the child has started: queued
        assert w.ready.wait(60)
        assert early.result(timeout=60) is None and (tmp_path / "data/op/0/early.bin").read_bytes() == b"x"
    finally:
        w.close()


def test_the_first_async_checkpoint_does_not_wait_for_the_writer_process(tmp_path) -> None:
    """Until the writer process has started, a thread writes: a run shorter than an
    interpreter's start still commits its checkpoints as it goes."""
    import tstate as ts
    from tstate.engine.checkpointing import async_capture as writer_module

    class NeverReady:
        """A writer process that never finishes starting."""

        alive = True

        def __init__(self, location: str) -> None:
            self.ready = __import__("threading").Event()  # never set

        def write(self, files):  # type: ignore[no-untyped-def]
            raise AssertionError("the writer process was sent files before it was ready")

        def close(self) -> None:
            pass

        def kill(self) -> None:
            pass

        def release(self) -> None:
            pass

    flow = ts.Dataflow("short")
    def batches():  # type: ignore[no-untyped-def]
        for t in range(20):
            __import__("time").sleep(0.01)
            yield t, [("k", t)]

    src = flow.source(ts.io.from_batches(batches), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int)
    def total(s: int, r: tuple, ctx: ts.Context) -> int:
        ctx.emit(s + r[1])
        return s + r[1]

    total.collect()
    original = writer_module.FileWriter
    writer_module.FileWriter = NeverReady  # type: ignore[misc]
    try:
        ex = flow.start(1, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=2, mode="async"))
        assert ex.coordinator.capturer.files is None or isinstance(ex.coordinator.capturer.files, NeverReady)
        committed_during_run = []
        while ex.step():
            committed_during_run.append(len(ex.coordinator.committed))
        assert max(committed_during_run) >= 1  # a checkpoint committed while the run went on
    finally:
        writer_module.FileWriter = original  # type: ignore[misc]


CODEC = StateCodec(list[int])
SCHEMA = {"op": (CODEC.schema.to_builtins(), 4, HashKind.SPARK_XXHASH64)}


def _files(w, store_writer, bins: dict[int, bytes], kind: str) -> list[list]:
    """Write one file per bin through the writer process; their rows for a commit."""
    rows, batch = [], []
    for b, data in bins.items():
        path = data_file_path("op", b, store_writer.id, store_writer.token, kind)
        ref = file_ref(path, data)
        batch.append((path, data))
        rows.append(["op", b, kind == "snap", ref.path, ref.size, ref.xxh64])
    w.write(batch).result(timeout=60)
    return rows


def _snap(index: int, states: dict) -> bytes:
    b = Bin(index)
    b.states = states
    return encode_bin(b, CODEC)


def test_the_writer_process_commits_on_the_previous_checkpoint_and_collects_garbage(tmp_path) -> None:
    store = CheckpointStore(str(tmp_path), retain=1)
    w = FileWriter(str(tmp_path))
    try:
        first = store.begin(10, full=True)
        rows = _files(w, first, {0: _snap(0, {"a": [1]}), 1: _snap(1, {"b": [2]})}, "snap")
        out = w.commit(commit_request(first, store, rows, SCHEMA, {"sources": {"s": 7}}, None)).result(timeout=60)
        assert out == {"problems": []}
        store.committed_elsewhere(first)
        assert store.head is not None and store.head.id == first.id  # read when asked for
        second = store.begin(20)
        assert second.id == first.id + 1
        rows = _files(w, second, {0: encode_delta(0, [("a", [1, 5])], [], {}, CODEC.fingerprint)}, "delta")
        rows.append(["op", 1, True, None, 0, None])  # bin 1 is empty now
        w.commit(commit_request(second, store, rows, SCHEMA, {"workers": 2}, first.id)).result(timeout=60)
        store.committed_elsewhere(second)
    finally:
        w.close()
    fresh = CheckpointStore(str(tmp_path), readonly=True)
    m = fresh.latest()
    assert m is not None and m.id == second.id and m.time == 20 and fresh.problems == []
    assert dict(m.meta) == {"sources": {"s": 7}, "workers": 2}  # metadata carried over, then added to
    assert m.operators["op"].hash is HashKind.SPARK_XXHASH64  # the key's hash kind crosses the process
    chain = m.chain("op", 0)
    assert [r.kind for r in chain] == ["snap", "delta"] and m.chain("op", 1) == ()
    assert restore_bin([fresh.read(r) for r in chain], CODEC).states == {"a": [1, 5]}
    assert [f.name for f in (tmp_path / "manifests").iterdir()] == [m.name.split("/")[1]]  # retain=1: the first went
    assert not (tmp_path / rows_path(first, 1)).exists()  # and its bin-1 file with it (nothing refers to it)
    assert store.head is not None and store.head.id == second.id


def rows_path(writer, b: int) -> str:
    return data_file_path("op", b, writer.id, writer.token, "snap")


def test_a_commit_that_cannot_be_made_fails_naming_why_and_commits_nothing(tmp_path) -> None:
    store = CheckpointStore(str(tmp_path))
    w = FileWriter(str(tmp_path))
    try:
        writer = store.begin(5, full=True)
        rows = _files(w, writer, {0: _snap(0, {"a": [1]})}, "snap")
        rows[0][4] += 1  # a size the file does not have (a write that did not finish)
        with pytest.raises(CheckpointError, match=r"data/op-\w+/0/\d+-\w+-snap\.bin: missing or \d+ bytes, expected"):
            w.commit(commit_request(writer, store, rows, SCHEMA, {}, None)).result(timeout=60)
        rows[0][4] -= 1
        # the child forgot the failed writer: the same checkpoint commits when it is right
        w.commit(commit_request(writer, store, rows, SCHEMA, {}, None)).result(timeout=60)
    finally:
        w.close()
    assert CheckpointStore(str(tmp_path), readonly=True).latest().id == writer.id


def test_the_writer_process_dies_with_its_parent(tmp_path) -> None:
    """A run killed while its writer process is committing must not leave a writer
    behind: a restarted run could be writing the same checkpoint."""
    script = (
        "import os, signal, sys\n"
        "from tstate.engine.checkpointing.writer import FileWriter\n"
        f"w = FileWriter({str(tmp_path)!r})\n"
        "print(w._proc.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert parent.returncode == -9
    child = int(parent.stdout.split()[0])
    deadline = time.time() + 20
    while time.time() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "Z" not in state.split()[1]  # a zombie is dead (its new parent has not reaped it yet)


def test_an_abandoned_execution_lets_its_writer_process_go(tmp_path) -> None:
    """An execution dropped before it finished (a notebook cell interrupted) does not
    leave its writer process and threads behind once collected."""
    import gc

    import tstate as ts

    flow = ts.Dataflow("abandoned")
    src = flow.source(ts.io.from_batches(lambda: ((t, [("k", t)]) for t in range(100))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int)
    def total(s: int, r: tuple, ctx: ts.Context) -> int:
        return s + r[1]

    ex = flow.start(1, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=2, mode="async"))
    writer = ex.coordinator.capturer.files
    assert writer is not None and writer.ready.wait(60)
    for _ in range(10):
        ex.step()
    # dropped between checkpoints: a checkpoint still being encoded (async mode encodes
    # in slices between steps) keeps the execution reachable from the writer's threads
    # until it is written -- not the case this test is about
    coord = ex.coordinator
    for _ in range(500):
        if coord.capturer.active is None and not coord.writing:
            break
        ex.step()
        time.sleep(0.01)
    proc = writer._proc
    del ex, flow, total, src, writer, coord  # (a dataflow holds its last execution)
    gc.collect()
    assert proc.wait(timeout=60) == 0  # the child saw the end of its input and exited
