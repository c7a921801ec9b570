"""A SparkSession set up the way tstate runs best on one machine.

>>> spark = local_session("local[2]")        # doctest: +SKIP

Sets what makes a local session start fast and run small micro-batches quickly: the
driver bound to 127.0.0.1, no UI or console progress bars, few shuffle partitions
(tstate multiplexes many bins onto few partitions), Adaptive Query Execution off (it
submits every shuffle of a micro-batch's stages as a Spark job of its own and
re-plans the rest between them: measured on CEP, two jobs per micro-batch instead of
one and five for the epoch count, for no gain at tstate's few partitions), the
in-memory cache uncompressed (a batch run caches its inputs once and every
micro-batch scans its epochs out of the cache: on one machine compressing it only
costs the JVM CPU beside the Python tasks -- measured on CEP, all 3M flights on
``local[2]``, the cache's build 2-4 CPU s of 14-16 less; it spills to disk as
before when memory runs short), the executors' Python set to this interpreter (so
they import the same tstate), and on local masters (``local...``, ``local-cluster...``)
the Python worker daemon :mod:`tstate.spark.daemon`, which imports tstate's task code
once per executor before forking the workers (on your own session or cluster, set
``spark.python.daemon.module`` to ``tstate.spark.daemon`` where tstate is installed on
the executors; ``conf`` given here wins)."""

from __future__ import annotations

import os
import sys
from typing import Any

from tstate.errors import SparkError

__all__ = ["local_session", "session_settings", "is_local", "DAEMON_SETTING", "DAEMON", "QUICK_JIT", "require_pyspark", "PysparkMissing"]

#: the Spark setting naming the module PySpark runs as each executor's Python worker daemon
DAEMON_SETTING = "spark.python.daemon.module"

#: :mod:`tstate.spark.daemon`, by name (``python -m`` runs it; importing it here would
#: import it twice in the daemon: once with this package, once as ``__main__``)
DAEMON = "tstate.spark.daemon"


def is_local(master: str) -> bool:
    """Whether ``master``'s executors run on this machine with this interpreter
    (``local``, ``local[N]``, ``local[N,F]``, ``local-cluster[...]``).

    >>> is_local("local[2]"), is_local("local-cluster[2,1,1024]"), is_local("spark://h:7077")
    (True, True, False)
    """
    return master == "local" or master.startswith(("local[", "local-cluster["))


class PysparkMissing(SparkError, ImportError):
    """pyspark is not installed (a :class:`~tstate.errors.SparkError` and an ``ImportError``)."""

#: what to do when pyspark is missing
INSTALL = "pip install 'tstate[spark]'"


def require_pyspark() -> None:
    """Raise :class:`~tstate.errors.SparkError` (also an ``ImportError``) saying how to
    install pyspark if it is missing; every entry point of :mod:`tstate.spark` calls it."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise PysparkMissing(f"the Spark backend needs pyspark, which is not installed ({exc}): {INSTALL}") from None


#: the driver JVM option of ``local_session(quick_jit=True)``
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def local_session(
    master: str = "local[2]", app_name: str = "tstate", *, quick_jit: bool = False, warm: bool = False, **conf: Any
) -> Any:
    """Get or create a SparkSession on ``master`` with tstate's defaults, plus ``conf``
    (Spark configuration keys with ``.`` written as given, e.g.
    ``**{"spark.executor.memory": "1g"}``).

    ``warm``: when this call starts the SparkContext, a Python worker (and with it its
    executor's worker daemon) is started in the background with a one-task RDD job
    (:func:`tstate.spark.warm.start_worker`) while the caller builds its dataflow and
    frames: the worker daemon's imports (:mod:`tstate.spark.daemon`) are then paid
    before the first run needs them, not by its first task -- as the embedded engine's
    imports are paid before it runs.  It computes nothing; a warm-up that fails changes
    nothing.  Without it every batch run starts the same worker itself, as it starts
    (before it plans); ``warm`` starts it earlier still.  Off by default: measured on
    the graph sample (a fresh ``local[2]`` session, then one one-task run; ``python -m
    benchmarks.graph_spark --ab 3`` and ``--breakdown 2``, 2 cores at load 18-26) it
    did not resolve -- 7.8x vs 10.5x the embedded run in one A/B, 8.3x vs 7.2x in the
    other -- for about 0.1 more CPU s of the workers: the benchmark's caller starts
    its run 0.2-1 s after the session, less than the daemon's start under load.  It
    pays when the caller's setup takes longer than the worker daemon's start (about
    0.6 CPU s).

    ``quick_jit``: the driver JVM (in ``local[N]`` also the executors') compiles with
    only its quick compiler (C1, :data:`QUICK_JIT` added to
    ``spark.driver.extraJavaOptions``): the optimising compiler's threads no longer
    burn CPU beside the Python tasks while a fresh JVM warms up, which pays on runs of
    seconds to a few minutes on few cores; the JVM's own code then stays slower, so long
    runs and JVM-heavy jobs (Spark SQL over large data) lose.  It takes effect only when
    this call starts the JVM (not on a session already running)."""
    require_pyspark()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from pyspark import SparkContext

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in session_settings(quick_jit, conf, master=master).items():
        builder = builder.config(k, str(v))
    before = SparkContext._active_spark_context
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if warm and spark.sparkContext is not before:  # (this call started it)
        from tstate.spark.warm import start_worker

        start_worker(spark)  # (one task: the other cores stay free for the caller's first job)
    return spark


def session_settings(quick_jit: bool = False, conf: Any = None, *, master: str = "local[2]") -> dict[str, Any]:
    """The Spark configuration :func:`local_session` sets on ``master``: tstate's
    defaults (module docstring; the worker daemon only on a local master), then
    ``conf``; with ``quick_jit``, :data:`QUICK_JIT` added to the driver's JVM options
    (after those ``conf`` gives).

    >>> session_settings(True, {"spark.driver.extraJavaOptions": "-Xss4m"})["spark.driver.extraJavaOptions"]
    '-Xss4m -XX:TieredStopAtLevel=1'
    """
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.adaptive.enabled": "false",  # (module docstring)
        "spark.sql.inMemoryColumnarStorage.compressed": "false",  # (module docstring)
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": sys.executable,
        **({DAEMON_SETTING: DAEMON} if is_local(master) else {}),  # (module docstring)
        **(conf or {}),
    }
    if quick_jit:
        key = "spark.driver.extraJavaOptions"
        settings[key] = " ".join(o for o in (str(settings.get(key, "")).strip(), QUICK_JIT) if o)
    return settings
