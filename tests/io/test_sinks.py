"""``ts.io.files``: an epoch's file depends only on the epoch's records (sorted lines),
whatever their order, the worker count, or a spill of the sort to temporary files; a
recovery redoes only the epoch files the sink writes (other files in its directory,
``epoch-backup.jsonl``, notes, are left alone)."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.io.sinks import FileSink, sorted_lines

RECORDS = st.lists(
    st.one_of(
        st.integers(),
        st.text(max_size=6),
        st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=3)), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ),
    max_size=40,
)


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=8), max_size=60), st.integers(1, 50))
def test_sorted_lines_is_sorted_with_any_run_size(lines, run_chars) -> None:
    assert list(sorted_lines(iter(lines), run_chars)) == sorted(lines)


@given(RECORDS, st.randoms(use_true_random=False), st.integers(1, 200))
def test_an_epoch_file_depends_only_on_its_records(tmp_path_factory, records, rnd, run_chars) -> None:
    a = FileSink(str(tmp_path_factory.mktemp("a")))
    b = FileSink(str(tmp_path_factory.mktemp("b")))
    b.sort_run_chars = run_chars  # the merge of spilled runs
    shuffled = list(records)
    rnd.shuffle(shuffled)
    a.commit_epoch(7, records)
    b.commit_epoch(7, iter(shuffled))
    name = "epoch-000000000007.jsonl"
    data = open(f"{a.directory}/{name}", "rb").read()
    assert data == open(f"{b.directory}/{name}", "rb").read()
    lines = data.decode().splitlines()
    assert lines == sorted(json.dumps(r, separators=(",", ":")) for r in records)


def test_the_same_bytes_on_any_worker_count(tmp_path) -> None:
    """Records of one epoch from several workers: byte-identical files on 1 and 4
    workers (the order the workers' batches reach the sink differs)."""

    def run(workers: int) -> dict[str, bytes]:
        out = tmp_path / f"w{workers}"
        flow = ts.Dataflow("files")
        events = flow.source(ts.io.from_batches(lambda: [(t, list(range(t * 50, t * 50 + 50))) for t in range(4)]))

        @flow.stateful(events, key=lambda e: e % 13, state=int)
        def count(n: int, e: int, ctx: ts.Context) -> int:
            ctx.emit([ctx.key, e, n + 1])
            return n + 1

        flow.sink(count, ts.io.files(str(out)))
        flow.run(workers=workers)
        return {p.name: p.read_bytes() for p in sorted(out.iterdir())}

    one, four = run(1), run(4)
    assert len(one) == 4 and one == four


def build(out: str) -> ts.Dataflow:
    flow = ts.Dataflow("sums")
    src = flow.source(ts.io.from_batches(lambda: [(t, [(t % 3, t)]) for t in range(20)]), name="rows")

    @flow.stateful(src, key=lambda r: r[0], state=int)
    def total(s: int, r: Any, ctx: ts.Context) -> int:
        ctx.emit([ctx.key, s + r[1]])
        return s + r[1]

    flow.sink(total, ts.io.files(out))
    return flow


def test_stray_files_in_the_output_directory_survive_a_resume(tmp_path: Any) -> None:
    ref = str(tmp_path / "ref")
    build(ref).run(workers=2)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    cfg = ts.Checkpoints(ck, every_epochs=3, mode="sync")
    ex = build(out).start(2, checkpoint=cfg)
    while len(ex.coordinator.committed) < 2:
        assert ex.step()
    ex.coordinator.abort()  # "crash"
    strays = {"epoch-backup.jsonl": "keep me\n", "notes.txt": "x", "epoch-000000000001.jsonl.bak": "y", "epoch-.jsonl": ""}
    for name, text in strays.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    with open(os.path.join(out, "epoch-000000000001.jsonl.tmp-0badf00d"), "w") as f:
        f.write("[half")  # a crashed writer's temporary: ours, deleted
    ex2 = build(out).start(2, checkpoint=cfg)
    assert ex2.restored is not None
    ex2.run()
    for name, text in strays.items():
        assert open(os.path.join(out, name)).read() == text
    ours = sorted(n for n in os.listdir(out) if n not in strays)
    assert ours == sorted(os.listdir(ref))
    for n in ours:
        assert [json.loads(x) for x in open(os.path.join(out, n))] == [json.loads(x) for x in open(os.path.join(ref, n))]


@given(st.lists(st.tuples(st.integers(0, 30), RECORDS), max_size=6), st.booleans())
def test_epochs_written_together_are_the_files_written_one_by_one(tmp_path_factory, epochs, syncfs) -> None:
    """``commit_epochs`` (one durability barrier for many files: Spark's per-task
    epoch files) writes the same bytes as ``commit_epoch`` per epoch, with ``syncfs``
    or the per-file ``fsync`` it falls back to."""
    import tstate.io.sinks as sinks

    one = FileSink(str(tmp_path_factory.mktemp("one")))
    many = FileSink(str(tmp_path_factory.mktemp("many")))
    last = dict(epochs)  # (an epoch given twice: the later file replaces the earlier)
    for t, recs in epochs:
        one.commit_epoch(t, recs)
    saved = sinks._SYNCFS
    sinks._SYNCFS = False if syncfs else None
    try:
        assert many.commit_epochs((t, iter(recs)) for t, recs in epochs) == len(epochs)
    finally:
        sinks._SYNCFS = saved
    files = sorted(os.listdir(one.directory))
    assert files == sorted(os.listdir(many.directory)) == sorted(f"epoch-{t:012d}.jsonl" for t in last)
    for name in files:
        assert open(f"{one.directory}/{name}", "rb").read() == open(f"{many.directory}/{name}", "rb").read()


def test_a_failure_while_writing_epochs_together_changes_no_file(tmp_path) -> None:
    """An error in the middle of ``commit_epochs`` (a record that is not JSON, after a
    first epoch was written to its temporary file) leaves every epoch's file as it was
    and no temporary file."""
    sink = FileSink(str(tmp_path))
    sink.commit_epoch(1, ["old"])
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    try:
        sink.commit_epochs([(1, ["new"]), (2, ["x"]), (3, [object()])])
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a record that is not JSON was written")
    assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == before


# -- durability in groups (the embedded engine's barriers) -----------------------------


def _reference_file(records: list[Any]) -> bytes:
    """The reference model of an epoch's file: its records' compact JSON, sorted, one a line."""
    return "".join(x + "\n" for x in sorted(json.dumps(r, separators=(",", ":")) for r in records)).encode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(st.tuples(st.integers(0, 12), st.lists(JSON_VALUES, max_size=12)), max_size=8), st.integers(1, 200))
