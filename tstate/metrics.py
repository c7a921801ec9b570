"""Run metrics, one shape for both engines: :class:`Metrics`.

Every backend's ``metrics`` (:class:`tstate.backend.Backend`) is a :class:`Metrics`;
each engine fills what it measures and leaves the rest empty:

- the embedded engine: per-epoch latency, bins moved between workers (:class:`Move`),
  bytes moved, migration durations, the rounds of iterate scopes and the local passes
  of ``local_rounds`` operators;
- the Spark backend: one :class:`BatchMetrics` per committed micro-batch, records
  dropped as late, micro-batches skipped after a restart, and the executors' bin cache
  rates.

*Epoch latency* is the wall time from an epoch's input being closed (every input has
advanced past it) to the output frontier passing it (every sink and probe has seen the
epoch complete).  Recorded for integer epochs; read them from ``flow.metrics`` (or
``execution.metrics``).  Epochs closed together and done together (a run of epochs
the frontiers jumped over at once, e.g. a gap in event time) share one entry, at the
first of them: the cost of a jump does not grow with its length.

>>> m = Metrics()
>>> m.latencies(), m.batches, m.late, m.cache_hit_rate
([], [], 0, 1.0)
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from typing import Any, Optional, Sequence

from attrs import asdict, define, frozen

__all__ = ["Metrics", "Move", "BatchMetrics", "plot_latency"]


@define
class BatchMetrics:
    """One committed micro-batch of the Spark backend: its id, frontier, duration and
    counters.

    ``records``: the rows the batch's inputs gave (each input row once: rows dropped
    as late and rows held back for a later batch included, a held row not again when
    it goes in; :mod:`tstate.spark.input_rows`) -- "``N in``" on the progress bar.
    ``operator_records``: the records the keyed operators (stateful operators and
    exchanges, every round of a loop) received, summed over them: one input row fed
    to two operators keyed alike counts twice there."""

    batch: int
    frontier: Optional[int]
    seconds: float
    partitions: int
    records: int
    cache_hits: int
    cache_misses: int
    bytes_written: int
    moved_bins: int
    #: bins found cached at an older version and brought forward by their newer files
    cache_catchups: int = 0
    #: seconds in Spark jobs (the tasks), on the driver (files, sinks), and committing
    spark_seconds: float = 0.0
    driver_seconds: float = 0.0
    commit_seconds: float = 0.0
    #: iterate scopes: rounds run (all loops) and Spark stages they took
    loop_rounds: int = 0
    loop_stages: int = 0
    #: records the batch's sinks got (written by the executors), and seconds the driver
    #: spent after the commit handing them over (epoch files by Spark tasks, driver sinks)
    output_records: int = 0
    output_seconds: float = 0.0
    #: Spark stages of the root boundaries (those whose inputs are ready together share one)
    stages: int = 0
    #: seconds the tasks spent taking their bins (from the executor's cache, or read and
    #: decoded from the store: after a restart, the restore), summed over the tasks, and
    #: the slowest task's (tstate.spark.restore: the executors restore in parallel)
    take_seconds: float = 0.0
    take_max_seconds: float = 0.0
    #: bytes of state files the tasks read taking their bins (catch-ups and misses), and
    #: of those the bytes read for bins that changed owner at this batch (the hand-over)
    bytes_read: int = 0
    handover_bytes: int = 0
    #: pre-copy (Backend.rescale(..., strategy="precopy")): at the hand-over, moved bins
    #: the new owner found prefetched (only the files since read; counted in
    #: cache_catchups too) and moved bins it had
    #: to read whole (its task ran on a process that had not prefetched them); in the
    #: batches before, bins the executors were asked to prefetch and loads they started
    #: (one per executor process and bin)
    prefetched_bins: int = 0
    prefetch_fallbacks: int = 0
    prefetch_bins: int = 0
    prefetch_loads: int = 0
    #: records received by the keyed operators, summed over them (see the class docstring)
    operator_records: int = 0
    #: seconds the driver waited on Spark jobs (the tasks; Spark's own planning and
    #: scheduling of each job; a loop's rounds whole): the parallel part of the batch
    job_seconds: float = 0.0

    @property
    def driver_own_seconds(self) -> float:
        """The batch's wall seconds outside Spark jobs: the driver's own, serial work
        (planning the batch's stages, reducing the tasks' rows, the output index, the
        manifest and its commit, driver sinks, cleaning up) -- what more executors
        cannot shorten."""
        return max(0.0, self.seconds - self.job_seconds)

    @property
    def driver_share(self) -> float:
        """:attr:`driver_own_seconds` over the batch's wall seconds (0 for an empty one)."""
        return self.driver_own_seconds / self.seconds if self.seconds > 0 else 0.0


