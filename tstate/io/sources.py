"""Sources: streams read from outside, batch by batch, with their times.

A :class:`Source` is opened once per execution into a :class:`Reader` whose
``next_batch()`` returns ``(time, records)`` in non-decreasing time order, or ``None``
when exhausted; the source operator holds a capability at the time of the last batch,
so the frontier follows the source.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from tstate.errors import SourceError

__all__ = ["Source", "Reader", "from_batches"]


class Reader:
    """An open source (see the module docstring)."""

    def start_time(self) -> Any:
        """The time before any batch (the capability the source starts with)."""
        return 0

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def position(self) -> Any:
        """Where the reader is (for checkpoints): anything msgpack can encode."""
        return None


class Source:
    """Something that can be read as batches with times."""

    def open(self) -> Reader:  # pragma: no cover - abstract
        raise NotImplementedError


class _BatchesReader(Reader):
    def __init__(self, it: Iterator[Any], start: Any) -> None:
        self._it = it
        self._start = start
        self._n = 0

    def start_time(self) -> Any:
        return self._start

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:
        try:
            item = next(self._it)
        except StopIteration:
            return None
        try:
            t, recs = item
        except (TypeError, ValueError):
            raise SourceError(f"batch #{self._n} of the source is {item!r}, expected a (time, records) pair") from None
        self._n += 1
        return t, list(recs)

    def position(self) -> Any:
        return self._n


class _Batches(Source):
    def __init__(self, batches: Iterable[Any], start: Any) -> None:
        self._batches = batches
        self._start = start

    def open(self) -> Reader:
        return _BatchesReader(iter(self._batches), self._start)


def from_batches(batches: Iterable[Any], start: Any = 0) -> Source:
    """A source of ``(time, records)`` pairs from any iterable."""
    return _Batches(batches, start)
