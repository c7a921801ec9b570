"""Checkpoint and restore in one process: random checkpoint intervals, random stop
points, random worker counts before and after; schema changes; bad directories."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from attrs import define
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.engine.checkpointing.forked import fork_available
from tstate.errors import CheckpointError, SchemaMismatchError

MODES = ["async", "thread", "sync"] + (["fork"] if fork_available() else [])
data = st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 20)), max_size=6), min_size=1, max_size=12)


def build(batches, state=int):
    flow = ts.Dataflow("sums")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=state, bins=8)
    def sums(total, r, ctx):
        ctx.notify_at(ctx.time + 1)
        return total + r[1]

    @sums.on_notify
    def report(total, time, ctx):
        ctx.emit((ctx.key, time, total))

    out = sums.collect()
    return flow, sums, out


def reference(batches):
    """A timer set at ``t`` for ``t + 1`` fires after the records at ``t + 1``."""
    totals: dict = defaultdict(int)
    out = []
    due: dict = {}
    for t in range(len(batches) + 2):
        for k, v in batches[t] if t < len(batches) else ():
            totals[k] += v
        out.extend((t, (k, t, totals[k])) for k in due.pop(t, ()))
        for k, _ in batches[t] if t < len(batches) else ():
            due.setdefault(t + 1, {})[k] = None
    return sorted(out), dict(totals)


@settings(max_examples=25)
@given(
    batches=data,
    every=st.integers(1, 4),
    stop=st.integers(0, 30),
    w1=st.integers(1, 6),
    w2=st.integers(1, 6),
    mode=st.sampled_from(MODES),
)
def test_stop_and_resume_on_other_worker_counts(tmp_path_factory, batches, every, stop, w1, w2, mode):
    d = str(tmp_path_factory.mktemp("ck"))
    cfg = Checkpoints(d, every_epochs=every, mode=mode)
    flow, op, out1 = build(batches)
    ex = flow.start(w1, checkpoint=cfg)
    for _ in range(stop):  # then "crash": abandon the execution
        if not ex.step():
            break
    ex.coordinator.abort()
    flow2, op2, out2 = build(batches)
    ex2 = flow2.start(w2, checkpoint=cfg)
    restored = ex2.restored
    ex2.run()
    exp_out, exp_state = reference(batches)
    t0 = restored.time if restored else 0
    # a checkpoint at t0 is committed only after the sinks saw every epoch before t0:
    # the first run delivered exactly those, the second run delivers exactly the rest
    assert sorted(p for p in out1.items if p[0] < t0) == [p for p in exp_out if p[0] < t0]
    assert sorted(out2.items) == [p for p in exp_out if p[0] >= t0]
    assert flow2.state(op2, format="dict") == exp_state


def test_checkpoints_are_incremental_and_resume_works(tmp_path):
    batches = [[(k, 1) for k in range(50)]] + [[(1, 1)]] * 20
    cfg = Checkpoints(str(tmp_path), every_epochs=2, mode="sync", retain=50)
    flow, op, out = build(batches)
    flow.run(workers=2, checkpoint=cfg)
    ex = flow.execution
    assert len(ex.coordinator.committed) >= 5
    ms = ex.coordinator.store.manifests()
    assert ms[0].time <= 2 and ms[-1].time >= 18
    flow2, op2, out2 = build(batches)
    flow2.run(workers=3, checkpoint=cfg)  # resumes from the last checkpoint
    assert flow2.execution.restored is not None and flow2.execution.restored.time == ms[-1].time
    assert flow2.state(op2, format="dict") == reference(batches)[1]


@define
class V1:
    total: int = 0


@define
class V2:
    total: int = 0
    count: int = 0  # added with a default: compatible


@define
class V3:
    total: str = ""


def test_schema_changes(tmp_path):
    batches = [[(1, 2)], [(2, 3)], [(1, 1)]]

    def run(state, fn):
        flow = ts.Dataflow("schema")
        src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")
        op = flow.stateful(src, key=lambda r: r[0], state=state, name="acc")(fn)
        flow.run(checkpoint=Checkpoints(str(tmp_path), every_epochs=1))
        return flow.state(op, format="dict")

    def add1(s, r, ctx):
        s.total += r[1]

    run(V1, add1)
    run(V2, add1)  # resumes: the new field takes its default
    with pytest.raises(SchemaMismatchError, match=r"acc.*total"):
        run(V3, lambda s, r, ctx: None)


def test_bad_directories(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    flow, op, out = build([[(1, 1)]])
    with pytest.raises(CheckpointError, match="file"):
        flow.start(checkpoint=str(f))
    if os.geteuid() != 0:  # root can write anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(CheckpointError, match="ro"):
            flow.start(checkpoint=str(ro))


def test_local_state_operators_are_refused(tmp_path):
    flow = ts.Dataflow("local")
    inp = flow.input("in")

    @flow.unary_frontier(inp, state=dict)
    def local(i, out, ctx):
        for _ in i:
            pass

    with pytest.raises(ts.errors.ConfigurationError, match="'local' keeps local state"):
        flow.start(checkpoint=str(tmp_path))
