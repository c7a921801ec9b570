"""The ``stateful`` operator: typed per-key state in bins, per-key timers, in-order apply.

Records are routed by ``key(record) -> bin -> owner``.  On its owner, the records of
a time are applied once **no earlier time can still arrive** (``not
frontier.less_than(t)``), so each key sees its records in timestamp order even when
batches arrive out of order; in the common case (records at the frontier's time) they
are applied as they arrive, without buffering.  Timers (``ctx.notify_at``) fire once the
frontier has passed their time, after every record at that time, in time order.  The
operator holds one capability per time it still owes output for (buffered records or
pending timers), and drops it as soon as that time is done.

:class:`StatefulRuntime` decides *when* (this module); the parts it is made of are
the bins this worker holds (:mod:`tstate.operators.held_bins`), applying records and
timers to them (:mod:`tstate.operators.keyed_apply`: the inner loop) and the bins it
must send away or wait for (:mod:`tstate.operators.moves`; shipping and receiving
them: :mod:`tstate.operators.shipping`), and, with a RocksDB store, when its bins
are written back (:mod:`tstate.operators.store_sync`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from sortedcontainers import SortedDict

from tstate.capability import Capability
from tstate.errors import GraphError
from tstate.keys import KeyRouter, hasher_of
from tstate.operators.base import OperatorRuntime
from tstate.operators.held_bins import HeldBins
from tstate.operators.keyed_apply import BinBatch, KeyedApply
from tstate.operators.local_rounds import LocalReturn
from tstate.operators.moves import Moves
from tstate.operators.shipping import BinShipping, epoch_open as _epoch_open
from tstate.operators.store_sync import StoreSync
from tstate.operators.time_order import next_ready
from tstate.operators.timer_index import TimerIndex
from tstate.plan.stateful import Stateful
from tstate.progress.timestamp import epoch
from tstate.state.bin import Bin
from tstate.state.context import Context
from tstate.state.cow import CopyOnWrite
from tstate.types import StateCodec
from tstate.types.copier import immutable

if TYPE_CHECKING:  # pragma: no cover
    from tstate.operators.base import Host

__all__ = ["StatefulRuntime", "BinBatch"]


class StatefulRuntime(BinShipping, OperatorRuntime[Stateful]):
    """One worker's share of a stateful operator: the bins it owns."""

    def __init__(self, exe: "Host", index: int, node: Stateful, worker: int) -> None:
        super().__init__(exe, index, node, worker)
        self.fold: bool = node.fold
        self.on_notify = node.on_notify
        history = exe.configs.get(index)
        owned = {b for b, w in enumerate(history.initial) if w == worker} if history is not None else set(range(node.bins))
        self.held = HeldBins(
            node.name, node.bins, owned, exe.key_bins.setdefault(index, {}), hasher=hasher_of(node.key)
        )
        #: the bins this worker holds state for, and those it owns (``held``'s)
        self.bins, self.owned = self.held.bins, self.held.owned
        self.ctx = Context(self)
        self.apply = KeyedApply(node, self.held, self.ctx, worker, self._pend)
        self.stash: SortedDict = SortedDict()  # time -> [batch, ...] not yet applicable
        self.timer_times = TimerIndex()  # time -> {bin index: None}
        self.caps: dict[Any, Capability] = {}
        self.track_dirty = bool(exe.checkpointing)
        #: checkpoint barrier: nothing at a time >= it is applied until it is captured
        self.barrier: Any = None
        #: the in-flight checkpoint's frozen bins (copy-on-write before changing a
        #: state of ``bin.frozen`` in place: :mod:`tstate.state.cow`)
        self.cow: Optional[CopyOnWrite] = None
        #: whether a state can change in place (else a frozen key's state is never
        #: changed, only replaced: no copy-on-write is needed)
        self.cow_copies = not immutable(node.schema)
        self.max_applied: Any = None
        self.moves = Moves()
        self.pending, self.pending_times = self.moves.pending, self.moves.pending_times
        self._codec: Optional[StateCodec] = None
        #: the RocksDB store of this worker's keyed state (None: the heap)
        self.store: Any = exe.keyed_store(worker, node.name, self.codec)
        self._sync = StoreSync(self.held, self.store) if self.store is not None else None
        #: ``local_rounds``: the way back to this operator (set by the embedded engine
        #: when it wires the loop; None: everything goes around the loop)
        self.local: Optional[LocalReturn] = None
        self._local_queue: list[list[Any]] = []
        self.refresh_moves()

    @property
    def workers(self) -> int:
        """How many workers the operator runs on."""
        return self.exe.workers

    @property
    def keys(self) -> KeyRouter:
        """How keys are routed to bins (memoised)."""
        return self.held.router

    @property
    def codec(self) -> StateCodec:
        if self._codec is None:
            self._codec = StateCodec(self.node.state)
        return self._codec

    @property
    def state_type(self) -> Any:
        """The declared state type."""
        return self.node.state

    # -- bins ---------------------------------------------------------------------
    def bin(self, index: int) -> Optional[Bin]:
        """Bin ``index`` if this worker holds it (decoded first if a lazy restore left it
        encoded); None if it holds no state for it."""
        return self.held.get(index)

    def restore_all(self) -> None:
        """Decode every bin a lazy restore left encoded (a state query reads them all)."""
        self.held.decode_all()

    def write_back(self) -> None:
        """With a RocksDB store: every resident state written back, in one batch."""
        if self._sync is not None:
            self._sync.write_back()

    def install_bin(self, b: Bin) -> None:
        """Take ownership of a bin (migration / recovery), indexing its timers."""
        b = self.held.take(b)
        for t in b.timers:
            self._index_timer(t, b.index)

    def remove_bin(self, index: int) -> Bin:
        """Give up a bin (migration): its state and timers leave with it."""
        b = self.held.drop(index)
        if b is None:
            return Bin(index)
        self._unindex_timers(index, list(b.timers))
        return b

    def release_bin(self, index: int, timer_times: list[Any]) -> None:
        """Give up bin ``index`` without decoding it (a pre-copy hand-over of a bin a lazy
        restore left encoded, whose lazy entry the caller dropped): its pending timer
        times ``timer_times`` are unindexed here."""
        self.held.release(index)
        self._unindex_timers(index, timer_times)

    def use_router(self, router: KeyRouter) -> None:
        """Find keys' bins with ``router`` and its memo (see :meth:`HeldBins.use_router`)."""
        self.held.use_router(router)

    def clear_key(self, key: Any) -> None:
        """Drop ``key``'s state now (``ctx.clear()``): nothing of it stays in memory (its
        bin's entry and its key -> bin memo entry go; its timers stay), and the next
        checkpoint deletes it only if an earlier one may hold it."""
        b = self.held.of_key(key, None, None)
        assert b is not None  # the current key's bin is here
        self.held.memo.pop(key, None)  # the memo keeps no key without state for long
        # (a frozen key keeps the state object it had: clearing does not change it)
        b.clear_key(key, self.track_dirty)

    # -- timers -----------------------------------------------------------------------
    def _index_timer(self, t: Any, bin_index: int) -> None:
        if self.timer_times.add(t, bin_index):
            self._hold(t)

    def _unindex_timers(self, index: int, times: list[Any]) -> None:
        for t in self.timer_times.remove(index, times):
            self._release(t)

    def _add_timer(self, key: Any, t: Any) -> None:
        if self.on_notify is None:
            raise GraphError(f"operator {self.name!r}: ctx.notify_at needs an @{self.name}.on_notify handler")
        b = self.held.at[self.held.memo.get(key, -1)]
        if b is None:
            b = self.held.of_key(key, None, t)
        assert b is not None  # the current key's bin is here
        if b.add_timer(t, key):  # the bin's first timer at t: index it (else it is)
            self._index_timer(t, b.index)
        if self.track_dirty:
            if key not in b.dirty:  # (a dirty key's entry is rewritten after the call that set the timer returns)
                b.mark_dirty(key)
            b.timers_changed = True  # (clear() may drop the key from dirty: the timer stays)

    # -- capabilities ----------------------------------------------------------------
    def _hold(self, t: Any) -> None:
        if t not in self.caps:
            self.caps[t] = Capability(self, 0, t)

    def _release(self, t: Any) -> None:
        if t not in self.stash and t not in self.timer_times and t not in self.pending_times:
            cap = self.caps.pop(t, None)
            if cap is not None:
                cap.drop()

    # -- activation -----------------------------------------------------------------
    def activate(self) -> None:
        box = self.inboxes[0]
        frontier = self.frontier(0)
        while box:
            t, recs = self.pop(0)
            if (
                not self.stash
                and (not self.timer_times or not _lex_lt(self.timer_times.peekitem(0)[0], t))
                and not frontier.less_than(t)
                and ((held := self._held_from()) is None or epoch(t) < held)
            ):
                self._apply(t, recs)
            else:
                self._stash(t, recs)
        if self.stash or self.timer_times:
            self._drain(frontier)
        while self.moves.outgoing:
            left = len(self.moves.outgoing)
            self._ship_ready(frontier)
            if self.stash or self.timer_times:
                self._drain(frontier)
            if len(self.moves.outgoing) == left:
                break
        if self._sync is not None:
            self._sync.end_activation(frontier)

    def _stash(self, t: Any, recs: list[Any]) -> None:
        """Keep records at ``t`` in the time-ordered buffer until they can be applied."""
        lst = self.stash.get(t)
        if lst is None:
            self.stash[t] = [recs]
            self._hold(t)
        else:
            lst.append(recs)

    def _drain(self, frontier: Any) -> None:
        """Apply buffered records and fire timers that became ready, in time order --
        no timer at or after the time of a move this worker has not made yet: a bin's
        timers at or after its move's time fire at its new owner, after the records of
        that time, which go there (the frontier may have passed the move's time before
        the bin could leave, e.g. while a checkpoint barrier held this worker back)."""
        while True:
            pick = next_ready(self.stash, self.timer_times, frontier, self._held_from())
            if pick is None:
                return
            t, kind = pick
            if kind == 0:
                for recs in self.stash.pop(t):
                    self._apply(t, recs)
            else:
                self._fire(t, self.timer_times.pop(t))
            self._release(t)

    def _held_from(self) -> Optional[int]:
        """The epoch from which nothing is applied here for now (``None``: none): a
        checkpoint barrier's, or the time of the next move this worker has not made
        yet -- a bin may be leaving then, so what comes at or after it waits for the
        move (a worker not scheduled since the move's time would otherwise apply later
        records to a bin it should have shipped, and gets back; timers fire at the new
        owner, after the records of that time)."""
        held = self.barrier
        move = self.moves.next_time()
        if move is not None and (held is None or move < held):
            held = move
        return held

    # -- applying -------------------------------------------------------------------
    def _apply(self, t: Any, recs: list[Any]) -> None:
        """Apply records at ``t`` (:class:`~tstate.operators.keyed_apply.KeyedApply`)
        and send what they emitted."""
        apply = self.apply.fold if self.fold else self.apply.records
        apply(t, recs, self.cow if self.cow_copies else None, self.track_dirty)
        self._applied(t)

    def _fire(self, t: Any, bin_indexes: dict[int, None]) -> None:
        """Fire the timers at ``t`` of bins ``bin_indexes`` and send what they emitted."""
        self.apply.timers(t, bin_indexes, self.cow if self.cow_copies else None, self.track_dirty)
        self._applied(t)

    def _applied(self, t: Any) -> None:
        if self.max_applied is None or _lex_lt(self.max_applied, t):
            self.max_applied = t
        ctx = self.ctx
        if ctx._out:
            out, ctx._out = ctx._out, []
            self._emit(t, out)

    def _emit(self, t: Any, out: list[Any]) -> None:
        """Send what was emitted at ``t``; with local rounds, what of it comes back to
        this worker's bins is applied now, at ``t``, pass after pass until nothing is
        left for them (:mod:`tstate.plan.local_rounds`)."""
        self.outputs[0].push(t, out)
        local = self.local
        if local is None:
            return
        now = local.split(t, out)
        if not now:
            return
        queue = self._local_queue
        queue.append(now)
        if len(queue) > 1:
            return  # a pass is under way (this is one of its records' output): it goes on
        note = self.exe.metrics.local_pass
        e = epoch(t)
        try:
            while queue:
                note(self.name, e)
                self._apply(t, queue[0])
                queue.pop(0)
        finally:
            queue.clear()

    # -- checkpoints ----------------------------------------------------------------
    def complete_before(self, t: Any) -> bool:
        """Everything before ``t`` is applied here and nothing at ``t`` or later: the
        bins hold exactly the state a checkpoint at ``t`` must record."""
        if _epoch_open(self.frontier(0), t):
            return False
        if self.stash and epoch(self.stash.peekitem(0)[0]) < t:
            return False
        if self.timer_times and epoch(self.timer_times.peekitem(0)[0]) < t:
            return False
        return not self.moves.pending_before(t) and not self.moves.before(t)

    def release_barrier(self) -> None:
        self.barrier = None
        if self.stash or self.timer_times:
            self.request_activation()

    # -- inspection -----------------------------------------------------------------
    def is_quiet(self) -> bool:
        """No buffered records: the state reflects every record received."""
        return not self.stash and not self.pending


def _lex_lt(a: Any, b: Any) -> bool:
    return bool(a < b)