@frozen
class Move:
    """One bin shipped from one worker to another."""

    operator: str
    bin: int
    source: int
    target: int
    time: Any
    bytes: int
    seconds: float
    at_wall: float


class Metrics:
    """Collected by an engine as it runs (see module docs)."""

    def __init__(self) -> None:
        #: the Spark backend: every committed micro-batch, in order
        self.batches: list[BatchMetrics] = []
        #: the Spark backend: rows dropped as late (event-time streaming inputs)
        self.late = 0
        #: the Spark backend: micro-batches Spark replayed after a restart that were
        #: committed before it (skipped: state and sinks see each batch once)
        self.skipped: list[int] = []
        #: the Spark backend: who checked the files of the last checkpoint recovery
        #: looked at ("driver" / "executors", tstate.spark.restore; "" if none)
        self.verified_by = ""
        #: the Spark backend: seconds a batch run spent finding its epochs and cutting
        #: them into micro-batches (one Spark job, tstate.spark.cuts)
        self.cut_seconds = 0.0
        self.moves: list[Move] = []
        self.closed_at: dict[int, float] = {}
        self.done_at: dict[int, float] = {}
        self._closed_upto: Optional[int] = None  # epochs < this are closed
        self._done_upto: Optional[int] = None
        self._rounds: dict[str, dict[Any, set[int]]] = {}  # scope -> epoch -> rounds fed back
        self._passes: dict[str, dict[Any, int]] = {}  # operator -> epoch -> local passes

    def loop_round(self, scope: str, epoch: Any, round: int) -> None:
        """Records went around iterate scope ``scope`` into ``round`` of ``epoch``."""
        per = self._rounds.get(scope)
        if per is None:
            per = self._rounds[scope] = {}
        seen = per.get(epoch)
        if seen is None:
            per[epoch] = {round}
        else:
            seen.add(round)

    def rounds(self, scope: str) -> dict[Any, int]:
        """Per epoch, the number of rounds of iterate scope ``scope`` that records went
        around the loop into (the distinct times its feedback edges produced; an epoch
        whose records never went around has no entry).  A round is one exchange: the
        fewer, the less waiting for the slowest worker."""
        return {e: len(ks) for e, ks in sorted(self._rounds.get(scope, {}).items())}

    def local_pass(self, operator: str, epoch: Any) -> None:
        """Stateful operator ``operator`` (``local_rounds=True``) applied a batch of what
        it fed back to itself at once, in a round of ``epoch`` (a round saved)."""
        per = self._passes.get(operator)
        if per is None:
            per = self._passes[operator] = {}
        per[epoch] = per.get(epoch, 0) + 1

    def local_passes(self, operator: str) -> dict[Any, int]:
        """Per epoch, the passes stateful operator ``operator`` made over records it fed
        back to its own worker's bins within a round (``local_rounds=True``: each pass
        would have been a round of the loop without it; counted per worker)."""
        return dict(sorted(self._passes.get(operator, {}).items()))

    def record_move(self, operator: str, bin: int, source: int, target: int, t: Any, nbytes: int, seconds: float) -> None:
        self.moves.append(Move(operator, bin, source, target, t, nbytes, seconds, time.perf_counter()))

    def inputs_at(self, t: Optional[int]) -> None:
        """Every input is at ``t`` (None: all closed): epochs before it are closed."""
        now = time.perf_counter()
        self._closed_upto = _mark(self.closed_at, self._closed_upto, t, now)

    def outputs_at(self, t: Optional[int]) -> None:
        """The output frontier is at ``t`` (None: empty): epochs before it are done."""
        now = time.perf_counter()
        self._done_upto = _mark(self.done_at, self._done_upto, t, now)

    def latencies(self) -> list[tuple[int, float]]:
        """``(epoch, seconds)`` for every epoch both closed and done, in epoch order; a
        run of epochs closed at once and done at once is one entry, at its first epoch
        (``closed_at`` / ``done_at`` hold the first epoch of each run they marked)."""
        closed, done = sorted(self.closed_at.items()), sorted(self.done_at.items())
        if not closed or not done:
            return []
        closed_end, done_end = _end(self.closed_at, self._closed_upto), _end(self.done_at, self._done_upto)
        lo, hi = max(closed[0][0], done[0][0]), min(closed_end, done_end)
        out = []
        for e in sorted({e for e, _ in closed} | {e for e, _ in done}):
            if lo <= e < hi:
                out.append((e, max(0.0, _at(done, e) - _at(closed, e))))
        return out

    @property
    def cache_hit_rate(self) -> float:
        """Bins found in an executor's cache at the committed version, of all bins taken
        (1.0 with none taken)."""
        h = sum(b.cache_hits for b in self.batches)
        c = sum(b.cache_catchups for b in self.batches)
        m = sum(b.cache_misses for b in self.batches)
        return h / (h + c + m) if h + c + m else 1.0

    @property
    def cache_reuse_rate(self) -> float:
        """Bins taken from a cache, at the committed version or caught up by reading only
        the files written since, of all bins taken (1.0 with none taken)."""
        h = sum(b.cache_hits + b.cache_catchups for b in self.batches)
        m = sum(b.cache_misses for b in self.batches)
        return h / (h + m) if h + m else 1.0

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes for m in self.moves)

    def migration_seconds(self) -> float:
        """Wall time from the first to the last bin shipped (0 without moves)."""
        if not self.moves:
            return 0.0
        return self.moves[-1].at_wall - self.moves[0].at_wall + self.moves[0].seconds

    def to_json(self) -> str:
        return json.dumps(
            {"latencies": self.latencies(), "moves": [asdict(m) for m in self.moves], "bytes_moved": self.bytes_moved}
        )


