"""The Spark backend: the same dataflow on PySpark micro-batches (see
:mod:`tstate.spark.backend`).  Needs the ``spark`` extra: ``pip install 'tstate[spark]'``."""

from tstate.spark.backend import Backend, BatchMetrics, Source
from tstate.spark.session import local_session

__all__ = ["Backend", "BatchMetrics", "Source", "local_session"]
