"""Warming Python workers before the first micro-batch (tstate.spark.warm) computes
nothing and never fails a run."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tstate.spark.warm import warm_task, warm_workers, workers_needed


def test_warm_task_consumes_its_rows_and_emits_nothing() -> None:
    seen: list[int] = []

    def batches() -> Iterator[int]:
        for i in range(3):
            seen.append(i)
            yield i

    assert list(warm_task(batches())) == []
    assert seen == [0, 1, 2]


def test_warm_up_job_ends(spark: Any) -> None:
    thread = warm_workers(spark, 2)
    thread.join(300)
    assert not thread.is_alive()


def test_a_failing_warm_up_is_swallowed() -> None:
    class Down:
        def range(self, *args: Any) -> Any:
            raise RuntimeError("session stopped")

    thread = warm_workers(Down(), 2)
    thread.join(30)
    assert not thread.is_alive()


@pytest.fixture
def _one_task_rule(monkeypatch: Any) -> None:
    """(tests/spark/conftest.py stages every batch: the default rule applies here.)"""
    from tstate.spark import local_batch

    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", 4 << 20)


def test_a_run_in_one_task_warms_one_worker_any_other_one_per_partition(
    spark: Any, monkeypatch: Any, _one_task_rule: None
) -> None:
    from tstate.spark import local_batch
    from tstate.spark.plan import Plan

    from .flows import keyed
    flow, *_ = keyed()
    plan = Plan.of(flow)
    import pyarrow as pa

    # (an Arrow frame: a local relation, whose size Spark knows before any job)
    small = {"events": spark.createDataFrame(pa.table({"k": ["a"], "v": [1], "t": [0]}))}
    assert workers_needed(plan, small, False, 64 << 20, 3, False) == 1
    assert workers_needed(plan, small, False, 64 << 20, 3, True) == 3  # a rescale pending: staged
    assert workers_needed(plan, small, True, 64 << 20, 3, False) == 3  # records held back: staged
    assert workers_needed(plan, small, False, 0, 3, False) == 3  # local paths off
    two = {**small, "more": small["events"]}
    assert workers_needed(plan, two, False, 64 << 20, 3, False) == 3  # two inputs: staged
    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", 8)
    assert workers_needed(plan, small, False, 64 << 20, 3, False) == 3  # larger than a one-task batch
    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", 4 << 20)
    unknown = {"events": spark.createDataFrame([{"k": "a", "v": 1, "t": 0}], "k string, v long, t long")}
    assert workers_needed(plan, unknown, False, 64 << 20, 3, False) == 3  # a size Spark does not know yet


def test_no_warm_up_job_while_a_run_just_used_as_many_workers(spark: Any) -> None:
    from tstate.spark import warm

    tracker = spark.sparkContext.statusTracker()
    warm.used(spark, 2)
    before = len(tracker.getJobIdsForGroup(None))
    warm_workers(spark, 2).join(300)
    assert len(tracker.getJobIdsForGroup(None)) == before  # workers alive: no job
    warm_workers(spark, 3).join(300)
    assert len(tracker.getJobIdsForGroup(None)) == before + 1  # more workers than the run used
    warm.used(spark, 3)
    warm._used[spark.sparkContext.applicationId] = (3, warm._used[spark.sparkContext.applicationId][1] - warm.FRESH_SECONDS)
    warm_workers(spark, 2).join(300)
    assert len(tracker.getJobIdsForGroup(None)) == before + 2  # used too long ago: its workers may be gone
