"""Asynchronous checkpoints in slices: the files hold the state at the checkpoint's
time whatever the processing path wrote before its bin was encoded (copy-on-write);
slices are bounded; a checkpoint due while the previous one is still being encoded is
skipped and reported, and what is committed restores exactly."""

from __future__ import annotations

import warnings
from concurrent.futures import Future
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.engine.checkpointing.async_capture import AsyncCapture
from tstate.engine.checkpointing.coordinator import Checkpoints, CheckpointSkippedWarning, Coordinator
from tstate.engine.checkpointing.freeze import MISSING, Frozen, must_copy
from tstate.engine.checkpointing.slices import BinWork, Job
from tstate.state.bin import Bin
from tstate.state.payload import decode_payload
from tstate.types import StateCodec

CODEC = StateCodec(list[int])


def _sink(files: dict[str, bytes]):
    def write(batch):
        files.update(batch)
        f: Future[None] = Future()
        f.set_result(None)
        return f

    return write


ops = st.lists(st.tuples(st.sampled_from(["write", "clear", "new", "slice"]), st.integers(0, 11)), max_size=40)


@given(initial=st.dictionaries(st.integers(0, 11), st.lists(st.integers(-3, 3), max_size=3), max_size=12),
       dirty=st.sets(st.integers(0, 11)), snapshot=st.booleans(), steps=ops)
def test_files_hold_the_state_at_the_checkpoints_time(initial, dirty, snapshot, steps) -> None:
    """A reference model: what the checkpoint must hold is a copy taken at the freeze;
    the processing path (before_write, then a change) and slices interleave at random."""
    bins = [Bin(i) for i in range(3)]
    for k, v in initial.items():
        bins[k % 3].states[k] = list(v)
    frozen = Frozen(CODEC, "op")
    work = []
    expected = {}
    for b in bins:
        keys = dict(b.states) if snapshot else {k: b.states.get(k, MISSING) for k in dirty if k % 3 == b.index}
        expected[b.index] = {k: list(b.states[k]) for k in keys if k in b.states}
        frozen.freeze(b, keys)
        work.append(BinWork("op", CODEC, frozen, b, snapshot, [], len(keys)))
    files: dict[str, bytes] = {}
    job = Job(work, 1, "ab", _sink(files))
    for what, k in steps:
        b = bins[k % 3]
        if what == "slice":
            job.run(0.0)  # one bin
            continue
        if what == "write" and must_copy(b.frozen, k):  # (clearing or replacing a state needs no copy)
            frozen.before_write(b, k)
        if what == "write" and k in b.states:
            b.states[k].append(9)
        elif what == "clear":
            b.states.pop(k, None)
        elif what == "new":
            b.states[k] = [7]
    job.run(float("inf"))
    assert job.encoded and all(b.frozen is None for b in bins) and not frozen.pending
    for _op, index, snap, path, size, _x in job.files:
        p = decode_payload(files[path], CODEC)
        got = p.states if snap else dict(p.upserts)
        assert got == expected[index]
        if not snap:  # the frozen keys without a state at the checkpoint's time are deletes
            assert set(p.deletes) == {k for k in dirty if k % 3 == index and k not in expected[index]}


def build(batches):
    flow = ts.Dataflow("sliced")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=list[int], bins=16, name="acc")
    def acc(values, r, ctx):
        values.append(r[1])

    return flow, acc


BATCHES = [[(k, t) for k in range(t % 7, 300, 7)] for t in range(40)]


# (these tests are about encoding: the writes are taken as instant, never deferring a
# checkpoint -- test_a_checkpoint_waits_for_the_previous_ones_files covers that)
_WRITES_INSTANT = patch.object(AsyncCapture, "busy", lambda self: self.active is not None)


@_WRITES_INSTANT
def test_a_slow_checkpoint_skips_the_next_one_and_reports_it(tmp_path) -> None:
    flow, op = build(BATCHES)
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="async", retain=50))
    coord = ex.coordinator
    assert coord.mode == "async"
    # a pacer far behind: a slice of one bin per step (the job outlives the interval)
    coord.pacer.budget = lambda job, since, interval, elapsed=None: 1e-9  # type: ignore[method-assign]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex.run()
    assert coord.skipped, "a checkpoint was due while the previous one was being encoded"
    assert any(issubclass(w.category, CheckpointSkippedWarning) for w in caught)
    assert not set(coord.skipped) & set(coord.committed)
    assert coord.slice_seconds and coord.committed
    expected = flow.state(op, format="dict")
    # resume from what was committed: the same final state
    flow2, op2 = build(BATCHES)
    flow2.run(workers=2, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="async"))
    assert flow2.execution.restored is not None
    assert flow2.state(op2, format="dict") == expected


