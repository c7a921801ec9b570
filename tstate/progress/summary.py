"""Path summaries: how a time changes along a path through the dataflow graph.

A summary maps a time at one location to the least time it can become at another.
Along ordinary edges and operators it is the identity; a feedback edge adds 1 to the
innermost coordinate; entering an iterate scope appends a coordinate ``0``; leaving
one drops the innermost coordinate.  Every path's summary has the normal form

    ``results_in(t) = (t[0] + add[0], ..., t[keep-1] + add[keep-1], *tail)``

from a time with ``src + 1`` coordinates: the first ``keep`` coordinates are kept and
advanced, the rest dropped, and ``tail`` constant coordinates are appended (the inner
times of scopes entered along the path).  Summaries compose (:meth:`followed_by`) and
are partially ordered (:meth:`less_equal`: ``s1 <= s2`` iff ``s1(t) <= s2(t)`` for all
``t``), so antichains of them describe all paths between two locations.

A summary whose result would exceed :data:`TIME_MAX` *overflows*: ``results_in``
returns ``None`` and a record it applied to is dropped.

>>> from tstate.progress.timestamp import Product
>>> step = PathSummary.feedback(1)
>>> step.results_in(Product(3, 4))
Product(outer=3, inner=5)
>>> PathSummary.enter(0).followed_by(step).followed_by(PathSummary.leave(1)).results_in(7)
7
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen

from tstate.progress.timestamp import TIME_MAX, Timestamp, from_vector, to_vector

__all__ = ["PathSummary"]


@frozen(order=True)
class PathSummary:
    """A path summary in normal form (see the module docstring).

    ``src``/``dst`` are the depths (number of enclosing iterate scopes) of the two
    locations it connects."""

    src: int
    dst: int
    add: tuple[int, ...]
    tail: tuple[int, ...] = ()

    # -- constructors -------------------------------------------------------------
    @staticmethod
    def identity(depth: int = 0) -> "PathSummary":
        """The summary of an edge or a pass-through operator at ``depth``."""
        return PathSummary(depth, depth, (0,) * (depth + 1))

    @staticmethod
    def feedback(depth: int, step: int = 1) -> "PathSummary":
        """A feedback edge at ``depth >= 1``: adds ``step`` to the innermost coordinate."""
        return PathSummary(depth, depth, (0,) * depth + (step,))

    @staticmethod
    def advance(depth: int, step: int) -> "PathSummary":
        """Adds ``step`` to the innermost coordinate (an operator that delays time)."""
        return PathSummary(depth, depth, (0,) * depth + (step,))

    @staticmethod
    def enter(depth: int) -> "PathSummary":
        """Entering an iterate scope from ``depth``: ``t`` → ``Product(t, 0)``."""
        return PathSummary(depth, depth + 1, (0,) * (depth + 1), (0,))

    @staticmethod
    def leave(depth: int) -> "PathSummary":
        """Leaving an iterate scope at ``depth >= 1``: ``Product(o, i)`` → ``o``."""
        return PathSummary(depth, depth - 1, (0,) * depth)

    # -- behaviour ----------------------------------------------------------------
    @property
    def keep(self) -> int:
        return len(self.add)

    def is_identity(self) -> bool:
        return self.src == self.dst and not self.tail and not any(self.add)

    def results_in(self, t: Timestamp) -> Optional[Timestamp]:
        """The least time ``t`` becomes along the path, or ``None`` on overflow."""
        if type(t) is int and self.src == 0 and self.dst == 0:
            r = t + self.add[0]
            return r if r <= TIME_MAX else None
        v = to_vector(t)
        out = [v[i] + a for i, a in enumerate(self.add)]
        out.extend(self.tail)
        for x in out:
            if x > TIME_MAX:
                return None
        return from_vector(out)

    def followed_by(self, other: "PathSummary") -> "PathSummary":
        """The summary of this path followed by ``other`` (``other.src == self.dst``)."""
        if other.src != self.dst:
            raise ValueError(f"cannot compose summaries of depths {self.src}->{self.dst} and {other.src}->{other.dst}")
        k1, k2 = self.keep, other.keep
        keep = min(k1, k2)
        add = tuple(self.add[i] + other.add[i] for i in range(keep))
        mid = tuple(self.tail[i - k1] + other.add[i] for i in range(keep, k2)) if k2 > k1 else ()
        return PathSummary(self.src, other.dst, add, mid + other.tail)

    def less_equal(self, other: "PathSummary") -> bool:
        """``self(t) <= other(t)`` for every time ``t`` (conservatively ``False`` when
        the two keep different coordinates)."""
        if (self.src, self.dst, self.keep) != (other.src, other.dst, other.keep):
            return False
        return all(a <= b for a, b in zip(self.add, other.add)) and all(
            a <= b for a, b in zip(self.tail, other.tail)
        )

    def strictly_advances(self) -> bool:
        """For a path from a location back to itself: no time ``t`` has ``s(t) <= t``,
        so a pointstamp is never blocked by its own consequences.  True iff some kept
        coordinate strictly grows (coordinates re-entered from ``tail`` may restart)."""
        return self.src == self.dst and any(self.add) and min(self.add) >= 0

    def __repr__(self) -> str:
        if self.is_identity():
            return f"Identity(depth={self.src})"
        return f"PathSummary({self.src}->{self.dst}, add={self.add}, tail={self.tail})"

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return repr(self)


