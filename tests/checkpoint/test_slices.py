"""Asynchronous checkpoints in slices: the files hold the state at the checkpoint's
time whatever the processing path wrote before its bin was encoded (copy-on-write);
slices are bounded; a checkpoint due while the previous one is still being encoded is
skipped and reported, and what is committed restores exactly."""

from __future__ import annotations

import warnings
from concurrent.futures import Future

from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.checkpoint.coordinator import Checkpoints, CheckpointSkippedWarning
from tstate.checkpoint.freeze import MISSING, Frozen, must_copy
from tstate.checkpoint.slices import BinWork, Job
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
