"""Warming Python workers before the first micro-batch (tstate.spark.warm) computes
nothing and never fails a run."""

from __future__ import annotations

from typing import Any, Iterator

from tstate.spark.warm import start_task, warm_task, warm_workers


def test_warm_task_consumes_its_rows_and_emits_nothing() -> None:
    seen: list[int] = []

    def batches() -> Iterator[int]:
        for i in range(3):
            seen.append(i)
            yield i

    assert list(warm_task(batches())) == []
    assert seen == [0, 1, 2]
    assert list(start_task(batches())) == []
    assert seen == [0, 1, 2] * 2


def test_warm_task_makes_the_imports_pyarrow_does_on_first_use() -> None:
    """A fresh worker that ran the warm-up has what pyarrow imports lazily (pandas, when
    installed) already loaded: the first batch's input task does not import it."""
    import subprocess
    import sys

    code = (
        "import sys; from tstate.spark.warm import warm_task; import importlib.util as u; "
        "had = 'pandas' in sys.modules; list(warm_task([])); "
        "print(had, u.find_spec('pandas') is None or 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]


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


def test_no_warm_up_job_while_a_run_just_used_as_many_workers(spark: Any) -> None:
    from tstate.spark import warm

    import time

    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 300
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:  # (the session's own warm-up)
        time.sleep(0.1)
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


def _parent_pids(rows: Any) -> Iterator[int]:
    import os

    for _ in rows:
        pass
    yield os.getppid()


def _parent_pid_batches(batches: Any) -> Iterator[Any]:
    import os

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"id": [os.getppid()]})


def test_rdd_and_sql_tasks_share_the_worker_daemon(spark: Any) -> None:
    """After sql_worker_env, an RDD task's worker (what start_worker's job starts)
    comes from the daemon the SQL (mapInArrow) tasks' workers come from: the run's
    first task reuses what the warm-up started.  (Without it Spark keeps two daemons:
    SQL runners add SPARK_SIMPLIFIED_TRACEBACK to the worker environment.)"""
    from tstate.spark.warm import SIMPLIFIED_TRACEBACK, sql_worker_env

    assert sql_worker_env(spark)
    assert spark.sparkContext.environment[SIMPLIFIED_TRACEBACK] == "1"
    (rdd_daemon,) = spark.sparkContext.parallelize([0], 1).mapPartitions(_parent_pids).collect()
    (row,) = spark.range(0, 1, 1, 1).mapInArrow(_parent_pid_batches, "id long").collect()
    assert row.id == rdd_daemon


def test_sql_worker_env_follows_the_sql_setting() -> None:
    from tstate.spark.warm import SIMPLIFIED_CONF, SIMPLIFIED_TRACEBACK, sql_worker_env

    class Conf:
        def __init__(self, value: str) -> None:
            self.value = value

        def get(self, key: str, default: str) -> str:
            return self.value if key == SIMPLIFIED_CONF else default

    class Session:
        def __init__(self, value: str) -> None:
            self.conf = Conf(value)
            self.sparkContext = type("SC", (), {"environment": {}})()

    on, off = Session("true"), Session("false")
    assert sql_worker_env(on) and on.sparkContext.environment == {SIMPLIFIED_TRACEBACK: "1"}
    assert not sql_worker_env(off) and off.sparkContext.environment == {}
    assert not sql_worker_env(object())  # (no SparkContext: nothing to share)


def test_start_worker_job_ends_and_a_failure_is_swallowed(spark: Any) -> None:
    from tstate.spark.warm import start_worker

    thread = start_worker(spark)
    thread.join(300)
    assert not thread.is_alive()

    class Down:
        conf = spark.conf

        @property
        def sparkContext(self) -> Any:
            class SC:
                environment: dict[str, str] = {}

                def parallelize(self, *args: Any) -> Any:
                    raise RuntimeError("session stopped")

            return SC()

    thread = start_worker(Down())
    thread.join(30)
    assert not thread.is_alive()


def test_start_worker_submits_no_job_while_one_is_under_way_or_a_worker_is_fresh(spark: Any) -> None:
    import time

    from tstate.spark import warm
    from tstate.spark.warm import start_worker

    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 300
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    app = spark.sparkContext.applicationId
    if app in warm._starting:  # (the session's own warm-up)
        warm._starting[app].join(300)
    warm._used.pop(app, None)
    before = len(tracker.getJobIdsForGroup(None))
    first, second = start_worker(spark), start_worker(spark)  # (the second while the first's job is under way)
    first.join(300)
    second.join(300)
    assert len(tracker.getJobIdsForGroup(None)) == before + 1
    assert warm.fresh(spark, 1)  # (its worker recorded)
    start_worker(spark).join(300)
    assert len(tracker.getJobIdsForGroup(None)) == before + 1