# ---------------------------------------------------------------- async == sync


def build_mixed():
    """A keyed list with timers and clears, and a count keyed by value (an immutable
    state: replaced, never copied): both kinds of state, copy-on-write or not."""
    flow = ts.Dataflow("mixed")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=8, name="acc")
    def acc(values, r, ctx):
        values.append(r[1])
        if r[1] == 0:
            ctx.clear()
        elif r[1] % 3 == 0:
            ctx.notify_at(ctx.time + 1)

    @acc.on_notify
    def report(values, t, ctx):
        values.append(-1)
        ctx.emit((ctx.key, t, sum(values)))

    @flow.stateful(inp, key=lambda r: r[1], state=int, bins=4, name="count")
    def count(n, r, ctx):
        return n + 1

    return flow, inp, (acc, count), acc.collect(), acc.probe()


def checkpoints_by_time(directory) -> dict:
    """time -> per operator, per bin, the kinds and bytes of its chain's files."""
    from tstate.checkpoint.store import CheckpointStore

    store = CheckpointStore(str(directory), readonly=True)
    return {m.time: {name: {b: [(r.kind, store.read(r)) for r in c] for b, c in e.chains.items()}
                     for name, e in m.operators.items()} for m in store.manifests()}


@_WRITES_INSTANT
@settings(max_examples=8)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 15), st.integers(0, 9)), max_size=12), min_size=3, max_size=14),
       every=st.integers(1, 3), workers=st.integers(1, 3))
def test_async_checkpoints_hold_what_sync_ones_hold(tmp_path_factory, batches, every, workers) -> None:
    """On random inputs and schedules, every checkpoint the default mode commits --
    encoded in slices over the epochs that follow it, the processing path copying the
    states it changes meanwhile -- is byte for byte the one sync mode commits at the
    same time, and it commits the same ones while the input is live; the output and the
    final state are the same."""
    results = {}
    for mode in ("sync", "async"):
        d = tmp_path_factory.mktemp(mode)
        flow, inp, ops, out, probe = build_mixed()
        ex = flow.start(workers, checkpoint=Checkpoints(str(d), every_epochs=every, mode=mode, retain=100))
        if mode == "async":
            ex.coordinator.pacer.small = 0.0  # slice even tiny jobs: states change while frozen
        for t, batch in enumerate(batches):  # one epoch at a time, as a live input comes
            inp.send(batch)
            inp.advance_to(t + 1)
            while probe.less_than(t + 1):
                ex.step()
        inp.close()
        ex.run()
        # (sync mode also checkpoints once more after the input closed, if that
        # checkpoint was due before: async mode, still encoding the previous one, need not)
        live = len(batches)
        results[mode] = ([t for t in ex.coordinator.committed if t <= live],
                         {t: c for t, c in checkpoints_by_time(d).items() if t <= live},
                         sorted(out.items), [flow.state(op, format="dict") for op in ops])
    assert results["async"] == results["sync"]
    assert results["sync"][1]  # (something was checkpointed)


