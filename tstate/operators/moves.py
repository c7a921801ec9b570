"""One worker's migrations of a stateful operator: the bins it must send away, and the
records waiting for bins on their way to it (Megaphone's buffering).

A reconfiguration (:mod:`tstate.migration`) gives every bin an owner per time.  The
worker that owns a bin before a move's time ``t`` ships it once everything before ``t``
is done there (:meth:`tstate.operators.stateful.StatefulRuntime.activate`); its new owner
keeps the records of that bin that arrive first (:meth:`Moves.pend`) and releases them
when the bin arrives (:meth:`Moves.arrived`).  :class:`Moves` is the bookkeeping; the
runtime does the shipping.

>>> m = Moves()
>>> m.refresh([(5, 3, 1), (5, 4, 1)])
>>> m.next_time(), m.before(6), m.before(5)
(5, True, False)
>>> m.pend(3, "r1", 4), m.pend(3, "r2", 4), m.pending_before(5)
(True, False, True)
>>> m.arrived(3), m.pending_times
([(4, ['r1', 'r2'])], {})
"""

from __future__ import annotations

from typing import Any, Optional

from tstate.progress.timestamp import epoch

__all__ = ["Moves"]


class Moves:
    """The moves one worker must make and the records waiting for bins (see the module
    docstring).  ``outgoing``: ``(time, bin, destination)`` in time order, not made
    yet; ``pending``: bin -> ``[(time, records), ...]`` waiting for it;
    ``pending_times``: time -> how many bins have records pending at it."""

    __slots__ = ("outgoing", "shipped", "pending", "pending_times")

    def __init__(self) -> None:
        self.outgoing: list[tuple[int, int, int]] = []
        self.shipped: set[tuple[Any, int]] = set()  # (time, bin) moves already made
        self.pending: dict[int, list[tuple[Any, list[Any]]]] = {}
        self.pending_times: dict[Any, int] = {}

    def refresh(self, moves: list[tuple[int, int, int]]) -> None:
        """This worker's moves (``(time, bin, destination)``, from the configuration
        history), less those already made."""
        shipped = self.shipped
        self.outgoing = [m for m in moves if (m[0], m[1]) not in shipped]

    def next_time(self) -> Optional[int]:
        """The time of the next move to make (None: none)."""
        return self.outgoing[0][0] if self.outgoing else None

    def before(self, t: int) -> bool:
        """Whether a move before ``t`` is still to be made."""
        return any(mt < t for mt, _, _ in self.outgoing)

    def made(self) -> tuple[int, int, int]:
        """The next move is made now: ``(time, bin, destination)``."""
        t, bi, dst = move = self.outgoing.pop(0)
        self.shipped.add((t, bi))
        return move

    def pend(self, bi: int, record: Any, t: Any) -> bool:
        """Keep ``record`` at ``t`` until bin ``bi`` arrives; True if no bin had a record
        pending at ``t`` before (the caller holds a capability for it)."""
        lst = self.pending.setdefault(bi, [])
        if lst and lst[-1][0] == t:
            lst[-1][1].append(record)
            return False
        lst.append((t, [record]))
        n = self.pending_times.get(t, 0)
        self.pending_times[t] = n + 1
        return n == 0

    def pending_before(self, t: int) -> bool:
        """Whether records at an epoch before ``t`` wait for a bin."""
        return any(epoch(tt) < t for tt in self.pending_times)

    def arrived(self, bi: int) -> list[tuple[Any, list[Any]]]:
        """Bin ``bi`` arrived: the records that waited for it, ``[(time, records), ...]``
        in arrival order (their times no longer wait for it)."""
        waiting = self.pending.pop(bi, None) or []
        for tt, _recs in waiting:
            n = self.pending_times[tt] - 1
            if n:
                self.pending_times[tt] = n
            else:
                del self.pending_times[tt]
        return waiting
