"""Python workers started while the driver prepares a run, not by its first micro-batch.

Spark starts a Python worker for a ``mapInArrow`` task the first time an executor
core needs one, and keeps it for later tasks (``spark.python.worker.reuse``, the
default).  A fresh worker imports what the task's function needs -- ``pyarrow``,
``numpy``, the task code of :mod:`tstate.spark` with the operators and the engine,
and ``pandas``, which pyarrow imports on its first conversion of Python objects
(about 0.3-0.8 s of CPU each, pandas 0.25-0.4 s of it) -- so the first micro-batch of a run paid it on every
core, while the driver sat idle waiting for its tasks.  With tstate's worker daemon
(:mod:`tstate.spark.daemon`, what ``local_session`` sets) those imports are made once
per executor, by the daemon, before it forks the first worker: the first worker
waits for them, later ones fork in milliseconds.

:func:`warm_workers` submits, from a background thread, one small Spark job of
``tasks`` tasks that only import those modules, while the driver goes on preparing
the run (counting and cutting the inputs, planning the first batch); the workers it
started (and the daemon, with its imports) are the ones the batches' tasks then reuse.
It changes nothing a run computes:
a warm-up that fails, or whose workers Spark does not reuse, only leaves the first
batch to start its workers as before.

It submits none when a run on the same Spark application used as many workers less
than :data:`FRESH_SECONDS` ago (:func:`used`): Spark keeps an idle worker for a minute,
so the job would only add a Spark job beside the run's (a session running one small
dataflow after another: tests, notebooks).

:func:`start_worker` (what ``local_session(warm=True)`` calls as the session starts;
a batch run does not: a worker started beside a run's own first tasks can leave the
executor one idle worker more than its task slots, and Spark hands idle workers out in
turn, so a task would less often find the bins its process cached or prefetched) starts one worker -- and with it
the executor's worker daemon and its imports -- with a one-task **RDD** job,
which Spark runs without the SQL planner, code generation or an Arrow stream: on a fresh
SparkContext its job reaches the executor in a fraction of an SQL job's JVM time, so the
daemon's imports overlap the caller's own setup instead of waiting behind the session's
first SQL planning.  Spark keeps one worker daemon per (interpreter, modules, worker
environment); its SQL Python runners (``mapInArrow``, the UDFs) add
:data:`SIMPLIFIED_TRACEBACK` to the environment and its RDD runner does not, so an RDD
job would start a daemon of its own that no tstate task uses.  :func:`start_worker`
therefore first adds that variable to the SparkContext's worker environment
(``sc.environment``, as the SQL runners do when :data:`SIMPLIFIED_CONF` is on, its
default): the warm-up's daemon is the one the SQL tasks use, and the worker it started
is the one the run's first task takes from the idle pool.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Iterator

__all__ = ["FRESH_SECONDS", "SIMPLIFIED_CONF", "SIMPLIFIED_TRACEBACK", "used", "warm_workers", "warm_task", "start_task",
           "start_worker", "sql_worker_env", "fresh"]

#: workers a run used at most this long ago are taken to be alive still (Spark stops a
#: Python worker idle for a minute)
FRESH_SECONDS = 30.0

#: the worker environment variable Spark's SQL Python runners add (and its RDD runner
#: does not) when :data:`SIMPLIFIED_CONF` is on
SIMPLIFIED_TRACEBACK = "SPARK_SIMPLIFIED_TRACEBACK"

#: the Spark SQL setting (default on) under which the SQL runners add it
SIMPLIFIED_CONF = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"

#: Spark application id -> (workers, monotonic seconds) of the last run's (:func:`used`)
_used: dict[str, tuple[int, float]] = {}


def _app(spark: Any) -> Any:
    try:
        return spark.sparkContext.applicationId
    except Exception:  # noqa: BLE001  (no SparkContext: Spark Connect, a stopped session)
        return None


def fresh(spark: Any, workers: int) -> bool:
    """Whether a run on ``spark`` used at least ``workers`` workers less than
    :data:`FRESH_SECONDS` ago (:func:`used`)."""
    app = _app(spark)
    last = _used.get(app) if app is not None else None
    return last is not None and last[0] >= workers and time.monotonic() - last[1] < FRESH_SECONDS


def used(spark: Any, workers: int) -> None:
    """Record that a run on ``spark`` just used ``workers`` Python workers."""
    app = _app(spark)
    if app is not None:
        _used[app] = (workers, time.monotonic())


def warm_task(batches: Iterable[Any]) -> Iterator[Any]:
    """The warm-up job's ``mapInArrow`` function: imports the modules the micro-batch
    tasks run, consumes its rows, emits nothing."""
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401  (Table.take and filters in the tasks import it)

    import tstate.spark.colocated  # noqa: F401
    import tstate.spark.host  # noqa: F401
    import tstate.spark.input_rows  # noqa: F401
    import tstate.spark.task  # noqa: F401

    # pyarrow imports pandas (when installed) on its first conversion of Python objects,
    # which the input task's first filter or take makes: 0.25-0.4 s of CPU a worker
    pyarrow.array([0]).to_numpy()
    for _ in batches:
        pass
    return iter(())


def start_task(batches: Iterable[Any]) -> Iterator[Any]:
    """The session's warm-up job's ``mapInArrow`` function (``local_session``): starts
    a worker (and the executor's worker daemon, with the imports it makes) and imports
    nothing itself -- what a run's tasks import beyond the daemon's is the run's own
    warm-up's (:func:`warm_task`), once the run is known; consumes its rows, emits
    nothing."""
    for _ in batches:
        pass
    return iter(())


def warm_workers(spark: Any, tasks: int, task: Callable[[Iterable[Any]], Iterator[Any]] = warm_task) -> threading.Thread:
    """Start ``tasks`` Python workers on ``spark``'s executors in the background (module
    docstring), each running ``task`` once; returns the (daemon) thread submitting the
    job (none when a run used as many workers less than :data:`FRESH_SECONDS` ago)."""
    alive = fresh(spark, tasks)

    def run() -> None:
        if alive:
            return
        try:
            spark.range(0, tasks, 1, tasks).mapInArrow(task, "id long").collect()
        except Exception:  # noqa: BLE001  (an optimisation only: the batches start their own workers)
            pass

    thread = threading.Thread(target=run, name="tstate-warm-workers", daemon=True)
    thread.start()
    return thread


def sql_worker_env(spark: Any) -> bool:
    """Give ``spark``'s RDD jobs the Python worker environment its SQL Python tasks
    get (module docstring): :data:`SIMPLIFIED_TRACEBACK` in the SparkContext's worker
    environment when :data:`SIMPLIFIED_CONF` is on; then both kinds of job share one
    worker daemon and idle workers.  Returns whether it did (False: the setting off, or
    no SparkContext).  Changes no result: the variable only shortens the tracebacks a
    failing RDD task reports, as an SQL task's already are."""
    try:
        on = str(spark.conf.get(SIMPLIFIED_CONF, "true")).lower() == "true"
        env = spark.sparkContext.environment
    except Exception:  # noqa: BLE001  (Spark Connect, a stopped session: nothing to share)
        return False
    if on:
        env.setdefault(SIMPLIFIED_TRACEBACK, "1")
    return on


