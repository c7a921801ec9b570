"""Lazy recovery, end to end: runs abandoned at random steps and resumed lazily (bins
decoded on first use or in paced background slices, or never in the background) on
random worker counts, with migrations and timers, chained over several restarts; the
output and the final state equal an uninterrupted run's."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.checkpoint.settings import Checkpoints
from tstate.engine.checkpointing.forked import fork_available
from tstate.engine.checkpointing.lazy import RestorePacer

MODES = ["async", "thread", "sync"] + (["fork"] if fork_available() else [])
BINS = 16

data = st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), max_size=6), min_size=2, max_size=14)


def build(batches: list[list[tuple[int, int]]]) -> tuple[ts.Dataflow, ts.Stream, Any]:
    """Per-key sums with timers 1-3 epochs ahead (so bins hold timers and no record
    after a restart) and ``ctx.clear`` on a 0; a second stateful operator keyed by the
    report's parity counts the reports."""
    flow = ts.Dataflow("lazy")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int, bins=BINS)
    def sums(total: int, r: tuple[int, int], ctx: ts.Context) -> Any:
        if r[1] == 0:
            ctx.clear()
            return None
        ctx.notify_at(ctx.time + 1 + r[1] % 3)
        return total + r[1]

    @sums.on_notify
    def report(total: int, time: int, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, time, total))

    @flow.stateful(sums, key=lambda r: r[2] % 2, state=int, bins=4)
    def reports(n: int, r: tuple[int, int, int], ctx: ts.Context) -> int:
        ctx.emit((-1, ctx.key, n + 1))  # (-1: not a key of sums)
        return n + 1

    out = sums.concat(reports).collect()
    return flow, sums, out


# how a restarted run's pacer behaves: never in the background (every bin on demand),
# the default pacing, or every bin at the first chance
PACING = {"never": lambda self, since, busy: 0.0, "paced": RestorePacer.budget, "at once": lambda self, since, busy: 1e9}

run_plan = st.tuples(
    st.integers(1, 4),  # workers
    st.integers(0, 40),  # steps before the crash (the last run finishes)
    st.one_of(st.none(), st.tuples(st.integers(1, 4), st.integers(0, 6))),  # rescale to w at restored time + d
    st.sampled_from(sorted(PACING)),
    st.sampled_from(MODES),
)


@settings(max_examples=30)
@given(batches=data, every=st.integers(1, 4), runs=st.lists(run_plan, min_size=2, max_size=4))
def test_lazy_restores_at_random_points_equal_an_uninterrupted_run(tmp_path_factory: Any, batches, every, runs) -> None:
    ref_flow, ref_op, ref_out = build(batches)
    ref_flow.run(workers=1)
    want = sorted(ref_out.items)
    want_state = ref_flow.state(ref_op, format="dict")

    d = str(tmp_path_factory.mktemp("ck"))
    got: list[Any] = []
    prev_out: Any = None
    prev_t = 0
    for i, (workers, steps, move, pacing, mode) in enumerate(runs):
        last = i == len(runs) - 1
        cfg = Checkpoints(d, every_epochs=every, mode=mode, restore="lazy")
        flow, op, out = build(batches)
        with mock.patch.object(RestorePacer, "budget", PACING[pacing]):
            pool = max(workers, move[0] if move else 1)
            ex = flow.start(workers, max_workers=pool, checkpoint=cfg)
            t0 = ex.restored.time if ex.restored is not None else 0
            if prev_out is not None:  # what the previous run delivered before this one's start
                got.extend(p for p in prev_out.items if prev_t <= p[0] < t0)
            if move is not None:
                ex.rescale(move[0], at=t0 + move[1])
            if last:
                ex.run()
            else:
                for _ in range(steps):
                    if not ex.step():
                        break
                ex.coordinator.abort()  # the process "dies" here
        assert all(p[0] >= t0 for p in out.items)  # nothing before the checkpoint again
        prev_out, prev_t = out, t0
    got.extend(p for p in prev_out.items if p[0] >= prev_t)
    assert sorted(got) == want
    assert flow.state(op, format="dict") == want_state