@_WRITES_INSTANT
def test_slices_follow_the_schedule(tmp_path) -> None:
    """Slices encode about the same number of keys every epoch (the schedule: all keys
    by 80% of the interval), never much more than an epoch's share and one bin."""
    flow = ts.Dataflow("paced")
    inp = flow.input("in")
    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=16, name="acc")(lambda v, r, ctx: v.append(r[1]))
    probe = op.probe()
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path), every_epochs=10, mode="async", retain=50))
    coord = ex.coordinator
    coord.pacer.small = 0.0
    from tstate.engine.checkpointing import slices

    rows: list[tuple[int, int, int, int, int]] = []  # (checkpoint, epoch, keys encoded, most keys in a bin, keys in all)
    real_run = slices.Job.run

    def run(job, budget):
        before = job.keys_left
        biggest = max((w.keys for w in job.work), default=0)
        done = real_run(job, budget)
        # (a job the execution's end finishes at once is not paced: marked)
        rows.append((job.id, coord._applied_max(), before - job.keys_left, biggest,
                     -1 if budget == float("inf") else job.keys_total))
        return done

    slices.Job.run = run  # type: ignore[method-assign]
    try:
        for t in range(45):
            inp.send([(k, t) for k in range(400)] if t == 0 else [(k, t) for k in range(t * 37 % 400, 400, 3)])
            inp.advance_to(t + 1)
            while probe.less_than(t + 1):
                ex.step()
        inp.close()
        ex.run()
    finally:
        slices.Job.run = real_run  # type: ignore[method-assign]
    assert coord.committed and not coord.skipped
    jobs: dict[int, list[tuple[int, int, int, int]]] = {}
    for cid, epoch, keys, biggest, total in rows:
        jobs.setdefault(cid, []).append((epoch, keys, biggest, total))
    # (the last job ends with the input: whatever is left then is encoded at once)
    spread = [r for r in jobs.values() if r[0][3] > 100 and all(x[3] > 0 for x in r) and max(x[0] for x in r) < 44]
    assert len(spread) >= 3, "checkpoints were sliced"
    for job_rows in spread:
        total = job_rows[0][3]
        share = total / (0.8 * 10)  # keys per epoch on schedule
        assert len({epoch for epoch, _, _, _ in job_rows}) >= 6, "spread over the epochs after the capture"
        for _epoch, keys, biggest, _ in job_rows:
            assert keys <= 2.5 * share + biggest  # (a slice may catch up what an earlier one could not do in time)
        assert sum(k for _, k, _, _ in job_rows) == total


def test_a_checkpoint_waits_for_the_previous_ones_files(tmp_path) -> None:
    """A checkpoint due while the previous one's files are still being written is
    skipped and reported (its changes go into the next one), not queued behind a
    writer that cannot keep up: at most one checkpoint is being written at a time, and
    what is committed restores the same state."""
    import threading
    import time

    def build_live():  # type: ignore[no-untyped-def]
        flow = ts.Dataflow("slow-writer")
        inp = flow.input("in")
        op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=16, name="acc")(
            lambda v, r, ctx: v.append(r[1])
        )
        return flow, inp, op, op.probe()

    flow, inp, op, probe = build_live()
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="async", retain=50))
    coord = ex.coordinator
    real_sink = coord.capturer.sink
    gate = threading.Event()

    def slow_sink():  # type: ignore[no-untyped-def]
        write = real_sink()

        def later(batch):  # type: ignore[no-untyped-def]
            done: Future = Future()

            def run() -> None:
                gate.wait(60)  # the writer is stuck until the input reaches epoch 10
                write(batch).add_done_callback(lambda f: done.set_result(f.result()))

            threading.Thread(target=run, daemon=True).start()
            return done

        return later

    coord.capturer.sink = slow_sink  # type: ignore[method-assign]
    most_writing = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in range(20):
            inp.send([(k, t) for k in range(t % 5, 60, 5)])
            inp.advance_to(t + 1)
            while probe.less_than(t + 1):
                ex.step()
                most_writing = max(most_writing, sum(1 for p in coord.uncommitted if not p.written.done()))
            if t == 10:
                gate.set()
                deadline = time.monotonic() + 60
                while coord.commits.newest_writing() and time.monotonic() < deadline:
                    time.sleep(0.01)
        inp.close()
        ex.run()
    assert most_writing == 1, "a checkpoint was captured while the previous one's files were being written"
    assert coord.skipped and not set(coord.skipped) & set(coord.committed)
    assert any(issubclass(w.category, CheckpointSkippedWarning) and "written" in str(w.message) for w in caught)
    newest = max(coord.committed)
    assert newest > 10  # checkpoints went on once the writer caught up
    # the newest committed checkpoint restores the state at its time
    flow2, inp2, op2, _ = build_live()
    inp2.close()
    flow2.run(workers=1, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="async"))
    reference = {k: [t for t in range(newest) if t % 5 == k % 5] for k in range(60)}
    assert flow2.state(op2, format="dict") == {k: v for k, v in reference.items() if v}
