"""Spark tasks run under the driver's collector thresholds (tstate.spark.collector),
and the CPU switch of tstate.spark.profiling reports the collector's share."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest

from tstate.spark.collector import with_driver_thresholds
from tstate.spark.profiling import CPU_ENV, profiled


def _thresholds_task(batches: Iterable[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for b in batches:
        t = gc.get_threshold()
        yield pa.RecordBatch.from_pydict({"a": [t[0]] * b.num_rows, "b": [t[1]] * b.num_rows, "c": [t[2]] * b.num_rows})


def test_a_spark_task_runs_under_the_thresholds_its_task_was_built_with(spark: Any) -> None:
    old = gc.get_threshold()
    gc.set_threshold(43210, 17, 19)
    try:
        task = profiled(_thresholds_task, "test")
    finally:
        gc.set_threshold(*old)
    rows = spark.range(4, numPartitions=2).mapInArrow(task, "a long, b long, c long").collect()
    assert {(r.a, r.b, r.c) for r in rows} == {(43210, 17, 19)}
    # and the worker gets its own back: a task built under the defaults sees them
    plain = spark.range(2, numPartitions=1).mapInArrow(with_driver_thresholds(_thresholds_task), "a long, b long, c long")
    assert {(r.a, r.b, r.c) for r in plain.collect()} == {old}


def test_the_thresholds_come_back_when_the_task_fails() -> None:
    def failing(batches: Iterable[Any]) -> Iterator[Any]:
        yield 1
        raise ValueError("boom")

    old = gc.get_threshold()
    gc.set_threshold(999, 9, 9)
    try:
        task = with_driver_thresholds(failing)
    finally:
        gc.set_threshold(*old)
    it = task([])
    assert next(it) == 1 and gc.get_threshold() == (999, 9, 9)
    with pytest.raises(ValueError):
        next(it)
    assert gc.get_threshold() == old


def test_the_cpu_switch_writes_cpu_and_collector_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_ENV, str(tmp_path))

    def garbage(batches: Iterable[Any]) -> Iterator[Any]:
        for _ in batches:
            cycles = []
            for _i in range(20000):
                a: list[Any] = []
                a.append(a)
                cycles.append(a)
            gc.collect(0)
            yield len(cycles)

    assert list(profiled(garbage, "kind")([1, 2])) == [20000, 20000]
    (f,) = os.listdir(tmp_path)
    assert f.startswith("kind-") and f.endswith(".cpu")
    cpu, gc_s, n0, n1, n2, _wall, _in_wall, _in_cpu = (tmp_path / f).read_text().split()
    assert float(cpu) >= float(gc_s) > 0 and int(n0) >= 2 and int(n1) >= 0 and int(n2) >= 0


def test_the_cpu_switch_splits_off_the_time_spent_waiting_for_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_ENV, str(tmp_path))

    def slow_input() -> Iterator[int]:
        for i in range(3):
            time.sleep(0.05)  # (the JVM producing the next batch)
            yield i

    def task(batches: Iterable[Any]) -> Iterator[Any]:
        yield sum(batches)

    assert list(profiled(task, "kind")(slow_input())) == [3]
    (f,) = os.listdir(tmp_path)
    _cpu, _gc, _n0, _n1, _n2, wall, in_wall, in_cpu = map(float, (tmp_path / f).read_text().split())
    assert wall >= in_wall >= 0.15 > in_cpu
