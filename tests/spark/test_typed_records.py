"""Typed records: ``Source(df, record=Event)`` builds records of a record class from
the columns, column by column, on both Spark paths (a column key's one stage and a key
function's shuffle), with the same results as the embedded engine fed the same
objects; a class crossing a shuffle as Arrow rows is rebuilt only if registered."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import ConfigurationError, RecordClassError, SparkError
from tstate.spark import Backend, Source
from tstate.spark.record_types import RecordTypes
from tstate.spark.records import decode_records, encode_rows, rows_to_records

from .typed_events import Event, Pair

ROW = "k string, v long, t long"
rows_st = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(-2, 9), st.integers(0, 3)), max_size=30)


def test_rows_become_instances_column_by_column() -> None:
    batch = pa.record_batch({"t": [1, 2], "k": ["a", "b"], "v": [5, 6], "extra": [0, 0]})
    assert rows_to_records(batch, Event) == [Event("a", 5, 1), Event("b", 6, 2)]
    assert rows_to_records(batch, Pair) == [Pair(5, "a"), Pair(6, "b")]
    with pytest.raises(SparkError, match=r"no column\(s\) 'k'"):
        rows_to_records(batch.drop_columns(["k"]), Event)


def test_arrow_cells_rebuild_only_registered_classes() -> None:
    cell = encode_rows(pa.record_batch({"k": ["a"], "v": [1], "t": [0]}), Event)
    assert decode_records(cell, RecordTypes.from_classes([Event])) == [Event("a", 1, 0)]
    with pytest.raises(RecordClassError, match="typed_events:Event"):
        decode_records(cell)


def flow_of(key: Any) -> tuple[Any, Any]:
    flow = ts.Dataflow("typed")
    ev = flow.input("events")

    @flow.stateful(ev.filter(lambda e: e.v >= 0), key=key, state=int, bins=8)
    def total(n: int, e: Event, ctx: ts.Context) -> int:
        ctx.emit((e.k, ctx.time, n + e.v))
        return n + e.v

    return flow, total.collect()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=rows_st, column=st.booleans())
def test_same_output_as_embedded(spark: Any, tmp_path_factory: Any, rows: list, column: bool) -> None:
    key = ts.col("k") if column else (lambda e: e.k)
    flow, out = flow_of(key)
    (ev,) = flow.inputs
    for t in sorted({r[2] for r in rows}):
        ev.send([Event(k, v, tt) for k, v, tt in rows if tt == t], time=t)
    ev.close()
    flow.run(workers=1)
    flow2, out2 = flow_of(key)
    df = spark.createDataFrame(rows, ROW)
    Backend(spark, checkpoint=str(tmp_path_factory.mktemp("ck")), partitions=2).run(
        flow2, {"events": Source(df, time="t", record=Event)}
    )
    assert sorted(out2.items) == sorted(out.items)


def test_a_class_without_the_columns_is_refused(spark: Any, tmp_path: Any) -> None:
    flow, _ = flow_of(ts.col("k"))
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(ConfigurationError, match=r"field\(s\) 't' that are not columns"):
        Backend(spark, checkpoint=str(tmp_path), partitions=1).run(flow, {"events": Source(df, record=Event)})
