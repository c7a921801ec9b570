"""A debug switch: profile what runs inside Spark tasks.

With the environment variable ``TSTATE_SPARK_PROFILE`` set to a directory (in the
driver's environment before the Spark session starts, so that local executors inherit
it; on a cluster, in the executors' environment), every task wrapped by
:func:`profiled` runs under :mod:`cProfile` and writes its statistics to
``DIR/<kind>-<pid>-<ns>.prof`` (``pstats.Stats`` reads them; merge a stage's files with
``Stats.add``).  Times are the worker process's CPU time (``time.process_time``), so
that profiles taken on a busy machine still compare.  Unset (the default) the wrapper costs one environment look-up per task.

With ``TSTATE_SPARK_CPU`` set to a directory instead, each task writes only its CPU
seconds (no profiler overhead) to ``DIR/<kind>-<pid>-<ns>.cpu``.

The task's whole work is profiled, including the time Spark takes to hand it its
Arrow batches (they are read inside the profiled iteration); the task's output batches
are produced under the profiler and yielded after it stopped.

>>> profiled(lambda batches: iter(batches), "x")([1, 2]).__next__()
1
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator

__all__ = ["ENV", "CPU_ENV", "profiled"]

#: the environment variable naming the directory profiles are written to
ENV = "TSTATE_SPARK_PROFILE"
#: the environment variable naming the directory tasks' CPU seconds are written to
CPU_ENV = "TSTATE_SPARK_CPU"

Task = Callable[[Iterable[Any]], Iterator[Any]]


def profiled(task: Task, kind: str) -> Task:
    """``task`` (a ``mapInArrow`` function), profiled when :data:`ENV` is set (module
    docstring); ``kind`` names its files."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        directory = os.environ.get(ENV)
        if not directory:
            cpu_dir = os.environ.get(CPU_ENV)
            if not cpu_dir:
                yield from task(batches)
                return
            start = time.process_time()
            out = list(task(batches))
            os.makedirs(cpu_dir, exist_ok=True)
            with open(os.path.join(cpu_dir, f"{kind}-{os.getpid()}-{time.time_ns()}.cpu"), "w") as f:
                f.write(f"{time.process_time() - start}\n")
            yield from out
            return
        import cProfile

        os.makedirs(directory, exist_ok=True)
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        try:
            out = list(task(batches))
        finally:
            prof.disable()
            prof.dump_stats(os.path.join(directory, f"{kind}-{os.getpid()}-{time.time_ns()}.prof"))
        yield from out

    return run