def _mark(table: dict[int, float], upto: Optional[int], t: Optional[int], now: float) -> Optional[int]:
    """Epochs ``[upto, t)`` are marked at ``now``: one entry, at ``upto`` (the run's
    first epoch), whatever the run's length.  ``t`` None: ``upto`` is marked too.
    Returns the new bound (epochs below it are marked, and ``upto`` itself when it is
    in ``table``)."""
    if t is None:  # everything is closed / done: ``upto`` too
        if upto is not None:
            table.setdefault(upto, now)
        return upto
    if type(t) is not int:
        return upto
    if upto is None:
        return t
    if t > upto:
        table.setdefault(upto, now)
        return t
    return upto


def _end(table: dict[int, float], upto: Optional[int]) -> int:
    """One past the last epoch ``table`` marks (bound ``upto``, see :func:`_mark`)."""
    if upto is None:
        return max(table) + 1
    return upto + 1 if upto in table else upto


def _at(runs: list[tuple[int, float]], e: int) -> float:
    """The wall time of the run (sorted ``(first epoch, time)`` pairs) holding ``e``."""
    i = bisect_right(runs, e, key=lambda r: r[0]) - 1
    return runs[i][1]


def plot_latency(series: dict[str, Sequence[tuple[float, float]]], path: str, title: str = "epoch latency") -> None:
    """Plot latency-over-time series (``name -> [(x, seconds)]``) to a PNG at ``path``
    (needs matplotlib: ``pip install -e '.[bench]'``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for name, pts in series.items():
        xs = [p[0] for p in pts]
        ys = [p[1] * 1000 for p in pts]
        ax.plot(xs, ys, label=name, linewidth=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
