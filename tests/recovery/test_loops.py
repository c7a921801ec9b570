"""Checkpoints of dataflows with stateful operators inside iterate scopes: a checkpoint
at epoch ``T`` holds the state after every iteration of the epochs before ``T``; a run
abandoned at a random step and resumed on another worker count gives the uninterrupted
run's output."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts


def build(batches: list[tuple[int, list[int]]]) -> tuple[ts.Dataflow, ts.Collected]:
    """Records ``(epoch, value)``; in the loop, per-(epoch, key) sums reported after every
    iteration (keyed by epoch, so iterations of different epochs, which the product order
    lets interleave, never share a state); then a root-scope sum per key per epoch."""
    flow = ts.Dataflow("loop-ckpt")
    src = flow.source(ts.io.from_batches([(t, [(t, v) for v in vs]) for t, vs in batches]), name="src")

    def body(scope: Any, entered: ts.Stream) -> ts.Stream:
        fb = scope.feedback(max_iterations=3)

        @flow.stateful(entered.concat(fb.stream), key=lambda r: (r[0], r[1] % 7), state=int, bins=8, name="inner")
        def inner(n: int, r: tuple, ctx: ts.Context) -> int:
            ctx.notify_at(ctx.time)
            ctx.emit((r[0], r[1] + 1))
            return n + r[1]

        @inner.on_notify
        def after(n: int, t: Any, ctx: ts.Context) -> None:
            ctx.emit(("sum", t.inner, ctx.key, n))  # the inner state: a lost or doubled update shows

        fb.connect(inner.filter(lambda r: r[0] != "sum"))
        return inner

    out = flow.iterate(src, name="it")(body)
    sums = out.filter(lambda r: r[0] == "sum")

    @flow.stateful(out.filter(lambda r: r[0] != "sum"), key=lambda r: r[1] % 5, state=int, bins=4, name="total")
    def total(n: int, r: tuple, ctx: ts.Context) -> int:
        ctx.notify_at(ctx.time)  # after every record of the epoch
        return n + r[1]

    @total.on_notify
    def report(n: int, t: int, ctx: ts.Context) -> None:
        ctx.emit(("total", ctx.key, n))

    return flow, total.concat(sums).collect()


@settings(max_examples=12, deadline=None)
@given(
    records=st.lists(st.lists(st.integers(0, 30), max_size=5), min_size=3, max_size=8),
    every=st.integers(1, 3),
    stop=st.integers(0, 40),
    w1=st.integers(1, 4),
    w2=st.integers(1, 4),
    mode=st.sampled_from(["sync", "async"]),
)
def test_abandoned_and_resumed_on_other_workers(
    tmp_path_factory: Any, records: list, every: int, stop: int, w1: int, w2: int, mode: str
) -> None:
    batches = list(enumerate(records))
    flow, out = build(batches)
    flow.run(workers=w1)
    want = sorted(out.items)
    cfg = ts.Checkpoints(str(tmp_path_factory.mktemp("ck")), every_epochs=every, mode=mode)
    flow1, out1 = build(batches)
    ex = flow1.start(w1, checkpoint=cfg)
    for _ in range(stop):
        if not ex.step():
            break
    ex.coordinator.abort()  # the process "dies" here
    flow2, out2 = build(batches)
    ex2 = flow2.start(w2, checkpoint=cfg)
    t0 = ex2.restored.time if ex2.restored is not None else 0
    ex2.run()
    got = [(t, r) for t, r in out1.items if t < t0] + list(out2.items)
    assert all(t >= t0 for t, _ in out2.items)
    assert sorted(got) == want
