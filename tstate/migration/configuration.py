"""Configurations over time: which worker owns each bin, for records at each time.

A :class:`ConfigHistory` starts from an initial map and holds *steps*
``(time, {bin: worker})``; the map in force for records at time ``t`` is the initial map
updated by every step at a time ``<= t``, in time order.  A command issued at time ``t``
supersedes the steps of earlier commands scheduled after ``t`` (the newest command
wins; it is planned from the map in force at ``t``).

>>> h = ConfigHistory([0, 0, 1, 1])
>>> h.schedule(5, [{0: 1}, {3: 0}])
[5, 6]
>>> h.owners_at(4), h.owners_at(5), h.owners_at(9)
([0, 0, 1, 1], [1, 0, 1, 1], [1, 0, 1, 0])
>>> h.moves()
[(5, 0, 0, 1), (6, 3, 1, 0)]
"""

from __future__ import annotations

import bisect
from typing import Sequence

__all__ = ["ConfigHistory"]


class ConfigHistory:
    """Bin → worker maps over (integer) time for one stateful operator."""

    def __init__(self, initial: Sequence[int]) -> None:
        self.initial = list(initial)
        self._steps: list[tuple[int, dict[int, int]]] = []
        self._times: list[int] = []
        self._maps: list[list[int]] = []

    @property
    def bins(self) -> int:
        return len(self.initial)

    def schedule(self, time: int, steps: list[dict[int, int]], spacing: int = 1) -> list[int]:
        """Schedule ``steps`` at ``time, time + spacing, ...`` after dropping steps
        scheduled at or after ``time``; returns the step times."""
        self._steps = [(t, s) for t, s in self._steps if t < time]
        times = []
        for i, step in enumerate(steps):
            t = time + i * spacing
            self._steps.append((t, dict(step)))
            times.append(t)
        self._rebuild()
        return times

    def _rebuild(self) -> None:
        self._times, self._maps = [], []
        cur = list(self.initial)
        for t, step in sorted(self._steps, key=lambda p: p[0]):
            cur = list(cur)
            for b, w in step.items():
                cur[b] = w
            if self._times and self._times[-1] == t:
                self._maps[-1] = cur
            else:
                self._times.append(t)
                self._maps.append(cur)

    def owners_at(self, time: int) -> list[int]:
        """The map in force for records at ``time`` (do not mutate)."""
        i = bisect.bisect_right(self._times, time)
        return self._maps[i - 1] if i else self.initial

    def final(self) -> list[int]:
        """The map after every scheduled step."""
        return self._maps[-1] if self._maps else self.initial

    def moves(self) -> list[tuple[int, int, int, int]]:
        """Every ownership change as ``(time, bin, from_worker, to_worker)``, in time order."""
        out = []
        prev = self.initial
        for t, cur in zip(self._times, self._maps):
            for b, (a, c) in enumerate(zip(prev, cur)):
                if a != c:
                    out.append((t, b, a, c))
            prev = cur
        return out

    def step_times(self) -> list[int]:
        return list(self._times)
