"""Shipping a stateful operator's bins to their new owners and receiving them
(Megaphone's migration, as one worker's :class:`~tstate.operators.stateful.StatefulRuntime`
does it): a bin leaves once the input frontier passed its move's time and nothing
before that time is left here; records that arrive for a bin still on its way wait
(:class:`~tstate.operators.moves.Moves`) and are released when it arrives.

:class:`BinShipping` is the part of the runtime that does it (a base class of the
runtime: it reads the runtime's bins, stash, timers and capabilities).
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedDict

from tstate.operators.held_bins import HeldBins
from tstate.operators.moves import Moves
from tstate.operators.timer_index import TimerIndex
from tstate.progress.timestamp import epoch
from tstate.state.bin import Bin
from tstate.state.payload import decode_bin, encode_bin
from tstate.types import StateCodec, wire

if TYPE_CHECKING:  # pragma: no cover
    from tstate.operators.base import Host

__all__ = ["BinShipping", "epoch_open"]


def epoch_open(frontier: Any, t: int) -> bool:
    """Records of an epoch before ``t`` may still arrive (at any iteration)."""
    return any(epoch(e) < t for e in frontier.elements())


class BinShipping:
    """Moving bins between workers, for a stateful runtime (see the module docstring)."""

    if TYPE_CHECKING:  # (the runtime's: see StatefulRuntime)
        exe: "Host"
        index: int
        worker: int
        name: str
        held: HeldBins
        owned: set[int]
        moves: Moves
        stash: SortedDict
        timer_times: TimerIndex
        store: Any  # the RocksDB store of the worker's keyed state (None: the heap)

        @property
        def codec(self) -> StateCodec:
            raise NotImplementedError

        def bin(self, index: int) -> Any:
            raise NotImplementedError

        def install_bin(self, b: Bin) -> None:
            raise NotImplementedError

        def remove_bin(self, index: int) -> Bin:
            raise NotImplementedError

        def _hold(self, t: Any) -> None:
            raise NotImplementedError

        def _stash(self, t: Any, recs: list[Any]) -> None:
            raise NotImplementedError

        def request_activation(self) -> None:
            raise NotImplementedError

    def refresh_moves(self) -> None:
        """Re-read this worker's outgoing moves from the configuration history."""
        history = self.exe.configs.get(self.index)
        self.moves.refresh(history.moves_from(self.worker) if history is not None else [])

    def _pend(self, k: Any, record: Any, t: Any) -> None:
        """Keep a record whose bin has not arrived yet (Megaphone's buffering)."""
        if self.moves.pend(self.held.index_of(k), record, t):
            self._hold(t)

    def _ship_ready(self, frontier: Any) -> None:
        """Send every bin whose move time ``t`` the input frontier has passed: all its
        records and timers before ``t`` are done here.  The cyclic garbage collector
        waits meanwhile (``wire.no_gc``): decoding many bins at once (``all-at-once``)
        would otherwise start collection after collection over the states just built
        (acyclic: reference counting frees them)."""
        with wire.no_gc():
            while self.moves.outgoing:
                t, bi, dst = self.moves.outgoing[0]
                if bi not in self.owned or epoch_open(frontier, t):
                    return
                if self.stash and epoch(self.stash.peekitem(0)[0]) < t:
                    return
                lazy = self.held.lazy
                if lazy is not None and bi in lazy:  # (not decoded just to look: its timers are indexed)
                    if self.timer_times.before(bi, t):
                        return
                else:
                    b = self.bin(bi)
                    if b is not None and any(epoch(tt) < t for tt in b.timers):
                        return
                self._ship(*self.moves.made())

    def _ship(self, t: Any, bi: int, dst: int) -> None:
        """Hand bin ``bi`` over to worker ``dst`` at ``t``: a pre-copy move hands over its
        changes since a checkpoint (the engine's ``precopy``:
        :mod:`tstate.engine.precopy`), any other ships it whole."""
        precopy = getattr(self.exe, "precopy", None)
        if precopy is not None and precopy.pending and precopy.hand_over(self, bi, t, dst):
            return
        self.ship_whole(bi, t, dst)

    def ship_whole(self, bi: int, t: Any, dst: int) -> int:
        """Ship bin ``bi`` whole (:func:`~tstate.state.payload.encode_bin`) to worker
        ``dst`` at ``t``; the bytes shipped."""
        start = _time.perf_counter()
        b = self.remove_bin(bi)
        target = self.exe.peer(dst, self.index)
        assert isinstance(target, BinShipping)
        mine, theirs = self.store, target.store
        if mine is not None and theirs is not None:  # RocksDB on both: an SST file moves
            from tstate.state.rocksdb.moving import moves_dir, ship_bin

            moved, size = ship_bin(b, mine, theirs, moves_dir(mine))
            target.receive_bin(moved, t)
        else:
            data = encode_bin(b, self.codec, self.name)
            size = len(data)
            target.receive_bin(decode_bin(data, target.codec), t)
        self.exe.metrics.record_move(self.name, bi, self.worker, dst, t, size, _time.perf_counter() - start)
        return size

    def receive_bin(self, b: Bin, t: Any, *, tracked: bool = False) -> None:
        """Install a bin that arrived from its previous owner, then release the records
        that were waiting for it (into the time-ordered buffer).  ``tracked``: the bin
        carries its change sets since the last checkpoint captured it (a pre-copy
        hand-over), so the next checkpoint may write a delta; else it writes it whole."""
        if not tracked:
            b.full = True  # its changes since the last checkpoint are not tracked here
        self.install_bin(b)
        for tt, recs in self.moves.arrived(b.index):
            self._stash(tt, recs)
        self.request_activation()
