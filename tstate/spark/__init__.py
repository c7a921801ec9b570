"""The Spark backend: the same dataflow on PySpark micro-batches (see
:mod:`tstate.spark.backend`).  Needs the ``spark`` extra: ``pip install 'tstate[spark]'``.

The names below are imported on first use (PEP 562): a Spark task importing one of
this package's task modules does not import the driver's modules with them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tstate.spark.backend import Backend, BatchMetrics, Source
    from tstate.spark.session import local_session

__all__ = ["Backend", "BatchMetrics", "Source", "local_session"]


def __getattr__(name: str) -> Any:
    if name in ("Backend", "BatchMetrics", "Source"):
        from tstate.spark import backend

        return getattr(backend, name)
    if name == "local_session":
        from tstate.spark.session import local_session

        return local_session
    raise AttributeError(f"module 'tstate.spark' has no attribute {name!r}")