def test_the_embedded_path_writes_the_reference_bytes(tmp_path_factory, batches, run_chars) -> None:
    """Files written as the frontier passes epochs (the embedded engine's path: renamed
    at once, synced in groups) hold exactly the reference model's bytes, as the Spark
    path's ``commit_epochs`` does, with or without the sort spilling runs (any JSON
    value: ``None``, floats with NaN and infinities, non-ASCII text, tuples)."""
    from tstate.progress.frontier import Antichain

    emb = FileSink(str(tmp_path_factory.mktemp("emb")))
    emb.sort_run_chars = run_chars
    spark = FileSink(str(tmp_path_factory.mktemp("spark")))
    by_time: dict[int, list[Any]] = {}
    for t, recs in batches:
        emb.write(0, t, list(recs))
        by_time.setdefault(t, []).extend(recs)
    emb.frontier(0, Antichain([7]))  # epochs < 7 now, the rest at close
    emb.close(0)
    spark.commit_epochs(sorted(by_time.items()))
    names = sorted(os.listdir(emb.directory))
    assert names == sorted(os.listdir(spark.directory)) == sorted(f"epoch-{t:012d}.jsonl" for t in by_time)
    for t, recs in by_time.items():
        name = f"epoch-{t:012d}.jsonl"
        assert open(f"{emb.directory}/{name}", "rb").read() == _reference_file(recs)
        assert open(f"{spark.directory}/{name}", "rb").read() == _reference_file(recs)


class Recorded(FileSink):
    """A file sink logging, in order with the checkpoint commits, which epochs' files it
    made durable (``sync`` records the epochs written before it)."""

    def __init__(self, directory: str, log: list[tuple[str, Any]]) -> None:
        super().__init__(directory)
        self.log = log
        self.written: set[int] = set()
        self.sync_every_seconds = 1e9  # (only the engine's barriers and the epoch bound)

    def _commit(self, time: Any, records: list[Any]) -> None:
        super()._commit(time, records)
        self.written.add(time)

    def sync(self, worker: int) -> None:
        if self._unsynced:
            self.log.append(("sync", frozenset(self.written)))
        super().sync(worker)


