"""A committed micro-batch's output handed to its sinks, off the batch's critical path.

After micro-batch ``N`` commits, its output (:mod:`tstate.spark.output`: the part files
its index names) goes to the sinks: the epoch files of file sinks
(:func:`~tstate.spark.output.finalise`, one Spark job) and the records of driver sinks
(read from the parts and decoded on the driver, then ``write`` and ``frontier``).  A
:class:`Delivery` does that for one batch at a time, in batch order -- on a background
thread while the next batch runs (``background=True``: :meth:`Backend.run
<tstate.spark.backend.Backend.run>`), or before :meth:`deliver` returns.

**Exactly once stays as it was.**  Batch ``N + 1`` commits only after batch ``N``'s
delivery finished (the batch calls :meth:`wait` just before its commit), so after a
crash only the last committed batch's delivery can be incomplete -- as when the
delivery ran before the next batch started -- and a restart writes that batch's epoch
files again (the same bytes: :func:`~tstate.spark.opening.recover_output`).  A failed delivery (a full disk)
is raised by the next :meth:`wait`; the batch it belongs to stays committed and a
restart redoes it.

Driver sinks get ``write``/``frontier`` on the delivery's thread when it runs in the
background (one thread, batches in order: never two calls at once).  They take their
records while the epoch files' Spark job runs (on a thread of its own: the driver reads
and hands over the driver sinks' parts while the executors write the files), so a
delivery takes the longer of the two, not their sum; they are other sinks, so each sink
still gets its times in order and then its frontier, which moves only once both are done.

**Waiting on a delivery is waiting on Spark for as long as its job runs.**  The driver
waits for a background delivery before the next commit and, after the last batch, before
the run returns (nothing else is left to overlap it).  :meth:`Delivery.wait` says how
much of that wait fell inside the delivery's Spark job (:func:`~tstate.spark.output.finalise`:
tasks that more executors shorten) -- :class:`Waited` ``job_seconds``, counted in the
batch's ``BatchMetrics.job_seconds`` -- and the rest (driver sinks decoding their
records, the frontier) stays the driver's own time.

**The collector rests while a driver sink takes its records.**  A driver sink's
``write`` is where a time's records are decoded (:class:`~tstate.spark.lazy_records.LazyRecords`)
and, for ``collect()``, kept: hundreds of thousands of new objects in one call, each
allocation counting towards the next collection, and every full collection walking the
driver's whole heap again -- including the records the sink already holds -- so, on a
driver that collects a large output, more than half of the delivery was the garbage
collector (the graph app's 660k changes: :mod:`benchmarks.graph_driver_profile`).
:func:`collector_paused` turns automatic collection off for one ``write`` call
(process-wide; what the call leaves unreachable is collected by the next collection
after it, so nothing is kept longer than one call).
"""

from __future__ import annotations

import gc
import threading
import time as _time
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import attrs
from attrs import frozen

from tstate.progress.frontier import Antichain
from tstate.spark.output import Part, finalise, lazy_records_of

__all__ = ["Delivery", "Waited", "collector_paused"]

_paused = [0]  # nesting depth of collector_paused (on any thread)
_pause_lock = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Automatic garbage collection off for the block (module docstring); nested or
    concurrent uses are one pause, the collector back on after the last (and only if
    it was on before the first)."""
    with _pause_lock:
        if _paused[0] == 0:
            _paused.append(gc.isenabled())
            gc.disable()
        _paused[0] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _paused[0] -= 1
            if _paused[0] == 0 and _paused.pop():
                gc.enable()


@frozen
class Waited:
    """A wait for a delivery: its wall ``seconds``, and of those ``job_seconds`` spent
    while the delivery ran its Spark job (the rest: its driver-side work)."""

    seconds: float = 0.0
    job_seconds: float = 0.0


def _overlap(a: tuple[float, float], b: Optional[tuple[float, float]]) -> float:
    """Seconds the intervals ``a`` and ``b`` (None: none) share."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) if b is not None else 0.0


def _thread(target: Any, args: tuple[Any, ...], name: str) -> threading.Thread:
    """A daemon thread running ``target(*args)``; its Spark jobs inherit the caller's
    local properties (pyspark's ``InheritableThread``)."""
    try:
        from pyspark import InheritableThread as Thread
    except ImportError:  # pragma: no cover - pyspark is there wherever a backend runs
        from threading import Thread  # type: ignore[assignment]
    return Thread(target=target, args=args, name=name, daemon=True)


