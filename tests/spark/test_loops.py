"""Iterate scopes and frontier operators on Spark (tstate.spark.rounds, .frontier): the
same outputs and state as the embedded engine, across batches, restarts and rescaling."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import SparkError
from tstate.progress import Product
from tstate.spark import Backend, Source
from tstate.spark.plan import Plan
from tstate.spark.rounds import minimal, round_frontier

ROW = "k string, hops long, t long"
KEYS = "abcdefg"

loop_settings = settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _next(k: str) -> str:
    return KEYS[(KEYS.index(k) * 3 + 1) % len(KEYS)]


def walks(delay: int = 0) -> tuple[ts.Dataflow, Any, Any]:
    """Walks of ``hops`` steps over the keys, inside a loop with an exchange and a keyed
    operator with timers at loop times; their results leave the loop into a keyed
    operator with epoch timers.  With ``delay``, a root frontier operator also repeats
    every walk ``delay`` epochs later (held across micro-batches on Spark)."""
    flow = ts.Dataflow("walks")
    inp = flow.input("walks")
    starts = inp.map(lambda r: (r["k"], r["hops"], r["t"]))
    if delay:

        @flow.unary_frontier(starts, name="again")
        def again(i: Any, out: Any, ctx: Any) -> None:
            for cap, batch in i:
                out.give_many(cap, batch)
                later = cap.delayed(cap.time + delay)
                out.give_many(later, [(k, h, t + delay) for k, h, t in batch if h % 2 == 0])
                later.drop()

        starts = again

    @flow.iterate(starts, name="walk")
    def walk(scope: Any, entered: Any) -> Any:
        fb = scope.feedback(name="walk.fb")
        moving = entered.concat(fb.stream).exchange(lambda r: r[0], name="walk.spread")

        # one state per (key, epoch of the walk): no two epochs touch the same state
        @flow.stateful(moving, key=lambda r: (r[0], r[2]), state=int, name="visit")
        def visit(n: int, rec: Any, ctx: Any) -> int:
            k, hops, e = rec
            if hops > 0:
                ctx.emit(("go", _next(k), hops - 1, e))
            else:
                ctx.emit(("end", k, e))
            if n == 0:
                ctx.notify_at(Product(ctx.time.outer, ctx.time.inner + 2))
            return n + 1

        @visit.on_notify
        def tick(n: int, t: Any, ctx: Any) -> int:
            ctx.emit(("tick", ctx.key[0], ctx.key[1], n, t.inner))
            return n

        fb.connect(visit.filter(lambda r: r[0] == "go").map(lambda r: r[1:]))
        return visit.filter(lambda r: r[0] != "go")

    @flow.stateful(walk, key=lambda r: r[1], state=int, name="tally")
    def tally(n: int, rec: Any, ctx: Any) -> int:
        ctx.notify_at(ctx.time)
        return n + 1

    @tally.on_notify
    def report(n: int, t: Any, ctx: Any) -> int:
        ctx.emit((ctx.key, n))
        return n

    return flow, walk.collect(), tally.collect()


def embedded(rows: list[dict], workers: int = 2, delay: int = 0) -> tuple[list, list]:
    flow, out, totals = walks(delay)
    ex = flow.start(workers)
    (handle,) = flow.inputs
    for t in sorted({r["t"] for r in rows}):
        handle.send([r for r in rows if r["t"] == t], t)
        handle.advance_to(t + 1)
    handle.close()
    ex.run()
    return sorted(out.items, key=repr), sorted(totals.items, key=repr)


def on_spark(
    spark: Any, rows: list[dict], tmp: str, partitions: int, epochs: int = 1, delay: int = 0, local: bool = True, **kw: Any
) -> tuple:
    flow, out, totals = walks(delay)
    backend = Backend(spark, checkpoint=tmp, partitions=partitions, local_loops=(64 << 20) if local else 0)
    df = spark.createDataFrame(rows, ROW) if rows else spark.createDataFrame([], ROW)
    backend.run(flow, {"walks": Source(df, time="t")}, epochs_per_batch=epochs, **kw)
    return sorted(out.items, key=repr), sorted(totals.items, key=repr), backend


rows_st = st.lists(
    st.fixed_dictionaries({"k": st.sampled_from(KEYS), "hops": st.integers(0, 3), "t": st.integers(0, 2)}),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("local", [True, False], ids=["one-task", "spread"])
@settings(loop_settings, max_examples=3)
@given(rows=rows_st, partitions=st.integers(1, 3), epochs=st.integers(1, 2), delay=st.sampled_from([0, 1]))
def test_loops_equal_the_embedded_engine(
    spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int, delay: int, local: bool
) -> None:
    """Rounds spread over the partitions (one stage each) or all in one task per batch
    (small state: ``local_loops``) give the embedded engine's results."""
    ref = embedded(rows, workers=2, delay=delay)
    got = on_spark(spark, rows, str(tmp_path_factory.mktemp("ck")), partitions, epochs, delay, local)
    assert got[:2] == ref
    m = got[2].metrics.batches
    rounds, stages = sum(b.loop_rounds for b in m), sum(b.loop_stages for b in m)
    assert rounds > 0
    if local:
        assert stages <= len(m)  # one stage per batch with loop work