def _consume(rows: Iterable[Any]) -> Iterator[Any]:
    """The RDD warm-up's partition function: consumes its rows, emits nothing."""
    for _ in rows:
        pass
    return iter(())


#: Spark application id -> the thread of its :func:`start_worker` job
_starting: dict[Any, threading.Thread] = {}


def start_worker(spark: Any) -> threading.Thread:
    """Start one Python worker on ``spark`` (and its executor's worker daemon, with the
    imports it makes) in the background with a one-task RDD job, after
    :func:`sql_worker_env` so that the SQL tasks of the run that follows reuse them
    (module docstring); returns the (daemon) thread submitting the job.  No job when
    one is still under way on the same application, or a run used a worker less than
    :data:`FRESH_SECONDS` ago (:func:`used`); a job that ended records its worker
    there.  Computes nothing; a failure is swallowed (the run's first task starts its
    worker as without it)."""
    shared = sql_worker_env(spark)
    app = _app(spark)
    busy = _starting.get(app)
    skip = not shared or (busy is not None and busy.is_alive()) or fresh(spark, 1)

    def run() -> None:
        if skip:  # (not shared: its daemon would not be the SQL tasks', no use)
            return
        try:
            spark.sparkContext.parallelize([0], 1).mapPartitions(_consume).collect()
        except Exception:  # noqa: BLE001  (an optimisation only: the first task starts its worker)
            return
        if not fresh(spark, 1):
            used(spark, 1)

    thread = threading.Thread(target=run, name="tstate-start-worker", daemon=True)
    if not skip and app is not None:
        _starting[app] = thread
    thread.start()
    return thread
