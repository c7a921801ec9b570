"""The writer process: batches of files written atomically, acknowledged in order;
errors and a dead child fail the batches naming the files; closing reaps it."""

from __future__ import annotations

import os

import pytest

from tstate.engine.checkpointing.writer import FileWriter
from tstate.errors import CheckpointError


def test_batches_are_written_and_acknowledged(tmp_path) -> None:
    w = FileWriter(str(tmp_path))
    try:
        futures = [w.write([(f"data/op/{i}/f{j}.bin", bytes([i, j]) * 1000) for j in range(5)]) for i in range(20)]
        for f in futures:
            assert f.result(timeout=60) is None
        for i in range(20):
            for j in range(5):
                assert (tmp_path / f"data/op/{i}/f{j}.bin").read_bytes() == bytes([i, j]) * 1000
        assert not [n for _, _, ns in os.walk(tmp_path) for n in ns if ".tmp-" in n]  # renamed into place
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
    from tstate.engine.checkpointing import coordinator as writer_module

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
        assert ex.coordinator._files is None or isinstance(ex.coordinator._files, NeverReady)
        committed_during_run = []
        while ex.step():
            committed_during_run.append(len(ex.coordinator.committed))
        assert max(committed_during_run) >= 1  # a checkpoint committed while the run went on
    finally:
        writer_module.FileWriter = original  # type: ignore[misc]