def test_loop_state_survives_a_restart_on_other_partitions_and_a_live_rescale(spark: Any, tmp_path: Any) -> None:
    """The state files rounds spread over partitions wrote are read by loops run in one
    task after a restart on 3 partitions and a rescale to 1."""
    rows = [{"k": KEYS[i % 7], "hops": i % 4, "t": i // 3} for i in range(12)]
    ref_out, ref_tot = embedded(rows, workers=3, delay=1)
    d = str(tmp_path / "ck")
    flow, out1, tot1 = walks(delay=1)
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, ROW)
    b1 = Backend(spark, checkpoint=d, partitions=2, local_loops=0)  # rounds spread, then in one task
    b1._prepare(flow, {"walks": Source(df, time="t")})
    for lo in range(2):  # epochs 0 and 1, then the driver "dies"
        b1._batch({"walks": df.where(F.col("t") == lo)}, {"walks": Source(df, time="t")}, lo, lo, lo + 1, None)
    head = b1.store.head
    assert head is not None and head.meta["spark"]["held"]  # the walks repeated at epoch 2 are held
    flow2, out2, tot2 = walks(delay=1)
    b2 = Backend(spark, checkpoint=d, partitions=3)
    b2.run(flow2, {"walks": Source(df, time="t")}, reconfigure=[(3, ts.Rescale(1, strategy="all-at-once"))])
    assert b2.metrics.batches[0].batch == 2 and b2.metrics.batches[0].partitions == 3
    assert b2.metrics.batches[-1].partitions == 1
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert sorted(tot1.items + tot2.items, key=repr) == ref_tot


def _graph_flow(algos: list[str], **options: Any) -> tuple[ts.Dataflow, Any, dict]:
    """apps/graph's dataflow over ``(epoch, src, dst, delta)`` rows: the flow, its
    input and a collecting sink per output."""
    from apps.graph.stream import build

    f = ts.Dataflow("graph")
    u = f.input("updates")
    an = build(f, u.map(lambda r: tuple(r[1:])), algos, bins=16, **options)
    return f, u, {n: s.collect() for n, s in an.outputs().items()}


def _embedded_graph(upd: list, epochs: int, workers: int, algos: list[str], **options: Any) -> tuple[dict, dict]:
    """The embedded engine's changes per output (sorted) over ``epochs`` epochs of
    ``upd``, and its sinks."""
    f, u, outs = _graph_flow(algos, **options)
    ex = f.start(workers)
    for e in range(epochs):
        u.send([r for r in upd if r[0] == e], time=e)
        u.advance_to(e + 1)
    u.close()
    ex.run()
    return {n: sorted(c.items, key=repr) for n, c in outs.items()}, outs


def test_graph_app_on_spark_equals_the_embedded_engine(spark: Any, tmp_path: Any) -> None:
    """apps/graph (sliding window, epoch-sequenced loops, frontier operators) on Spark:
    every algorithm's changes equal the embedded engine's, PageRank's floats too."""
    import random

    rng = random.Random(7)
    upd: list[tuple[int, int, int, int]] = []
    present: list[tuple[int, int]] = []
    for e in range(3):
        for _ in range(5):
            a, b = rng.randrange(9), rng.randrange(9)
            if a != b:
                upd.append((e, a, b, 1))
                present.append((a, b))
        if present:
            a, b = present.pop(rng.randrange(len(present)))
            upd.append((e, a, b, -1))

    for algos, workers in ((["degrees", "components", "triangles"], 2), (["pagerank"], 2)):
        ref, _ = _embedded_graph(upd, 3, 1, algos, window_width=2, tol=1e-3, blocks=2)
        f, _u, outs = _graph_flow(algos, window_width=2, tol=1e-3, blocks=2)
        df = spark.createDataFrame(upd, "t long, src long, dst long, delta long")
        Backend(spark, checkpoint=str(tmp_path / algos[0]), partitions=workers).run(f, {"updates": Source(df, time="t", record="tuple")})
        assert {n: sorted(c.items, key=repr) for n, c in outs.items()} == ref
        assert all(ref.values())


# -- the rounds' frontier ----------------------------------------------------------------

def test_round_frontier_processes_the_minimal_times_only() -> None:
    P = Product
    pending = {P(0, 3), P(0, 5), P(1, 0), P(2, 7)}
    now = minimal(pending)
    assert now == [P(0, 3), P(1, 0)]  # (0, 3) and (1, 0) are incomparable: one round
    front = round_frontier(pending, now, hi=2)
    # what is left, what the round may feed back, and the next batch's epochs
    assert front == [P(0, 4), P(1, 1), P(2, 0)]
    assert round_frontier(pending, now, hi=None) == [P(0, 4), P(1, 1)]  # (2, 7) is after (1, 1)


# -- what cannot be lowered ----------------------------------------------------------------

def _frontier_flow(logic: Any, **kw: Any) -> ts.Dataflow:
    flow = ts.Dataflow("f")
    inp = flow.input("x")
    op = flow.unary_frontier(inp, name="op", **kw)(logic)
    op.collect()
    return flow


def _passthrough(i: Any, out: Any, ctx: Any) -> None:
    for cap, batch in i:
        out.give_many(cap, batch)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"state": list}, r"operator 'op' \(unary_frontier\) keeps per-worker state"),
        ({"exchange": lambda r: r}, r"operator 'op' \(unary_frontier\) exchanges its input by key"),
    ],
)
def test_frontier_operators_that_cannot_be_fused_are_refused_by_the_plan(kw: dict, match: str) -> None:
    with pytest.raises(SparkError, match=match):
        Plan.of(_frontier_flow(_passthrough, **kw))


