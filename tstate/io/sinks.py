"""Sinks: where a stream's records leave the dataflow.

A :class:`Sink` receives ``write(worker, time, records)`` for every batch that reaches
it, and ``frontier(worker, antichain)`` whenever the frontier at the sink moves (times
not ``>=`` an element are complete: nothing more will be written at them).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, TextIO

from tstate.progress.frontier import Antichain

__all__ = ["Sink", "Collected", "CallbackSink", "StdoutSink", "stdout", "callback"]


class Sink:
    """Base class of sinks; override what you need."""

    def open(self, worker: int, workers: int) -> None:
        """Called once per worker before any write."""

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        """A batch of records at ``time`` arrived on ``worker``."""

    def frontier(self, worker: int, frontier: Antichain) -> None:
        """The frontier at the sink moved; times it passed are complete."""

    def close(self, worker: int) -> None:
        """The dataflow finished."""


class Collected(Sink):
    """Collects ``(time, record)`` pairs in memory (in arrival order)."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, Any]] = []

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.items.extend((time, r) for r in records)

    def records(self) -> list[Any]:
        """All records, in arrival order."""
        return [r for _, r in self.items]

    def by_time(self) -> dict[Any, list[Any]]:
        """Records grouped by time, times in sorted order, records in arrival order."""
        out: dict[Any, list[Any]] = {}
        for t, r in sorted(self.items, key=lambda p: p[0]):
            out.setdefault(t, []).append(r)
        return out

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Collected({len(self.items)} records)"


class CallbackSink(Sink):
    """Calls ``fn(time, records)`` for every batch."""

    def __init__(self, fn: Callable[[Any, list[Any]], Any]) -> None:
        self.fn = fn

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.fn(time, records)


class StdoutSink(Sink):
    """Prints ``time: record`` lines."""

    def __init__(self, file: Optional[TextIO] = None, fmt: Optional[Callable[[Any, Any], str]] = None) -> None:
        self.file = file
        self.fmt = fmt

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        out = self.file or sys.stdout
        fmt = self.fmt
        for r in records:
            print(fmt(time, r) if fmt else f"{time}: {r}", file=out)


def stdout(fmt: Optional[Callable[[Any, Any], str]] = None) -> StdoutSink:
    """A sink printing each record as ``time: record`` (or ``fmt(time, record)``)."""
    return StdoutSink(fmt=fmt)


def callback(fn: Callable[[Any, list[Any]], Any]) -> CallbackSink:
    """A sink calling ``fn(time, records)`` per batch."""
    return CallbackSink(fn)
