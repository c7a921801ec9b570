"""A debug switch: profile what runs inside Spark tasks.

With the environment variable ``TSTATE_SPARK_PROFILE`` set to a directory (in the
driver's environment before the Spark session starts, so that local executors inherit
it; on a cluster, in the executors' environment), every task wrapped by
:func:`profiled` runs under :mod:`cProfile` and writes its statistics to
``DIR/<kind>-<pid>-<ns>.prof`` (``pstats.Stats`` reads them; merge a stage's files with
``Stats.add``).  Times are the worker process's CPU time (``time.process_time``), so
that profiles taken on a busy machine still compare.  Unset (the default) the wrapper costs one environment look-up per task.

With ``TSTATE_SPARK_CPU`` set to a directory instead, each task writes only its CPU
seconds (no profiler overhead) to ``DIR/<kind>-<pid>-<ns>.cpu``: one line, the task's
CPU seconds, then the seconds the garbage collector ran during the task and how many
collections of each generation, then the task's wall seconds and, of those, the wall
and CPU seconds spent getting its input batches from Spark (``cpu gc n0 n1 n2 wall
input_wall input_cpu``: ``input_wall - input_cpu`` is the time the task waited for
the JVM to hand it rows).

The task's whole work is profiled, including the time Spark takes to hand it its
Arrow batches (they are read inside the profiled iteration); the task's output batches
are produced under the profiler and yielded after it stopped.

>>> profiled(lambda batches: iter(batches), "x")([1, 2]).__next__()
1
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, Callable, Iterable, Iterator

from tstate.spark.collector import with_driver_thresholds

__all__ = ["ENV", "CPU_ENV", "profiled"]

#: the environment variable naming the directory profiles are written to
ENV = "TSTATE_SPARK_PROFILE"
#: the environment variable naming the directory tasks' CPU seconds are written to
CPU_ENV = "TSTATE_SPARK_CPU"

Task = Callable[[Iterable[Any]], Iterator[Any]]


def profiled(task: Task, kind: str) -> Task:
    """``task`` (a ``mapInArrow`` function), profiled when :data:`ENV` is set (module
    docstring); ``kind`` names its files.  Every task is built through here, so here it
    also gets the driver's collector thresholds
    (:func:`~tstate.spark.collector.with_driver_thresholds`, captured now: call this on
    the driver)."""

    @with_driver_thresholds
    def run(batches: Iterable[Any]) -> Iterator[Any]:
        directory = os.environ.get(ENV)
        if not directory:
            cpu_dir = os.environ.get(CPU_ENV)
            if not cpu_dir:
                yield from task(batches)
                return
            gc_seen = _GcClock()
            fed = _InputClock(batches)
            start, wall = time.process_time(), time.perf_counter()
            gc.callbacks.append(gc_seen)
            try:
                out = list(task(fed))
            finally:
                gc.callbacks.remove(gc_seen)
            cpu, wall = time.process_time() - start, time.perf_counter() - wall
            os.makedirs(cpu_dir, exist_ok=True)
            with open(os.path.join(cpu_dir, f"{kind}-{os.getpid()}-{time.time_ns()}.cpu"), "w") as f:
                f.write(f"{cpu} {gc_seen.seconds} {' '.join(map(str, gc_seen.counts))} {wall} {fed.wall} {fed.cpu}\n")
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


class _InputClock:
    """The batches of a task, counting the wall and CPU seconds spent getting them
    (reading them from Spark, waiting for the JVM to produce them)."""

    def __init__(self, batches: Iterable[Any]) -> None:
        self._it = iter(batches)
        self.wall = 0.0
        self.cpu = 0.0

    def __iter__(self) -> "_InputClock":
        return self

    def __next__(self) -> Any:
        w, c = time.perf_counter(), time.process_time()
        try:
            return next(self._it)
        finally:
            self.wall += time.perf_counter() - w
            self.cpu += time.process_time() - c


class _GcClock:
    """A :data:`gc.callbacks` hook adding up the collector's CPU seconds and counting
    its collections per generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.counts = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start
            self.counts[info["generation"]] += 1
