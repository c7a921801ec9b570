"""``BatchMetrics.records`` counts the rows the inputs gave, each once
(:mod:`tstate.spark.input_rows`): not once per operator keyed alike, per exchange
after a stateful operator or per loop round (issue 24: the CEP app's two patterns
showed ``63,356 in`` for 31,678 flights)."""

from __future__ import annotations

from typing import Any

import tstate as ts
from tstate.spark import Backend, Source

from .test_loops import on_spark


def test_two_operators_keyed_alike_count_each_input_row_once(spark: Any, tmp_path: Any) -> None:
    flow = ts.Dataflow("twins")
    ev = flow.input("events")
    for name in ("a", "b"):  # two patterns keyed by the same column: one shuffle cell, two operators

        @flow.stateful(ev, key=lambda r: r["k"], state=int, bins=8, name=name)
        def count(n: int, r: dict, ctx: ts.Context) -> int:
            ctx.emit((r["k"], n + 1))
            return n + 1

        count.sink(ts.io.keep(), name=f"{name}.kept")
    dropped = ev.filter(lambda r: r["v"] % 2 == 0)  # a filtered stream too: rows, not records, are counted

    @flow.stateful(dropped, key=lambda r: r["v"], state=int, bins=4, name="even")
    def even(n: int, r: dict, ctx: ts.Context) -> int:
        return n + 1

    rows = [{"k": f"k{i % 7}", "v": i, "t": i % 3} for i in range(90)]
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2, progress=False)
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, "k string, v long, t long"), time="t")}, epochs_per_batch=2)
    batches = backend.metrics.batches
    assert sum(b.records for b in batches) == 90
    assert [b.records for b in batches] == [60, 30]  # epochs 0-1, epoch 2 (which closes the inputs)
    assert sum(b.operator_records for b in batches) == 90 + 90 + 45


def test_a_loop_counts_its_input_rows_not_its_rounds(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": k, "hops": 3, "t": t} for t in range(3) for k in ("a", "b")]
    *_, backend = on_spark(spark, rows, str(tmp_path / "ck"), 2, epochs=1)
    batches = backend.metrics.batches
    assert sum(b.records for b in batches) == len(rows) == 6
    assert sum(b.operator_records for b in batches) > 6  # every hop of every walk


def test_the_column_key_one_stage_path_counts_each_input_row_once(spark: Any, tmp_path: Any) -> None:
    """Two operators keyed alike by ``ts.col`` run in the input's own task
    (:mod:`tstate.spark.colocated`): that task counts the input's rows, once."""
    from tstate.spark.colocated import colocated_boundaries
    from tstate.spark.plan import Plan

    flow = ts.Dataflow("twins_by_col")
    ev = flow.input("events")
    for name in ("a", "b"):

        @flow.stateful(ev, key=ts.col("k"), state=int, bins=8, name=name)
        def count(n: int, r: dict, ctx: ts.Context) -> int:
            ctx.emit((r["k"], n + 1))
            return n + 1

        count.sink(ts.io.keep(), name=f"{name}.kept")
    assert colocated_boundaries(Plan.of(flow), "events") is not None  # the one-stage path
    rows = [{"k": f"k{i % 7}", "v": i, "t": i % 3} for i in range(90)]
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2, progress=False)
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, "k string, v long, t long"), time="t")}, epochs_per_batch=2)
    batches = backend.metrics.batches
    assert [b.records for b in batches] == [60, 30]  # epochs 0-1, epoch 2 (which closes the inputs)
    assert sum(b.operator_records for b in batches) == 90 + 90