def _counting(epochs: int, sink: FileSink) -> ts.Dataflow:
    flow = ts.Dataflow("epochs")
    src = flow.source(ts.io.from_batches(lambda: [(t, [t, t + 1]) for t in range(epochs)]), name="rows")

    @flow.stateful(src, key=lambda r: r % 2, state=int)
    def count(n: int, r: int, ctx: ts.Context) -> int:
        ctx.emit([ctx.key, n + 1])
        return n + 1

    flow.sink(count, sink)
    return flow


def test_a_checkpoint_commits_only_after_the_files_before_it_are_durable(tmp_path, monkeypatch) -> None:
    """Before the engine commits a checkpoint at ``T`` it has every sink ``sync``: a
    crash right after that commit (recovery redoes epochs ``>= T`` only) never loses
    the file of an epoch ``< T``.  The sink's own bound is out of reach here, so only
    the engine's hook can have synced them."""
    import tstate.engine.checkpointing.commits as commits

    log: list[tuple[str, Any]] = []
    real = commits.commit

    def commit(writer: Any, *args: Any, **kwargs: Any) -> Any:
        log.append(("commit", writer.time))
        return real(writer, *args, **kwargs)

    monkeypatch.setattr(commits, "commit", commit)
    sink = Recorded(str(tmp_path / "out"), log)
    ex = _counting(30, sink).start(2, checkpoint=ts.Checkpoints(str(tmp_path / "ck"), every_epochs=4, mode="sync"))
    ex.run()
    commit_times = [t for kind, t in log if kind == "commit"]
    assert len(commit_times) >= 3
    synced: set[int] = set()
    for kind, what in log:
        if kind == "sync":
            synced |= what
        else:
            assert {e for e in sink.written if e < what} <= synced, f"checkpoint at {what} committed before its files synced"
    assert synced == sink.written == set(range(30))  # and everything at the end
    assert sink.syncs <= len(commit_times) + 1


def test_a_record_that_is_not_json_fails_its_epoch_and_the_next_is_written(tmp_path) -> None:
    """A record JSON cannot encode (a circular list: ``ValueError``; an object:
    ``TypeError``) fails its epoch's write and leaves no temporary file; the next epoch
    (whose encoder is fresh) is written as usual."""
    from tstate.progress.frontier import Antichain

    sink = FileSink(str(tmp_path))
    loop: list[Any] = [1]
    loop.append(loop)
    for t, bad, error in ((1, loop, ValueError), (2, object(), TypeError)):
        sink.write(0, t, [[1, 2], bad])
        try:
            sink.frontier(0, Antichain([t + 1]))
        except error:
            pass
        else:  # pragma: no cover
            raise AssertionError(f"{bad!r} was written")
    sink.write(0, 3, [[1, 2], "x"])
    sink.close(0)
    assert os.listdir(tmp_path) == ["epoch-000000000003.jsonl"]
    assert (tmp_path / "epoch-000000000003.jsonl").read_bytes() == _reference_file([[1, 2], "x"])


def test_syncs_per_run_are_bounded_not_one_per_epoch(tmp_path, monkeypatch) -> None:
    """Without checkpoints the embedded engine's files are synced in groups: one barrier
    (one ``syncfs`` or fsync set, one directory sync) per ``sync_every_epochs`` files
    and one at the end -- not one per epoch -- with the same files."""
    import tstate.io.sinks as sinks

    calls = {"durable": 0, "dir": 0}
    real_durable, real_dir = sinks._durable, sinks._sync_dir

    def durable(directory: str, paths: list[str]) -> None:
        calls["durable"] += 1
        real_durable(directory, paths)

    def sync_dir(directory: str) -> None:
        calls["dir"] += 1
        real_dir(directory)

    monkeypatch.setattr(sinks, "_durable", durable)
    monkeypatch.setattr(sinks, "_sync_dir", sync_dir)
    sink = FileSink(str(tmp_path / "out"))
    sink.sync_every_epochs, sink.sync_every_seconds = 25, 1e9
    _counting(100, sink).run(workers=2)
    assert len(os.listdir(tmp_path / "out")) == 100
    assert calls == {"durable": 4, "dir": 4} and sink.syncs == 4  # 25, 50, 75, 100 (the end: nothing left)
    sink2 = FileSink(str(tmp_path / "out2"))
    sink2.sync_every_seconds = 0.0  # the time bound: every file at once
    _counting(10, sink2).run(workers=1)
    assert sink2.syncs == 10
