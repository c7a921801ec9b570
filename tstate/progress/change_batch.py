"""``ChangeBatch``: a lazily consolidated list of ``(time, delta)`` updates.

Updates are appended cheaply; they are consolidated (equal times summed, zeros
dropped) only when the batch grows large or when it is read.  This is how pointstamp
count changes travel: one entry per batch of records, never one per record.

>>> b = ChangeBatch()
>>> b.update(3, +1); b.update(5, +2); b.update(3, -1)
>>> b.drain()
[(5, 2)]
>>> b.is_empty()
True
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

__all__ = ["ChangeBatch"]


class ChangeBatch:
    """A multiset of changes ``(time, delta)``; see the module docstring."""

    __slots__ = ("_updates", "_clean")

    def __init__(self, updates: Iterable[tuple[Any, int]] = ()) -> None:
        self._updates: list[tuple[Any, int]] = list(updates)
        self._clean = 0

    def update(self, time: Any, delta: int) -> None:
        """Add ``delta`` to the count of ``time``."""
        self._updates.append((time, delta))
        if len(self._updates) > 32 and len(self._updates) >> 1 >= self._clean:
            self.compact()

    def extend(self, updates: Iterable[tuple[Any, int]]) -> None:
        """Add several changes."""
        self._updates.extend(updates)
        if len(self._updates) > 32 and len(self._updates) >> 1 >= self._clean:
            self.compact()

    def compact(self) -> None:
        """Consolidate: sum the deltas of equal times, drop zeros, sort by time."""
        if self._clean == len(self._updates) and self._clean <= 1:
            if self._clean == 1 and self._updates[0][1] == 0:
                self._updates.clear()
                self._clean = 0
            return
        acc: dict[Any, int] = {}
        for t, d in self._updates:
            acc[t] = acc.get(t, 0) + d
        self._updates = sorted(((t, d) for t, d in acc.items() if d), key=_first)
        self._clean = len(self._updates)

    def is_empty(self) -> bool:
        """True when the consolidated batch has no changes."""
        if self._clean < len(self._updates):
            self.compact()
        return not self._updates

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        """Iterate the consolidated changes, in time order."""
        self.compact()
        return iter(list(self._updates))

    def __len__(self) -> int:
        self.compact()
        return len(self._updates)

    def drain(self) -> list[tuple[Any, int]]:
        """Return the consolidated changes and empty the batch."""
        self.compact()
        out, self._updates, self._clean = self._updates, [], 0
        return out

    def __repr__(self) -> str:
        return f"ChangeBatch({list(self)!r})"


def _first(pair: tuple[Any, int]) -> Any:
    return pair[0]
