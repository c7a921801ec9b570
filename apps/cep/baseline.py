"""The two flight patterns written by hand, per key, without the pattern library: the
baseline the NFA engine is compared with (for results and for speed).

Each class keeps the state of one key and has ``process(flight, t) -> list[match]`` and
``advance_time(t) -> list[match]``, where a match is a ``dict`` stage -> list of flights
shaped like :class:`apps.cep.Match`.  They implement exactly the semantics of
:func:`apps.cep.flights.delay_cascade` and :func:`apps.cep.flights.recovery` (including
Flink's rule that, under ``skip_past_last_event``, a complete match waits until no
partial match that started earlier is still open), nothing more.
"""

from __future__ import annotations

from typing import Any

from apps.cep.flights import (
    CASCADE_MIN_DELAY,
    CASCADE_WINDOW,
    RECOVERY_MIN_DELAY,
    RECOVERY_WINDOW,
    Flight,
)

__all__ = ["CascadeBaseline", "RecoveryBaseline", "run_baseline"]


class CascadeBaseline:
    """delay > 30, then >= 2 departures each delayed more than the previous one, within
    3 hours; every departure in at most one reported cascade."""

    __slots__ = ("held", "open", "seq")

    def __init__(self) -> None:
        # open cascades, oldest first: [start_seq, start_time, flights]
        self.open: list[list[Any]] = []
        # complete cascades waiting for older open ones: (start_seq, end_seq, flights)
        self.held: list[tuple[int, int, list[Flight]]] = []
        self.seq = 0

    def advance_time(self, t: int) -> list[dict[str, list[Flight]]]:
        out: list[dict[str, list[Flight]]] = []
        k = 0
        while k < len(self.open) and t - self.open[k][1] >= CASCADE_WINDOW:
            k += 1
        if k:
            del self.open[:k]  # timed out
            self._release(out)
        return out

    def process(self, f: Flight, t: int) -> list[dict[str, list[Flight]]]:
        out = self.advance_time(t)
        seq = self.seq
        self.seq += 1
        completed = []
        for c in self.open:
            flights = c[2]
            if f.delay > flights[-1].delay:
                flights.append(f)
                if len(flights) == 3:  # the first two rises: a cascade
                    completed.append((c[0], seq, flights[:]))
        if f.delay > CASCADE_MIN_DELAY:
            self.open.append([seq, t, [f]])
        if completed:
            self.held.extend(completed)
            self.held.sort(key=lambda h: (h[0], h[1]))
            self._release(out)
        return out

    def _release(self, out: list) -> None:
        while self.held:
            start, end, flights = self.held[0]
            if self.open and self.open[0][0] < start:
                return  # an older cascade is still open
            del self.held[0]
            out.append({"first": flights[:1], "rise": flights[1:]})
            # skip past the last event: drop what started at or before it
            self.open = [c for c in self.open if c[0] > end]
            self.held = [h for h in self.held if h[0] > end]


class RecoveryBaseline:
    """delay > 60, then the first departure with delay <= 0 within 2 hours, no other
    delay > 60 in between."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: tuple[int, Flight] | None = None  # (start time, delayed flight)

    def advance_time(self, t: int) -> list[dict[str, list[Flight]]]:
        if self.pending is not None and t - self.pending[0] >= RECOVERY_WINDOW:
            self.pending = None
        return []

    def process(self, f: Flight, t: int) -> list[dict[str, list[Flight]]]:
        out = []
        p = self.pending
        if p is not None:
            if t - p[0] >= RECOVERY_WINDOW:
                self.pending = None
            elif f.delay > RECOVERY_MIN_DELAY:
                self.pending = None  # another big delay: this one did not recover
            elif f.delay <= 0:
                out.append({"delayed": [p[1]], "on_time": [f]})
                self.pending = None
        if f.delay > RECOVERY_MIN_DELAY:
            self.pending = (t, f)
        return out


def run_baseline(
    cls: type, flights: list[Flight], times: list[int]
) -> list[tuple[str, dict]]:
    """Run a baseline over flights keyed by origin; returns [(origin, match)] in
    emission order."""
    states: dict[str, Any] = {}
    out = []
    for f, t in zip(flights, times):
        st = states.get(f.origin)
        if st is None:
            st = states[f.origin] = cls()
        for m in st.process(f, t):
            out.append((f.origin, m))
    return out
