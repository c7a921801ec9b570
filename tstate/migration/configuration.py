"""Configurations over time: which worker owns each bin, for records at each time.

A :class:`ConfigHistory` starts from an initial map and holds *steps*
``(time, {bin: worker})``; the map in force for records at time ``t`` is the initial map
updated by every step at a time ``<= t``, in time order.  A command issued at time ``t``
supersedes the steps of earlier commands scheduled after ``t`` (the newest command
wins; it is planned from the map in force at ``t``).

Scheduling costs time and memory in the number of *moves*, not steps x bins: a
migration of 4,096 bins in 4,096 one-bin steps (``fluid``) is planned while the
dataflow runs, between two steps of the processing thread, so it must not copy the
whole map per step.  The history keeps each step as its changes (only the bins whose
owner changes) and materialises a full map only when one is asked for
(:meth:`owners_at`), from the nearest *key frame* (a full map kept every
:data:`KEYFRAME` steps) and the changes after it; the last few maps asked for are
cached (routers ask for the same map for every batch of a time).

>>> h = ConfigHistory([0, 0, 1, 1])
>>> h.schedule(5, [{0: 1}, {3: 0}])
[5, 6]
>>> h.owners_at(4), h.owners_at(5), h.owners_at(9)
([0, 0, 1, 1], [1, 0, 1, 1], [1, 0, 1, 0])
>>> h.moves()
[(5, 0, 0, 1), (6, 3, 1, 0)]
>>> h.moves_from(1)
[(6, 3, 0)]
"""

from __future__ import annotations

import bisect
from typing import Sequence

__all__ = ["ConfigHistory", "KEYFRAME"]

#: a full map is kept every ``KEYFRAME`` steps: materialising any map applies at most
#: ``KEYFRAME - 1`` steps' changes to a copy of a key frame
KEYFRAME = 64

_CACHED = 4  # maps materialised on demand and kept (most recently asked for last)


class ConfigHistory:
    """Bin → worker maps over (integer) time for one stateful operator."""

    def __init__(self, initial: Sequence[int]) -> None:
        self.initial = list(initial)
        self._steps: list[tuple[int, dict[int, int]]] = []
        self._times: list[int] = []
        #: per distinct step time (in time order): the changes ``{bin: worker}`` that
        #: actually change an owner, and every move ``(bin, from, to)`` they make
        self._changes: list[dict[int, int]] = []
        self._moves: list[list[tuple[int, int, int]]] = []
        self._keyframes: list[list[int]] = []  # the map after step i * KEYFRAME
        self._from: dict[int, list[tuple[int, int, int]]] = {}  # worker -> its moves out (time, bin, to)
        self._cache: dict[int, list[int]] = {}
        self._final: list[int] = self.initial

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
        self._rebuild(time)
        return times

    def _rebuild(self, since: int) -> None:
        """Recompute the per-time changes, the moves and the key frames of the steps at
        or after ``since`` (the ones before it are as they were): time and memory in
        the number of changes (plus one map per key frame)."""
        keep = bisect.bisect_left(self._times, since)
        del self._times[keep:], self._changes[keep:], self._moves[keep:]
        del self._keyframes[(keep + KEYFRAME - 1) // KEYFRAME :]
        for moves in self._from.values():
            del moves[bisect.bisect_left(moves, (since,)) :]
        self._cache = {}
        cur = list(self._map(keep - 1))
        merged: dict[int, dict[int, int]] = {}
        for t, step in sorted((p for p in self._steps if p[0] >= since), key=lambda p: p[0]):
            merged.setdefault(t, {}).update(step)
        for i, t in enumerate(sorted(merged), start=keep):
            changes: dict[int, int] = {}
            moves = []
            for b, w in merged[t].items():
                if cur[b] != w:
                    moves.append((b, cur[b], w))
                    changes[b] = w
                    cur[b] = w
            moves.sort()
            for b, a, c in moves:
                self._from.setdefault(a, []).append((t, b, c))
            self._times.append(t)
            self._changes.append(changes)
            self._moves.append(moves)
            if i % KEYFRAME == 0:
                self._keyframes.append(list(cur))
        self._final = cur

    def _map(self, i: int) -> list[int]:
        """The map after step ``i`` (-1: the initial map), materialised from the key
        frame before it (do not mutate)."""
        if i < 0:
            return self.initial
        k = i // KEYFRAME
        m = self._keyframes[k]
        if i != k * KEYFRAME:
            m = list(m)
            for ch in self._changes[k * KEYFRAME + 1 : i + 1]:
                for b, w in ch.items():
                    m[b] = w
        return m

    def owners_at(self, time: int) -> list[int]:
        """The map in force for records at ``time`` (do not mutate)."""
        i = bisect.bisect_right(self._times, time) - 1
        if i < 0:
            return self.initial
        cache = self._cache
        m = cache.get(i)
        if m is None:
            m = self._map(i)
            if len(cache) >= _CACHED:
                del cache[next(iter(cache))]
        else:
            del cache[i]  # re-inserted below: most recently used last
        cache[i] = m
        return m

    def final(self) -> list[int]:
        """The map after every scheduled step (do not mutate)."""
        return self._final

    def moves(self) -> list[tuple[int, int, int, int]]:
        """Every ownership change as ``(time, bin, from_worker, to_worker)``, in time order
        (by bin within a time)."""
        return [(t, b, a, c) for t, ms in zip(self._times, self._moves) for b, a, c in ms]

    def moves_from(self, worker: int) -> list[tuple[int, int, int]]:
        """The moves out of ``worker`` as ``(time, bin, to_worker)``, in time order."""
        return list(self._from.get(worker, ()))

    def step_times(self) -> list[int]:
        return list(self._times)
