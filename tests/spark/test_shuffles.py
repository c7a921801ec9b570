"""Shuffles (``tstate.spark.shuffles``): partition labels without a Spark job (the Python
reproduction of Spark's hash equals Spark's own, and each label lands on its partition
when Spark repartitions on it) and the TICK rows every stage unions in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


pytest.importorskip("pyspark")

from tstate.spark.shuffles import Shuffles, partition_of, spark_hash_int  # noqa: E402
from tstate.spark.wire import SCHEMA, TICK  # noqa: E402


def test_hash_equals_sparks_own(spark: Any) -> None:
    values = [0, 1, -1, 7, -7, 42, 2**31 - 1, -(2**31), 123456789, -987654321]
    values += list(range(-300, 300, 13))
    got = spark.createDataFrame([(v,) for v in values], "v int").selectExpr("v", "hash(v) as h").collect()
    assert {r["v"]: r["h"] for r in got} == {v: spark_hash_int(v) for v in values}


def test_labels_land_on_their_partitions(spark: Any) -> None:
    for n in (1, 2, 3, 5):
        labels = Shuffles(spark).labels(n)
        assert len(set(labels)) == n
        df = spark.createDataFrame([(lab,) for lab in labels], "l int").repartition(n, "l")
        placed = df.rdd.mapPartitionsWithIndex(lambda p, rows: [(r["l"], p) for r in rows]).collect()
        assert dict(placed) == {lab: p for p, lab in enumerate(labels)}


@settings(max_examples=200)
@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, 64))
def test_partition_is_a_nonnegative_modulus(value: int, n: int) -> None:
    p = partition_of(value, n)
    assert 0 <= p < n and (spark_hash_int(value) - p) % n == 0


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
