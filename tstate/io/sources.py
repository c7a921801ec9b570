"""Sources: streams read from outside, batch by batch, with their times.

A :class:`Source` is opened once per execution into a :class:`Reader` whose
``next_batch()`` returns ``(time, records)`` in non-decreasing time order, or ``None``
when exhausted; the source operator holds a capability at the time of the last batch,
so the frontier follows the source.

Replay: ``reader.position()`` is where the *next* batch starts (anything msgpack can
encode: a batch index, a row offset).  A checkpoint at time ``T`` records the position
of the first batch at a time ``>= T``; recovery calls ``source.open(position, T)`` and
the reader continues from there, starting at time ``T``.

Epoch unit: a source that cuts a time column into epochs (``ts.io.parquet(path,
time="date", epoch="1h")``) says what an epoch is in its ``epoch_unit``
(:class:`EpochUnit`); checkpoints record it (``Manifest.meta["epoch_unit"]``), so
``python -m tstate checkpoints`` shows a checkpoint's time as the date it stands for.

>>> src = from_batches([(0, ["a"]), (1, ["b"]), (1, ["c"]), (3, ["d"])])
>>> r = src.open()
>>> r.next_batch(), r.position()
((0, ['a']), 1)
>>> r2 = src.open(position=3, start=2)
>>> r2.start_time(), r2.next_batch()
(2, (3, ['d']))

What a source may tell about its records (both optional; ``None`` when unknown), so
that operators downstream need not be told again: :meth:`Source.event_time` -- which
record field holds the event time, how much event time a dataflow epoch covers, and
the unit of a numeric event time (:class:`EventTime`) -- and
:meth:`Source.record_type` -- the type of its records (an attrs class, or a
``TypedDict`` built from a table's columns), a type tstate can encode as state.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from attrs import frozen

from tstate.errors import SourceError

__all__ = ["EpochUnit", "EventTime", "Source", "Reader", "from_batches", "UNIX_EPOCH"]

#: the naive (UTC) datetime at which dataflow epoch 0 of a datetime event time starts
UNIX_EPOCH = _dt.datetime(1970, 1, 1)


@frozen
class EpochUnit:
    """What one epoch of a source's times is: epoch ``t`` covers ``[t * size, (t + 1) *
    size)`` of the source's time column -- seconds since 1970-01-01 UTC if ``dates``,
    else the column's own numbers. It labels epoch numbers for people (the checkpoint
    listings); :class:`EventTime` tells operators how to read a record's event time.

    >>> EpochUnit(3600, dates=True).label(271752)
    '2001-01-01 00:00'
    >>> EpochUnit(0.5, dates=False).label(7)
    '3.5'
    """

    size: float
    dates: bool

    def label(self, t: Any) -> str:
        """The start of epoch ``t`` in the user's terms (a date and time, or a number);
        a time that is not an integer epoch (a loop's ``Product``) as ``str(t)``."""
        if type(t) is not int:
            return str(t)
        start = t * self.size
        if not self.dates:
            return f"{start:g}"
        when = UNIX_EPOCH + _dt.timedelta(seconds=start)
        if self.size % 86400 == 0:
            return when.strftime("%Y-%m-%d")
        return when.strftime("%Y-%m-%d %H:%M" if self.size % 60 == 0 else "%Y-%m-%d %H:%M:%S")

    def to_builtins(self) -> dict[str, Any]:
        return {"size": self.size, "dates": self.dates}

    @classmethod
    def from_builtins(cls, obj: Any) -> Optional["EpochUnit"]:
        """The unit recorded in checkpoint metadata; None if ``obj`` is not one."""
        if isinstance(obj, dict) and isinstance(obj.get("size"), (int, float)) and obj["size"] > 0:
            return cls(float(obj["size"]), bool(obj.get("dates")))
        return None


@frozen
class EventTime:
    """How a source's records carry their event time.

    ``field``: the record field (dict key or attribute) holding it; ``epoch``: the event
    time one dataflow epoch covers -- a number in the field's unit, or a
    ``datetime.timedelta`` when the values are datetimes (epoch ``T`` then covers
    ``[origin + T*epoch, origin + (T+1)*epoch)``); ``unit``: the duration of 1 of a
    numeric event time (``timedelta(minutes=1)`` for minutes), ``None`` when unknown or
    when the values are datetimes; ``origin``: the event time at which epoch 0 starts
    (``0`` for numbers, :data:`UNIX_EPOCH` -- or its UTC-aware twin -- for datetimes)."""

    field: str
    epoch: Any
    unit: Optional[_dt.timedelta] = None
    origin: Any = 0


class Reader:
    """An open source (see the module docstring)."""

    def start_time(self) -> Any:
        """The time before any batch (the capability the source starts with)."""
        return 0

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def position(self) -> Any:
        """Where the next batch starts (msgpack-encodable)."""
        return None

    def close(self) -> None:
        """Release files and connections."""


class Source:
    """Something that can be read as batches with times."""

    #: what an epoch of this source's times is, when the source knows (see the module
    #: docstring); None: times are plain epochs
    epoch_unit: Optional[EpochUnit] = None

    def open(self, position: Any = None, start: Any = None) -> Reader:  # pragma: no cover - abstract
        """A reader from ``position`` (None: the beginning), whose first time is
        ``start`` (None: the source's own start)."""
        raise NotImplementedError

    def event_time(self) -> Optional[EventTime]:
        """Where the records' event time is and what an epoch covers (None: unknown)."""
        return None

    def record_type(self) -> Any:
        """The type of the records, one tstate can encode as state (None: unknown)."""
        return None


class _BatchesReader(Reader):
    def __init__(self, it: Iterator[Any], start: Any, skip: int) -> None:
        self._it = it
        self._start = start
        self._n = 0
        for _ in range(skip):
            if self._next() is None:
                break

    def start_time(self) -> Any:
        return self._start

    def _next(self) -> Optional[tuple[Any, list[Any]]]:
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

    def next_batch(self) -> Optional[tuple[Any, list[Any]]]:
        return self._next()

    def position(self) -> Any:
        return self._n


class _Batches(Source):
    def __init__(self, batches: Union[Iterable[Any], Callable[[], Iterable[Any]]], start: Any) -> None:
        self._batches = batches
        self._start = start

    def open(self, position: Any = None, start: Any = None) -> Reader:
        fresh = callable(self._batches)
        batches: Iterable[Any] = self._batches() if callable(self._batches) else self._batches
        it = iter(batches)
        if position and not fresh and it is batches:
            raise SourceError(
                "this source is a one-shot iterator and cannot be replayed from a checkpoint: "
                "pass a list, or a function returning a fresh iterable"
            )
        return _BatchesReader(it, self._start if start is None else start, int(position or 0))


def from_batches(batches: Union[Iterable[Any], Callable[[], Iterable[Any]]], start: Any = 0) -> Source:
    """A source of ``(time, records)`` pairs from an iterable, or from a function that
    returns a fresh iterable (needed to replay from a checkpoint).  Its position is the
    number of batches read."""
    return _Batches(batches, start)
