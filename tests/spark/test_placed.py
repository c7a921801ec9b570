"""A batch run's column-keyed input is partitioned once per run
(``tstate.spark.placed``): the micro-batches run on the placed frame without adding the
bin columns or shuffling again, and compute what the embedded engine computes; after a
rescale a batch shuffles again onto the new owners."""

from __future__ import annotations

from typing import Any

import tstate as ts
from tstate.spark import stages

from .test_colocated import embedded, run_spark


def _spy(monkeypatch: Any) -> list[int]:
    """The partitions of every batch that computed the bin columns itself."""
    calls: list[int] = []
    real = stages.partition_columns

    def spying(key: Any, types: Any, bins: int, owners: list[int], labels: tuple[int, ...]) -> Any:
        calls.append(len(labels))
        return real(key, types, bins, owners, labels)

    monkeypatch.setattr(stages, "partition_columns", spying)
    return calls


def test_batches_run_on_the_placed_frame(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    rows = [{"k": f"k{i % 19}", "v": i % 5, "t": i // 30} for i in range(240)]
    ref = embedded(rows)
    calls = _spy(monkeypatch)
    out, state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 2)
    assert (out, state) == ref
    assert len(backend.metrics.batches) == 8  # one per epoch, the last closing the inputs
    assert calls == []  # no batch added the columns or shuffled


def test_a_rescale_shuffles_again(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    rows = [{"k": f"k{i % 23}", "v": i % 7, "t": i // 25} for i in range(250)]
    ref = embedded(rows)
    calls = _spy(monkeypatch)
    out, state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 2, reconfigure=[(3, ts.Rescale(3))])
    assert (out, state) == ref
    assert calls and set(calls) == {3}  # only the batches after the rescale, onto 3 partitions
    assert backend.metrics.batches[-1].partitions == 3


def test_one_partition_is_placed_without_a_shuffle(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Onto one partition the frame (here in two) is read in order into one task: no
    shuffle and no sort, the same output and state as the embedded engine."""
    from tstate.spark import placed

    frames: list[Any] = []
    real = placed._in_order

    def spying(df: Any, partitions: int, map_order: bool = False) -> Any:
        frames.append(real(df, partitions, map_order))
        return frames[-1]

    monkeypatch.setattr(placed, "_in_order", spying)
    rows = [{"k": f"k{i % 17}", "v": i % 5, "t": i // 40} for i in range(240)]
    ref = embedded(rows)
    out, state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 1, epochs=2)
    assert (out, state) == ref
    (frame,) = frames
    assert frame.rdd.getNumPartitions() == 1
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan and "Sort" not in plan, plan


def test_the_placed_frame_carries_only_what_its_task_reads(spark: Any) -> None:
    """No destination column (the rows are on their partitions); a record-class input
    keeps only its fields, the key's and time columns and the bin."""
    import collections

    from tstate.spark import Source
    from tstate.spark.binned import BIN
    from tstate.spark.placed import place
    from tstate.spark.plan import Plan

    from .flows import keyed

    flow, *_ = keyed(key=ts.col("k"))
    plan = Plan.of(flow)
    (b,) = [n for n in plan.boundaries if plan.feeders.get(n) == ["events"]]
    owners = {n: [i % 2 for i in range(plan.nodes[n].bins)] for n in plan.boundaries}
    df = spark.createDataFrame([("a", 1, 0, "x")], "k string, v long, t long, junk string")
    Rec = collections.namedtuple("Rec", "v")
    for record, want in (("dict", ["k", "v", "t", "junk", BIN]), (Rec, ["k", "v", "t", BIN])):
        bound, placed = place(plan, {"events": Source(df, time="t", record=record)}, owners, 2, (0, 1), False)
        assert bound["events"].df.columns == want, record
        assert set(placed) == {"events"}


def test_one_executor_places_without_a_sort_and_keeps_each_keys_order(spark: Any, tmp_path: Any) -> None:
    """On ``local[N]`` (one executor in the driver) the placement's shuffle keeps the
    frame's order, so no partition is sorted back; an order-sensitive operator keyed by
    a column, over a frame of 4 partitions with every key's epoch in each, still sees
    its records in the frame's order (the embedded engine's)."""
    from tstate.spark import Backend, Source, placed

    from .test_key_order import ROWS, FRAME, Seq

    def flow_of() -> tuple[ts.Dataflow, Any, Any, Any]:
        flow = ts.Dataflow("order")
        ev = flow.input("events")

        @flow.stateful(ev, key=ts.col("k"), state=Seq, bins=8)
        def seq(s: Seq, r: dict, ctx: ts.Context) -> None:
            s.vs.append(r["v"])
            ctx.notify_at(ctx.time)

        @seq.on_notify
        def done(s: Seq, t: int, ctx: ts.Context) -> None:
            ctx.emit((ctx.key, t, tuple(s.vs)))

        return flow, ev, seq, seq.collect()

    flow, ev, _seq, ref = flow_of()
    for t in sorted({r["t"] for r in ROWS}):
        ev.send([r for r in ROWS if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    df = spark.range(0, len(ROWS), 1, 4).selectExpr(*FRAME)
    assert placed.one_executor(df)
    flow2, _ev, _seq2, out = flow_of()
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2, progress=False)
    backend.run(flow2, {"events": Source(df, time="t")}, epochs_per_batch=2)
    assert sorted(out.items) == sorted(ref.items)
    (frame,) = [s.df for s in placed.place(backend._job.plan, {"events": Source(df, time="t")},
                                          backend._rescaling.owners, 2, (0, 1), False)[0].values()]  # fmt: skip
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" in plan and "Sort" not in plan, plan