def _notifies(i: Any, out: Any, ctx: Any) -> None:
    for cap, _batch in i:
        ctx.notify_at(cap.time + 1)


_kept: list[Any] = []


def _keeps(i: Any, out: Any, ctx: Any) -> None:
    for cap, _batch in i:
        _kept.append(cap.retain())  # (one no longer referenced is dropped, as on the embedded engine)


def _reads_frontier(i: Any, out: Any, ctx: Any) -> None:
    i.frontier


@pytest.mark.parametrize(
    "logic, match",
    [
        (_notifies, r"operator 'op' asks for a notification"),
        (_keeps, r"operator 'op' keeps a capability at 0 beyond its activation"),
        (_reads_frontier, r"operator 'op' reads its input frontier"),
    ],
)
def test_frontier_operators_holding_time_fail_clearly(spark: Any, tmp_path: Any, logic: Any, match: str) -> None:
    flow = _frontier_flow(logic)
    with pytest.raises(Exception, match=match):
        Backend(spark, checkpoint=str(tmp_path), partitions=1).run(flow, {"x": spark.createDataFrame([(1,)], "v long")})
    assert Backend(spark, checkpoint=str(tmp_path), partitions=1).store.head is None  # nothing committed


def test_nested_loops_are_refused() -> None:
    flow = ts.Dataflow("n")
    inp = flow.input("x")

    @flow.iterate(inp, name="outer")
    def outer(scope: Any, x: Any) -> Any:
        @flow.iterate(x, name="inner")
        def inner(scope2: Any, y: Any) -> Any:
            return y.map(lambda v: v)

        return inner

    with pytest.raises(SparkError, match=r"nested iterate scope \('inner'\)"):
        Plan.of(flow)


@pytest.mark.parametrize("local", [True, False], ids=["one-task", "spread"])
def test_pagerank_of_a_hub_on_spark(spark: Any, tmp_path: Any, local: bool) -> None:
    """PageRank in two blocks over 2 partitions: a hub, its blocks' state written after
    every round (spread) or at the end of the batch (one task), in the middle of an
    epoch or between epochs; the changes equal the embedded engine's exactly (PageRank
    sums in an order fixed by the data: the same on any number of workers)."""
    upd = [(0, i, 0, 1) for i in range(1, 40)] + [(0, 0, 99, 1)]
    upd += [(1, i, 0, 1) for i in range(40, 50)] + [(1, 99, 1, 1)]

    ref, outs = _embedded_graph(upd, 2, 1, ["pagerank"], tol=1e-6, blocks=2)
    assert max(c.new for _t, c in outs["pagerank"].items if c.new is not None) > 0.3
    f, _u, outs = _graph_flow(["pagerank"], tol=1e-6, blocks=2)
    df = spark.createDataFrame(upd, "t long, src long, dst long, delta long")
    # one epoch per batch: the second batch's epoch starts from the hub's stored score
    Backend(spark, checkpoint=str(tmp_path), partitions=2, local_loops=(64 << 20) if local else 0).run(
        f, {"updates": Source(df, time="t", record="tuple")}
    )
    assert {n: sorted(c.items, key=repr) for n, c in outs.items()} == ref
