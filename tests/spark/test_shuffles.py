"""Shuffles: partition labels and the TICK rows every stage unions in."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from tstate.spark.shuffles import Shuffles  # noqa: E402
from tstate.spark.wire import SCHEMA, TICK  # noqa: E402


@pytest.mark.parametrize("n", [1, 3])
def test_ticks_one_row_per_partition_with_the_wire_schema(spark: Any, n: int) -> None:
    sh = Shuffles(spark)
    labels = sh.labels(n)
    ticks = sh.ticks((7, 9), labels)
    want = spark.createDataFrame([], SCHEMA).schema
    assert [(f.name, f.dataType) for f in ticks.schema] == [(f.name, f.dataType) for f in want]
    assert sorted(tuple(r) for r in ticks.collect()) == sorted((TICK, lab, 7, 0, 0, b"") for lab in labels)
    # each tick lands on the partition its label names, after the stages' repartition
    placed = ticks.repartition(n, "dest").rdd.mapPartitionsWithIndex(lambda p, rows: [(p, r["dest"]) for r in rows])
    assert sorted(placed.collect()) == [(p, labels[p]) for p in range(n)]
    # unions with a wave's rows by position (the stages' unionAll)
    wave = spark.createDataFrame([(0, labels[0], 7, 1, 2, b"x")], SCHEMA)
    assert ticks.unionAll(wave).count() == n + 1
    assert sh.ticks(7, labels) is ticks  # cached per first node and labels


def test_spark_int_hash_is_sparks_hash(spark: Any) -> None:
    """The labels are computed in Python: the hash must be Spark's own, bit for bit."""
    from tstate.spark.shuffles import spark_int_hash

    rows = spark.range(-300, 700).selectExpr("cast(id as int) as id", "hash(cast(id as int)) as h").collect()
    extremes = spark.sql("select hash(cast(2147483647 as int)) as a, hash(cast(-2147483648 as int)) as b").collect()[0]
    assert [spark_int_hash(int(r["id"])) for r in rows] == [int(r["h"]) for r in rows]
    assert (spark_int_hash(2**31 - 1), spark_int_hash(-(2**31))) == (int(extremes["a"]), int(extremes["b"]))


@pytest.mark.parametrize("n", [1, 2, 5, 64])
def test_labels_land_on_their_partitions(spark: Any, n: int) -> None:
    labels = Shuffles(spark).labels(n)
    assert len(set(labels)) == n
    df = spark.createDataFrame([(lab,) for lab in labels], "dest int").repartition(n, "dest")
    placed = df.rdd.mapPartitionsWithIndex(lambda p, rows: [(p, r["dest"]) for r in rows]).collect()
    assert sorted(placed) == [(p, labels[p]) for p in range(n)]
