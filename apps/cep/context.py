"""The context an iterative condition receives: a view of the partial match it would
extend (the :class:`~apps.cep.conditions.Context` protocol), read from the key's shared
buffer.

One :class:`ConditionContext` per matcher, re-pointed at each partial match before its
condition runs (not reentrant; the matcher is not thread-safe).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from apps.cep.errors import PatternError

__all__ = ["NO_RUN", "ConditionContext"]

#: the partial match of the start state (no node, no event accepted yet)
NO_RUN = (-1, -1, None, -1, -1)


class ConditionContext:
    """The context an iterative condition receives (see :mod:`apps.cep.conditions`).
    One instance per matcher, re-pointed at each partial match (not reentrant)."""

    __slots__ = ("_events", "_index", "_nodes", "_run", "timestamp")

    def __init__(self, index: dict[str, int]) -> None:
        self._nodes: dict[int, list[int]] = {}
        self._events: dict[int, Any] = {}
        self._run: tuple = NO_RUN
        self.timestamp: Any = None
        self._index = index

    def _stage(self, stage: str) -> int:
        try:
            return self._index[stage]
        except KeyError:
            raise PatternError(
                f"ctx: no stage named {stage!r} in the pattern"
            ) from None

    def events(self, stage: str) -> list[Any]:
        """The events accepted so far for ``stage``, oldest first."""
        k = self._stage(stage)
        events = self._events
        out = []
        for n in self._back():
            if n[1] == k:
                out.append(events[n[0]])
            elif n[1] < k:
                break
        out.reverse()
        return out

    def last(self, stage: str) -> Any:
        """The latest event accepted for ``stage``, or None."""
        k = self._stage(stage)
        for n in self._back():
            if n[1] == k:
                return self._events[n[0]]
            if n[1] < k:
                return None
        return None

    def previous(self) -> Any:
        """The latest event accepted into the partial match (any stage), or None."""
        eid = self._run[4]
        return self._events[eid] if eid >= 0 else None

    def all_events(self) -> list[Any]:
        """Every event accepted into the partial match so far, oldest first."""
        events = self._events
        out = [events[n[0]] for n in self._back()]
        out.reverse()
        return out

    def _back(self) -> Iterator[list[Any]]:
        """The partial match's buffer nodes ``[event id, stage, previous node, refs]``,
        newest first."""
        nodes = self._nodes
        nid = self._run[1]
        while nid >= 0:
            n = nodes[nid]
            yield n
            nid = n[2]
