"""A Spark task runs under the driver's garbage-collector thresholds.

The embedded engine runs a dataflow in the driver's process, under whatever collector
thresholds that process set (``gc.set_threshold``: an app that allocates much
long-lived state raises them, as ``apps.cep`` does).  Spark runs the same operators in
Python workers started by the JVM, which keep Python's defaults -- so the same
records cost more there: with the defaults a CEP task spent 40% of its CPU in the
collector (2.8 of 7.2 s on 400k flights), with the driver's thresholds 6%.

:func:`with_driver_thresholds` captures the thresholds where it is called (on the
driver, when a task is built) and runs the task under them, giving the worker back
its own when the task ends (a Python worker is reused by later tasks).

>>> import gc
>>> old = gc.get_threshold()
>>> gc.set_threshold(12345, 11, 12)
>>> task = with_driver_thresholds(lambda batches: (gc.get_threshold() for _ in batches))
>>> gc.set_threshold(*old)
>>> list(task([0]))
[(12345, 11, 12)]
>>> gc.get_threshold() == old
True
"""

from __future__ import annotations

import gc
from typing import Any, Callable, Iterable, Iterator

__all__ = ["with_driver_thresholds"]

Task = Callable[[Iterable[Any]], Iterator[Any]]


def with_driver_thresholds(task: Task) -> Task:
    """``task`` (a ``mapInArrow`` function), run under the collector thresholds of the
    process calling this (module docstring)."""
    thresholds = gc.get_threshold()

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        own = gc.get_threshold()
        gc.set_threshold(*thresholds)
        try:
            yield from task(batches)
        finally:
            gc.set_threshold(*own)

    return run
