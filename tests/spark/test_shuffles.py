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
