"""Shared helpers for the benchmarks: timing medians, printing tables."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Run ``fn`` ``repeat`` times; return the median seconds and the last result."""
    times = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def interleaved(cases: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, Any]]:
    """Median time of each case, the cases run round-robin so machine noise hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), results[k]) for k, v in times.items()}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (markdown-compatible)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.3f}" if abs(x) < 100 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


class EpochDriver:
    """Drives an input epoch by epoch and measures each epoch's latency: the wall time
    from closing the epoch's input to the probe passing it (returned by :meth:`run`);
    also the processing thread's CPU time of the epoch (:attr:`cpu`: what the epoch
    cost this process, whatever the machine's load) and the time the cyclic garbage
    collector ran during it (:attr:`gc`, wall seconds, ``gc.callbacks``).

    After every epoch the long-lived heap is frozen out of the cyclic GC (``gc.freeze``):
    standard tuning for a latency-sensitive Python process with a large heap, without
    which a full GC scan of a million state objects (~1 s) lands on a random epoch.
    State is acyclic, so reference counting still frees it."""

    def __init__(self, inp: Any, probe: Any, ex: Any) -> None:
        import gc

        self.inp = inp
        self.probe = probe
        self.ex = ex
        self.epoch = 0
        self.cpu = 0.0  # the last epoch's processing-thread CPU seconds
        self.gc = 0.0  # the last epoch's seconds in the cyclic garbage collector
        self._gc_total = 0.0
        self._gc_start = 0.0

        def on_gc(phase: str, info: Any) -> None:
            if phase == "start":
                self._gc_start = time.perf_counter()
            else:
                self._gc_total += time.perf_counter() - self._gc_start

        gc.callbacks.append(on_gc)

    def run(self, records: list[Any]) -> float:
        import gc

        self.inp.send(records)
        self.epoch += 1
        g0 = self._gc_total
        c0 = time.thread_time()
        t0 = time.perf_counter()
        self.inp.advance_to(self.epoch)
        while self.probe.less_than(self.epoch):
            self.ex.step()
        took = time.perf_counter() - t0
        self.cpu = time.thread_time() - c0
        self.gc = self._gc_total - g0
        gc.freeze()
        return took

    def preload(self, keys: int, chunk: int = 100_000) -> None:
        """Give every key ``0 .. keys - 1`` its state, ``chunk`` keys per epoch."""
        for i in range(0, keys, chunk):
            self.run([(k, k % 1000) for k in range(i, min(keys, i + chunk))])


def ratio(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant figures, for the JSON line: a fixed number of
    decimals would print a small ratio as 0 (a 4-worker run on a loaded machine
    against a plain loop over a few thousand records can be under 0.0005).

    >>> ratio(0.000123456), ratio(1.23456), ratio(1234.5678)
    (0.0001235, 1.235, 1235.0)
    """
    return float(f"{x:.{digits}g}")
