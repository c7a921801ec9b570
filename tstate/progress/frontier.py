"""Antichains: the frontiers of Timely dataflow.

An :class:`Antichain` is a set of mutually incomparable times (the minimal elements of
whatever was inserted).  As a *frontier* it promises: **no time ``t`` with
``not frontier.less_equal(t)`` can appear any more** at that location; a time ``t`` is
*complete* once ``not frontier.less_equal(t)``.  The empty antichain means nothing can
appear again: the location is done.

A :class:`MutableAntichain` is the frontier of a *multiset* of times (e.g. counts of
capabilities and of records in flight): ``update_iter`` applies count changes and
returns the changes **to the frontier**, which is what drives notifications.

>>> from tstate.progress.timestamp import Product
>>> a = Antichain([Product(1, 2), Product(2, 1), Product(2, 2)])
>>> sorted(a)
[Product(outer=1, inner=2), Product(outer=2, inner=1)]
>>> a.less_equal(Product(2, 2)), a.less_than(Product(2, 1)), a.less_equal(Product(1, 1))
(True, False, False)
>>> m = MutableAntichain()
>>> m.update_iter([(3, 1), (5, 1)])
[(3, 1)]
>>> m.update_iter([(3, -1)])
[(3, -1), (5, 1)]
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from tstate.errors import ProgressError
from tstate.progress.timestamp import less_equal

__all__ = ["Antichain", "MutableAntichain", "minimal_elements"]


def _insert(elements: list[Any], t: Any) -> bool:
    """Insert ``t`` into the antichain ``elements`` (in place) if no element is
    ``<= t``; remove the elements ``t`` is ``<=``.  Returns whether it was inserted."""
    if type(t) is int:
        for e in elements:
            if e <= t:
                return False
        elements[:] = [e for e in elements if not t <= e]
    else:
        for e in elements:
            if less_equal(e, t):
                return False
        elements[:] = [e for e in elements if not less_equal(t, e)]
    elements.append(t)
    return True


def minimal_elements(times: Iterable[Any]) -> list[Any]:
    """The minimal elements of ``times`` under the partial order, sorted."""
    items = sorted(set(times))
    if not items:
        return []
    if type(items[0]) is int:
        return [items[0]]
    out: list[Any] = []
    for t in items:  # lexicographic order: a minimal element is never preceded by a larger one
        if not any(less_equal(e, t) for e in out):
            out.append(t)
    return out


class Antichain:
    """An immutable set of mutually incomparable times (or path summaries).

    Constructed from any iterable; only its minimal elements are kept."""

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[Any] = ()) -> None:
        els: list[Any] = []
        for t in elements:
            _insert(els, t)
        els.sort()  # deterministic iteration order
        self._elements: tuple[Any, ...] = tuple(els)

    @classmethod
    def _from_minimal(cls, elements: Iterable[Any]) -> "Antichain":
        a = cls.__new__(cls)
        a._elements = tuple(sorted(elements))
        return a

    @property
    def elements(self) -> tuple[Any, ...]:
        """The elements, sorted (lexicographically for products)."""
        return self._elements

    def with_element(self, t: Any) -> "Antichain":
        """A new antichain with ``t`` inserted (unchanged if some element is ``<= t``)."""
        return Antichain((*self._elements, t))

    def less_equal(self, t: Any) -> bool:
        """True iff some element is ``<= t``: ``t`` may still appear."""
        if type(t) is int:
            for e in self._elements:
                if e <= t:
                    return True
            return False
        return any(less_equal(e, t) for e in self._elements)

    def less_than(self, t: Any) -> bool:
        """True iff some element is strictly ``< t``."""
        return any(e != t and less_equal(e, t) for e in self._elements)

    def dominates(self, other: "Antichain") -> bool:
        """True iff every element of ``other`` is ``>=`` some element of ``self``:
        everything ``other`` still allows, ``self`` allows too."""
        return all(self.less_equal(t) for t in other._elements)

    def is_empty(self) -> bool:
        """True when nothing can appear any more."""
        return not self._elements

    def __bool__(self) -> bool:
        return bool(self._elements)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Antichain) and self._elements == other._elements

    def __hash__(self) -> int:
        return hash(self._elements)

    def __repr__(self) -> str:
        return f"Antichain({list(self._elements)!r})"


class MutableAntichain:
    """The frontier (minimal elements) of a multiset of times with integer counts.

    Counts change through :meth:`update_iter`, which returns the resulting changes to
    the frontier as ``(time, +1)`` (entered) and ``(time, -1)`` (left).  A count that
    ends negative is a progress-accounting bug and raises :class:`ProgressError`."""

    __slots__ = ("_counts", "_frontier")

    def __init__(self, updates: Iterable[tuple[Any, int]] = ()) -> None:
        self._counts: dict[Any, int] = {}
        self._frontier: list[Any] = []
        if updates:
            self.update_iter(updates)

    @property
    def frontier(self) -> Antichain:
        """The current frontier as an immutable :class:`Antichain`."""
        return Antichain._from_minimal(self._frontier)

    def elements(self) -> list[Any]:
        """The frontier's elements (a fresh list)."""
        return list(self._frontier)

    def less_equal(self, t: Any) -> bool:
        """True iff some frontier element is ``<= t``."""
        if type(t) is int:
            for e in self._frontier:
                if e <= t:
                    return True
            return False
        return any(less_equal(e, t) for e in self._frontier)

    def less_than(self, t: Any) -> bool:
        """True iff some frontier element is strictly ``< t``."""
        return any(e != t and less_equal(e, t) for e in self._frontier)

    def is_empty(self) -> bool:
        return not self._frontier

    def count_for(self, t: Any) -> int:
        """The count of exactly ``t``."""
        return self._counts.get(t, 0)

    def update_one(self, t: Any, d: int) -> list[tuple[Any, int]]:
        """Apply one count change; return the changes to the frontier (unsorted).  The
        common cases cost a dictionary update: a count added at or above the frontier,
        or removed where others remain."""
        counts = self._counts
        c = counts.get(t, 0) + d
        if c > 0:
            counts[t] = c
            if d < 0:
                return []
            frontier = self._frontier
            if type(t) is int:
                for e in frontier:
                    if e <= t:
                        return []
                out = [(e, -1) for e in frontier]
                self._frontier = [t]
                out.append((t, 1))
                return out
            for e in frontier:
                if less_equal(e, t):
                    return []
            # t is new and minimal: it enters, the elements above it leave
            keep = []
            out = []
            for e in frontier:
                if less_equal(t, e):
                    out.append((e, -1))
                else:
                    keep.append(e)
            keep.append(t)
            self._frontier = keep
            out.append((t, 1))
            return out
        if c < 0:
            raise ProgressError(f"progress accounting went negative at time {t!r} (count {c})")
        if not d:
            return []
        del counts[t]
        old = self._frontier
        if t not in old:
            return []
        if not counts:
            self._frontier = []
            return [(e, -1) for e in old]
        new = list(counts) if len(counts) == 1 else minimal_elements(counts)
        self._frontier = new
        out = [(e, -1) for e in old if e not in new]
        out.extend((e, 1) for e in new if e not in old)
        return out

    def update_iter(self, updates: Iterable[tuple[Any, int]]) -> list[tuple[Any, int]]:
        """Apply count changes; return the changes to the frontier, sorted by time."""
        counts = self._counts
        frontier = self._frontier
        rebuild = False
        for t, d in updates:
            if not d:
                continue
            c = counts.get(t, 0) + d
            if c:
                counts[t] = c
            else:
                del counts[t]
            if not rebuild:
                if d > 0:
                    # a new time matters only if no frontier element is <= it
                    if not self.less_equal(t):
                        rebuild = True
                elif c < 0 or (c == 0 and t in frontier):
                    rebuild = True  # (a negative count is checked below)
        if not rebuild:
            return []
        for t, c in counts.items():
            if c < 0:
                raise ProgressError(f"progress accounting went negative at time {t!r} (count {c})")
        new = minimal_elements(counts)
        old = frontier
        self._frontier = new
        changes = [(t, -1) for t in old if t not in new]
        changes.extend((t, 1) for t in new if t not in old)
        changes.sort(key=lambda p: p[0])
        return changes

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={self._frontier!r}, counts={self._counts!r})"