class Delivery:
    """Hands committed batches' output to the sinks (module docstring): ``spark`` and
    the checkpoint ``directory`` and filesystem ``fs`` the parts are in, the dataflow's
    record classes ``types``; ``background``: deliver on a thread."""

    def __init__(self, spark: Any, directory: str, fs: Any, types: Any, *, background: bool = False) -> None:
        self.spark, self.directory, self.fs, self.types = spark, directory, fs, types
        self.background = background
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        #: seconds the deliveries took (on their thread or not): the output's whole cost
        self.seconds = 0.0
        #: when the delivery under way ran its Spark job (perf_counter start and end; the
        #: end None while it runs), for :meth:`wait`
        self._job: Optional[tuple[float, Optional[float]]] = None

    def deliver(self, sinks: dict[int, Any], parts: list[Part], frontier: Antichain) -> float:
        """Hand ``parts`` (a committed batch's) to ``sinks`` (node -> sink) and move
        their frontier to ``frontier``, after the previous delivery finished; returns
        the seconds this call waited on Spark jobs: writing the epoch files when it
        delivers before returning, and the previous delivery's job (:meth:`wait`)."""
        waited = self.wait().job_seconds
        if not self.background:
            return waited + self._deliver(sinks, parts, frontier)
        self._thread = _thread(self._run, (sinks, parts, frontier), "tstate-delivery")
        self._thread.start()
        return waited

    def _run(self, sinks: dict[int, Any], parts: list[Part], frontier: Antichain) -> None:
        try:
            self._deliver(sinks, parts, frontier)
        except BaseException as exc:  # raised by the next wait()
            self._error = exc

    def _deliver(self, sinks: dict[int, Any], parts: list[Part], frontier: Antichain) -> float:
        """The delivery; returns the seconds of its Spark job (the epoch files).  The job
        runs on a thread of its own while the driver sinks take their records (other
        sinks: each sink still gets its times in order, then its frontier)."""
        t = _time.perf_counter()
        self._job = None  # (set by _files if this delivery runs a job)
        try:
            files = {nd: s for nd, s in sinks.items() if hasattr(s, "commit_epoch") and not s.on_driver}
            drivers = sorted((nd, s) for nd, s in sinks.items() if s.on_driver)
            failed: list[BaseException] = []
            job = _thread(self._files, (files, parts, failed), "tstate-epoch-files") if files and drivers else None
            if job is not None:
                job.start()
            else:
                self._files(files, parts, failed)
            try:
                for nd, sink in drivers:
                    mine = [p for p in parts if p.sink == nd]
                    for t_, recs in sorted(lazy_records_of(self.fs, mine, self.types).items()):
                        with collector_paused():
                            sink.write(0, t_, recs)
            finally:
                if job is not None:
                    job.join()
            if failed:
                raise failed[0]
            for sink in sinks.values():
                sink.frontier(0, frontier)
            span = self._job
            return span[1] - span[0] if span is not None and span[1] is not None else 0.0
        finally:
            self.seconds += _time.perf_counter() - t

    def _files(self, files: dict[int, Any], parts: list[Part], failed: list[BaseException]) -> None:
        """The file sinks' epoch files (one Spark job: :func:`~tstate.spark.output.finalise`),
        its span kept for :meth:`wait`; a failure is added to ``failed``."""
        if not files:
            return
        t = _time.perf_counter()
        self._job = (t, None)
        try:
            finalise(self.spark, self.directory, files, parts, self.types)
        except BaseException as exc:  # (raised by _deliver, after the driver sinks)
            failed.append(exc)
        self._job = (t, _time.perf_counter())

    def wait(self) -> Waited:
        """Wait for the delivery under way (if any); returns the seconds waited, and of
        those the seconds its Spark job ran (module docstring).  Raises what that
        delivery raised."""
        t = _time.perf_counter()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        end = _time.perf_counter()
        job, self._job = self._job, None
        span = (job[0], end if job[1] is None else job[1]) if job is not None else None  # (a failed job: to its end)
        error, self._error = self._error, None
        if error is not None:
            raise error
        return Waited(end - t, _overlap((t, end), span) if thread is not None else 0.0)

    def finish(self, metrics: Any) -> None:
        """Wait for the last batch's delivery; its seconds count as that batch's output
        hand-over (``BatchMetrics.output_seconds`` of ``metrics.batches[-1]``), those in
        its Spark job as the batch's ``job_seconds`` too (the rest: the driver's own)."""
        waited = self.wait()
        if metrics.batches:
            m = metrics.batches[-1]
            metrics.batches[-1] = attrs.evolve(
                m, seconds=m.seconds + waited.seconds, output_seconds=m.output_seconds + waited.seconds,
                job_seconds=m.job_seconds + waited.job_seconds,
            )

    def drain(self) -> None:
        """Wait for the delivery under way, ignoring its failure (a run already failing:
        the restart redoes the delivery)."""
        try:
            self.wait()
        except BaseException:  # noqa: BLE001 - the run's own error is the one to raise
            pass
