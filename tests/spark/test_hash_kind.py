"""The Spark backend refuses to resume a checkpoint whose operator's keys were binned
with another hash than its key uses now (:mod:`tstate.hash_kind`), before any batch
runs; the same kind resumes."""

from __future__ import annotations

from typing import Any

import pytest

import tstate as ts
from tstate.errors import ConfigurationError
from tstate.hash_kind import HashKind
from tstate.spark import Backend, Source

ROW = "k string, v long, t long"


def build(key: Any) -> tuple[ts.Dataflow, Any, Any]:
    flow = ts.Dataflow("hashes")
    ev = flow.input("events")

    @flow.stateful(ev, key=key, state=int, bins=8, name="count")
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], n + 1))
        return n + 1

    return flow, count, count.collect()


def run(spark: Any, ck: str, key: Any, rows: list[dict]) -> tuple[Backend, Any, Any]:
    flow, op, out = build(key)
    backend = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")})
    return backend, op, out


FIRST = [{"k": f"k{i % 5}", "v": i, "t": i % 2} for i in range(20)]
LATER = [{"k": f"k{i % 5}", "v": i, "t": 2 + i % 2} for i in range(10)]


@pytest.mark.parametrize(
    "first, then, stored, declared",
    [(lambda r: r["k"], ts.col("k"), "key_hash", "spark_xxhash64"), (ts.col("k"), lambda r: r["k"], "spark_xxhash64", "key_hash")],
    ids=["function-then-col", "col-then-function"],
)
def test_resuming_with_the_other_hash_kind_is_refused(spark: Any, tmp_path: Any, first, then, stored, declared) -> None:
    ck = str(tmp_path / "ck")
    backend, _, _ = run(spark, ck, first, FIRST)
    kind = backend.store.head.operators["count"].hash
    assert kind is HashKind(stored)
    flow, _, out = build(then)
    again = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    with pytest.raises(ConfigurationError) as err:
        again.run(flow, {"events": Source(spark.createDataFrame(LATER, ROW), time="t")})
    msg = str(err.value)
    assert "'count'" in msg and repr(stored) in msg and repr(declared) in msg
    assert out.items == [] and again.metrics.batches == []  # refused before any batch ran


def test_the_same_hash_kind_resumes(spark: Any, tmp_path: Any) -> None:
    """The driver stops after the batches of times 0 and 1; a new backend resumes."""
    from pyspark.sql import functions as F

    ck = str(tmp_path / "ck")
    df = spark.createDataFrame(FIRST + LATER, ROW)
    flow, _, _ = build(ts.col("k"))
    first = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    first._prepare(flow, {"events": Source(df, time="t")})
    for lo in range(2):
        first._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    backend, op, _ = run(spark, ck, ts.col("k"), FIRST + LATER)
    assert backend.metrics.batches and sum(b.records for b in backend.metrics.batches) == len(LATER)
    assert backend.store.head.operators["count"].hash is HashKind.SPARK_XXHASH64
    state = {r["key"]: r["value"] for r in backend.state(op).frame.collect()}
    assert state == {f"k{i}": 6 for i in range(5)}
