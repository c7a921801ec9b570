"""Python workers started while the driver prepares a run, not by its first micro-batch.

Spark starts a Python worker for a ``mapInArrow`` task the first time an executor
core needs one, and keeps it for later tasks (``spark.python.worker.reuse``, the
default).  A fresh worker imports what the task's function needs -- ``pyarrow``,
``numpy``, the task code of :mod:`tstate.spark` with the operators and the engine,
and ``pandas``, which pyarrow imports on its first conversion of Python objects
(about 0.3-0.8 s of CPU each, pandas 0.25-0.4 s of it) -- so the first micro-batch of a run paid it on every
core, while the driver sat idle waiting for its tasks.

:func:`warm_workers` submits, from a background thread, one small Spark job of
``tasks`` tasks that only import those modules, while the driver goes on preparing
the run (counting and cutting the inputs, planning the first batch); the workers it
started are the ones the batches' tasks then reuse.  It changes nothing a run computes:
a warm-up that fails, or whose workers Spark does not reuse, only leaves the first
batch to start its workers as before.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator

__all__ = ["warm_workers", "warm_task"]


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


def warm_workers(spark: Any, tasks: int) -> threading.Thread:
    """Start ``tasks`` Python workers on ``spark``'s executors in the background (module
    docstring); returns the (daemon) thread submitting the job."""

    def run() -> None:
        try:
            spark.range(0, tasks, 1, tasks).mapInArrow(warm_task, "id long").collect()
        except Exception:  # noqa: BLE001  (an optimisation only: the batches start their own workers)
            pass

    thread = threading.Thread(target=run, name="tstate-warm-workers", daemon=True)
    thread.start()
    return thread
