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
before when memory runs short), and the executors' Python set to this interpreter (so
they import the same tstate)."""

from __future__ import annotations

import os
import sys
from typing import Any

from tstate.errors import SparkError

__all__ = ["local_session", "require_pyspark", "PysparkMissing"]


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


def local_session(master: str = "local[2]", app_name: str = "tstate", **conf: Any) -> Any:
    """Get or create a SparkSession on ``master`` with tstate's defaults, plus ``conf``
    (Spark configuration keys with ``.`` written as given, e.g.
    ``**{"spark.executor.memory": "1g"}``)."""
    require_pyspark()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

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
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
