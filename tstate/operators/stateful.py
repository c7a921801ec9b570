"""The ``stateful`` operator: typed per-key state in bins, per-key timers, in-order apply.

Records are routed by ``key(record) -> bin -> owner``.  On its owner, the records of
a time are applied once **no earlier time can still arrive** (``not
frontier.less_than(t)``), so each key sees its records in timestamp order even when
batches arrive out of order; in the common case (records at the frontier's time) they
are applied as they arrive, without buffering.  Timers (``ctx.notify_at``) fire once the
frontier has passed their time, after every record at that time, in time order.  The
operator holds one capability per time it still owes output for (buffered records or
pending timers), and drops it as soon as that time is done.
"""

from __future__ import annotations

import heapq
import time as _time
from typing import TYPE_CHECKING, Any, Callable, Optional

from sortedcontainers import SortedDict

from tstate.capability import Capability
from tstate.errors import GraphError, KeyFunctionError, OperatorError, StateReturnError, TstateError
from tstate.keys import KeyRouter
from tstate.operators.base import OperatorRuntime
from tstate.operators.local_rounds import LocalReturn
from tstate.plan.stateful import Stateful
from tstate.progress.timestamp import epoch, less_equal
from tstate.state.bin import NO_STATE, Bin
from tstate.state.context import Context
from tstate.state.payload import decode_bin, encode_bin
from tstate.types import StateCodec, wire
from tstate.types.copier import immutable
from tstate.engine.checkpointing.freeze import Copied

if TYPE_CHECKING:  # pragma: no cover
    from tstate.operators.base import Host

__all__ = ["StatefulRuntime", "BinBatch"]

_MISSING = object()


class BinBatch(list):  # type: ignore[type-arg]
    """A batch of records that all belong to bin ``bin``, as its sender already knows
    (the Spark backend's boundary tasks: the shuffle grouped the records by bin).  A
    ``fold_bins`` operator applies it to that bin without keying every record again;
    any other operator treats it as a plain list."""

    __slots__ = ("bin",)

    def __init__(self, records: Any, bin: int) -> None:
        super().__init__(records)
        self.bin = bin


class StatefulRuntime(OperatorRuntime[Stateful]):
    """One worker's share of a stateful operator: the bins it owns."""

    def __init__(self, exe: "Host", index: int, spec: Stateful, worker: int) -> None:
        super().__init__(exe, index, spec, worker)
        self.fn: Callable[..., Any] = spec.fn
        self.on_notify: Optional[Callable[..., Any]] = spec.on_notify
        self.key: Callable[[Any], Any] = spec.key
        self.new_state: Callable[[], Any] = spec.new_state
        self.fold: bool = spec.fold
        #: 0: ``fn`` may return None (mutable state); 1: it must return the new state;
        #: 2: it must when the state is None (``Optional[T]``; see returns_required)
        self.must_return: int = {"never": 0, "always": 1, "when None": 2}[spec.returns]
        # Finding a key's state: key -> bin index in a memo shared by the operator's
        # workers (a key's bin never changes; entries leave with ctx.clear()), then bin
        # index -> the bin this worker holds (None: not here, or no state yet).  A bin
        # that moves changes one slot of these lists, whatever its keys.  Index -1 (a
        # key not in the memo) is always None: ``_states_at[memo.get(k, -1)]`` is the
        # whole fast path.
        nbins = spec.bins
        self._memo: dict[Any, int] = exe.key_bins.setdefault(index, {})
        self.keys = KeyRouter(nbins, limit=1 << 62, memo=self._memo)
        self.bins: dict[int, Bin] = {}
        self._bin_at: list[Optional[Bin]] = [None] * (nbins + 1)
        self._states_at: list[Optional[dict[Any, Any]]] = [None] * (nbins + 1)
        self.stash: SortedDict = SortedDict()  # time -> [batch, ...] not yet applicable
        self.timer_times: SortedDict = SortedDict()  # time -> {bin index: None}
        self.caps: dict[Any, Capability] = {}
        self.ctx = Context(self)
        self.track_dirty = bool(exe.checkpointing)
        #: checkpoint barrier: nothing at a time >= it is applied until it is captured
        self.barrier: Any = None
        #: the in-flight checkpoint's frozen bins (copy-on-write before writing a key of
        #: ``bin.frozen``: tstate.engine.checkpointing.freeze)
        self.cow: Any = None
        #: whether a state can change in place (else a frozen key's state is never
        #: changed, only replaced: no copy-on-write is needed)
        self.cow_copies = not immutable(spec.schema)
        self.max_applied: Any = None
        # ownership (migration): bins this worker holds, records waiting for bins
        # still on their way here, and the moves this worker must make
        history = exe.configs.get(index)
        self.owned: set[int] = (
            {b for b, w in enumerate(history.initial) if w == worker} if history is not None else set(range(spec.bins))
        )
        self.pending: dict[int, list[tuple[Any, list[Any]]]] = {}
        self.pending_times: dict[Any, int] = {}
        self.outgoing: list[tuple[int, int, int]] = []
        self._shipped: set[tuple[Any, int]] = set()  # (time, bin) moves already made
        self._codec: Any = None
        #: bins a lazy restore left undecoded (tstate.engine.checkpointing.lazy.LazyBins), None
        #: once every bin is decoded: :meth:`bin` decodes one when it is first needed
        self.lazy: Any = None
        #: ``local_rounds``: the way back to this operator (set by the embedded engine
        #: when it wires the loop; None: everything goes around the loop)
        self.local: Optional[LocalReturn] = None
        self._local_queue: list[list[Any]] = []
        self.refresh_moves()

    @property
    def workers(self) -> int:
        """How many workers the operator runs on."""
        return self.exe.workers

    # -- bins ---------------------------------------------------------------------
    def bin_for(self, k: Any, record: Any, time: Any) -> Optional[Bin]:
        """The bin of key ``k`` if this worker holds it (None: it is on its way here)."""
        try:
            bi = self.keys.bin(k)
        except KeyFunctionError as exc:
            raise KeyFunctionError(f"operator {self.name!r}: record {record!r} at time {time!r}: {exc}") from None
        if bi not in self.owned:
            return None
        b = self._bin_at[bi]
        if b is None:
            b = self._held_bin(bi)
        return b

    def _keep(self, b: Bin) -> None:
        """Keep bin ``b`` (owned) here: in ``bins`` and in the bin-indexed lookups."""
        self.bins[b.index] = b
        self._bin_at[b.index] = b
        self._states_at[b.index] = b.states

    keep_bin = _keep

    def bin(self, index: int) -> Optional[Bin]:
        """Bin ``index`` if this worker holds it (decoded first if a lazy restore left it
        encoded: every path that reads or changes a bin goes through here or
        :meth:`bin_for`); None if it holds no state for it."""
        b = self.bins.get(index)
        if b is None and self.lazy is not None and index in self.lazy:
            b = self.lazy.materialise(index)
        return b

    def _held_bin(self, index: int) -> Bin:
        """Bin ``index``, owned here and not in ``bins``: decoded now if a lazy restore
        left it encoded, else a new empty one."""
        if self.lazy is not None and index in self.lazy:
            b: Bin = self.lazy.materialise(index)
            return b
        b = Bin(index)
        self._keep(b)
        return b

    def restore_all(self) -> None:
        """Decode every bin a lazy restore left encoded (a state query reads them all)."""
        if self.lazy is not None:
            self.lazy.materialise_all()

    def install_bin(self, b: Bin) -> None:
        """Take ownership of a bin (migration / recovery)."""
        self.owned.add(b.index)
        self._keep(b)
        for t in b.timers:
            self._index_timer(t, b.index)

    def remove_bin(self, index: int) -> Bin:
        """Give up a bin (migration): its state and timers leave with it."""
        self.bin(index)  # decoded first if it was restored lazily
        self.owned.discard(index)
        self._bin_at[index] = self._states_at[index] = None
        b = self.bins.pop(index, None)
        if b is None:
            return Bin(index)
        self._unindex_timers(index, list(b.timers))
        return b

    def release_bin(self, index: int, timer_times: list[Any]) -> None:
        """Give up bin ``index`` without decoding it (a pre-copy hand-over of a bin a lazy
        restore left encoded, whose lazy entry the caller dropped): its pending timer
        times ``timer_times`` are unindexed here."""
        self.owned.discard(index)
        self._bin_at[index] = self._states_at[index] = None
        self.bins.pop(index, None)
        self._unindex_timers(index, timer_times)

    def _unindex_timers(self, index: int, times: list[Any]) -> None:
        for t in times:
            owners = self.timer_times.get(t)
            if owners is not None:
                owners.pop(index, None)
                if not owners:
                    del self.timer_times[t]
                    self._release(t)

    @property
    def state_type(self) -> Any:
        """The declared state type."""
        return self.spec.state

    @property
    def codec(self) -> Any:
        if self._codec is None:
            self._codec = StateCodec(self.spec.state)
        return self._codec

    # -- migration ------------------------------------------------------------------
    def refresh_moves(self) -> None:
        """Re-read this worker's outgoing moves from the configuration history."""
        history = self.exe.configs.get(self.node)
        moves = history.moves_from(self.worker) if history is not None else []
        shipped = self._shipped
        self.outgoing = [m for m in moves if (m[0], m[1]) not in shipped]

    def _pend(self, k: Any, record: Any, t: Any) -> None:
        """Keep a record whose bin has not arrived yet (Megaphone's buffering)."""
        bi = self.keys.bin(k)
        lst = self.pending.setdefault(bi, [])
        if lst and lst[-1][0] == t:
            lst[-1][1].append(record)
        else:
            lst.append((t, [record]))
            self.pending_times[t] = self.pending_times.get(t, 0) + 1
            self._hold(t)

    def _ship_ready_bins(self, frontier: Any) -> None:
        """Send every bin whose move time ``t`` the input frontier has passed: all its
        records and timers before ``t`` are done here.  The cyclic garbage collector
        waits meanwhile (``wire.no_gc``): decoding many bins at once (``all-at-once``)
        would otherwise start collection after collection over the states just built
        (acyclic: reference counting frees them)."""
        with wire.no_gc():
            self._ship_ready(frontier)

    def _ship_ready(self, frontier: Any) -> None:
        while self.outgoing:
            t, bi, dst = self.outgoing[0]
            if bi not in self.owned or _epoch_open(frontier, t):
                return
            if self.stash and epoch(self.stash.peekitem(0)[0]) < t:
                return
            if self.lazy is not None and bi in self.lazy:  # (not decoded just to look: its timers are indexed)
                if self._timer_before(bi, t):
                    return
            else:
                b = self.bin(bi)
                if b is not None and any(epoch(tt) < t for tt in b.timers):
                    return
            self.outgoing.pop(0)
            self._shipped.add((t, bi))
            self._ship(bi, t, dst)

    def _ship(self, bi: int, t: Any, dst: int) -> None:
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
        data = encode_bin(b, self.codec, self.name)
        target = self.exe.peer(dst, self.node)
        assert isinstance(target, StatefulRuntime)
        target.receive_bin(decode_bin(data, target.codec), t)
        self.exe.metrics.record_move(self.name, bi, self.worker, dst, t, len(data), _time.perf_counter() - start)
        return len(data)

    def _timer_before(self, index: int, t: int) -> bool:
        """Whether bin ``index`` has a pending timer at an epoch before ``t`` (read from the
        timer index, in time order: the bin itself need not be decoded)."""
        for tt, owners in self.timer_times.items():
            if epoch(tt) >= t:
                return False
            if index in owners:
                return True
        return False

    def receive_bin(self, b: Bin, t: Any, *, tracked: bool = False) -> None:
        """Install a bin that arrived from its previous owner, then release the records
        that were waiting for it (into the time-ordered buffer).  ``tracked``: the bin
        carries its change sets since the last checkpoint captured it (a pre-copy
        hand-over), so the next checkpoint may write a delta; else it writes it whole."""
        if not tracked:
            b.full = True  # its changes since the last checkpoint are not tracked here
        self.install_bin(b)
        waiting = self.pending.pop(b.index, None)
        if waiting:
            for tt, recs in waiting:
                lst = self.stash.get(tt)
                if lst is None:
                    self.stash[tt] = [recs]
                else:
                    lst.append(recs)
                self._hold(tt)
                n = self.pending_times[tt] - 1
                if n:
                    self.pending_times[tt] = n
                else:
                    del self.pending_times[tt]
        self.request_activation()

    # -- capabilities ----------------------------------------------------------------
    def _hold(self, t: Any) -> None:
        if t not in self.caps:
            self.caps[t] = Capability(self, 0, t)

    def _release(self, t: Any) -> None:
        if t not in self.stash and t not in self.timer_times and t not in self.pending_times:
            cap = self.caps.pop(t, None)
            if cap is not None:
                cap.drop()

    def clear_key(self, key: Any) -> None:
        """Drop ``key``'s state now (``ctx.clear()``): nothing of it stays in memory (its
        bin's entry and its key -> bin memo entry go; its timers stay), and the next
        checkpoint deletes it only if an earlier one may hold it."""
        b = self.bin_for(key, None, None)
        assert b is not None  # the current key's bin is here
        self._memo.pop(key, None)  # the memo keeps no key without state for long
        # (a frozen key keeps the state object it had: clearing does not change it)
        b.clear_key(key, self.track_dirty)

    def _index_timer(self, t: Any, bin_index: int) -> None:
        owners = self.timer_times.get(t)
        if owners is None:
            self.timer_times[t] = {bin_index: None}
            self._hold(t)
        else:
            owners[bin_index] = None

    def use_router(self, router: KeyRouter) -> None:
        """Find keys' bins with ``router`` and its memo (one shared beyond this
        operator, e.g. an executor's across micro-batches; it must have the same bins)."""
        assert router.bins == self.keys.bins
        self.keys = router
        self._memo = router.memo

    def _add_timer(self, key: Any, t: Any) -> None:
        if self.on_notify is None:
            raise GraphError(f"operator {self.name!r}: ctx.notify_at needs an @{self.name}.on_notify handler")
        b = self._bin_at[self._memo.get(key, -1)]
        if b is None:
            b = self.bin_for(key, None, t)
            assert b is not None  # the current key's bin is here
        if b.add_timer(t, key):  # the bin's first timer at t: index it (else it is)
            self._index_timer(t, b.index)
        if self.track_dirty:
            b.mark_dirty(key)
            b.timers_changed = True  # (clear() may drop the key from dirty: the timer stays)

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
                lst = self.stash.get(t)
                if lst is None:
                    self.stash[t] = [recs]
                    self._hold(t)
                else:
                    lst.append(recs)
        if self.stash or self.timer_times:
            self._drain(frontier)
        while self.outgoing:
            left = len(self.outgoing)
            self._ship_ready_bins(frontier)
            if self.stash or self.timer_times:
                self._drain(frontier)
            if len(self.outgoing) == left:
                break

    def _drain(self, frontier: Any) -> None:
        """Apply buffered records and fire timers that became ready, in time order --
        no timer at or after the time of a move this worker has not made yet: a bin's
        timers at or after its move's time fire at its new owner, after the records of
        that time, which go there (the frontier may have passed the move's time before
        the bin could leave, e.g. while a checkpoint barrier held this worker back)."""
        while True:
            pick = self._next_ready(frontier)
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
        if self.outgoing:
            move = self.outgoing[0][0]
            if held is None or move < held:
                held = move
        return held

    def _next_ready(self, frontier: Any) -> Any:
        """The next buffered time to process: ``(t, 0)`` for records, ``(t, 1)`` for
        timers (records of a time before its timers).  Ready means: records at ``t`` once
        no earlier time can arrive (``not frontier.less_than(t)``), timers once the
        frontier passed ``t``, nothing at or after a checkpoint barrier's epoch nor at
        or after the time of a move this worker has not made yet -- and
        no buffered item at a time ``<= t`` is still waiting.  Candidates are walked in
        lexicographic order, a linear extension of the product order, so an item that
        must come first is always met first; with ``int`` times the first one decides."""
        held = self._held_from()
        blocked: list[Any] = []
        stash = ((t, 0) for t in self.stash.keys())
        timers = ((t, 1) for t in self.timer_times.keys())
        for t, kind in heapq.merge(stash, timers):
            ready = not frontier.less_than(t) if kind == 0 else not frontier.less_equal(t)
            if ready and held is not None and epoch(t) >= held:
                ready = False
            if ready and not any(less_equal(b, t) for b in blocked):
                return t, kind
            if type(t) is int:
                return None  # a total order: every later item waits too
            blocked.append(t)
        return None

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

    def _note_applied(self, t: Any) -> None:
        if self.max_applied is None or _lex_lt(self.max_applied, t):
            self.max_applied = t

    def _apply(self, t: Any, recs: list[Any]) -> None:
        self._note_applied(t)
        if self.fold:
            self._apply_fold(t, recs)
            return
        ctx = self.ctx
        ctx.time = t
        fn = self.fn
        key = self.key
        held = self._bin_at
        memo_get = self._memo.get
        new_state = self.new_state
        must_return = self.must_return
        r: Any = None
        cow = self.cow if self.cow_copies else None
        try:
            if self.track_dirty:
                for r in recs:
                    k = key(r)
                    b = held[memo_get(k, -1)]
                    if b is None:
                        b = self.bin_for(k, r, t)
                        if b is None:
                            self._pend(k, r, t)
                            continue
                    fz = b.frozen
                    if fz is not None and cow is not None:
                        v = fz.get(k, NO_STATE)
                        if v is not NO_STATE and type(v) is not Copied:  # frozen by a checkpoint, not copied yet
                            cow.before_write(b, k)
                    states = b.states
                    s = states.get(k, _MISSING)
                    if s is _MISSING:
                        s = states[k] = new_state()
                        b.added[k] = None
                    ctx.key = k
                    ns = fn(s, r, ctx)
                    if ctx._cleared:  # clear() already removed the state
                        ctx._cleared = False
                    elif ns is not None:
                        states[k] = ns
                        b.dirty[k] = ns
                    elif must_return and (must_return == 1 or s is None):
                        raise self._no_return(k, s, r, t)
                    else:
                        b.dirty[k] = s
            else:  # the hot path: no checkpoint bookkeeping
                held_states = self._states_at
                missing = _MISSING
                for r in recs:
                    k = key(r)
                    st = held_states[memo_get(k, -1)]
                    if st is None:
                        b = self.bin_for(k, r, t)
                        if b is None:
                            self._pend(k, r, t)
                            continue
                        st = b.states
                    s = st.get(k, missing)
                    if s is missing:
                        s = st[k] = new_state()
                    ctx.key = k
                    ns = fn(s, r, ctx)
                    if ns is not None:
                        if ctx._cleared:
                            ctx._cleared = False
                        else:
                            st[k] = ns
                    elif ctx._cleared:
                        ctx._cleared = False
                    elif must_return and (must_return == 1 or s is None):
                        raise self._no_return(k, s, r, t)
        except TstateError:
            raise
        except Exception as exc:
            raise self._error(exc, r, t) from exc
        if ctx._out:
            out, ctx._out = ctx._out, []
            self._emit(t, out)

    def _apply_fold(self, t: Any, recs: list[Any]) -> None:
        ctx = self.ctx
        ctx.time = t
        groups: dict[int, tuple[Bin, list[Any]]] = {}
        if type(recs) is BinBatch and recs.bin in self.owned:  # one bin, known: no keying
            b = self._bin_at[recs.bin]
            if b is None:
                b = self._held_bin(recs.bin)
            groups[b.index] = (b, recs)
        else:
            self._group_fold(t, recs, groups)
        for b, rs in groups.values():
            if b.frozen is not None and self.cow_copies:
                self.cow.before_write_bin(b)
            ctx.key = None
            try:
                self.fn(b.states, rs, ctx)
            except TstateError:
                raise
            except Exception as exc:
                raise OperatorError(
                    f"operator {self.name!r} on worker {self.worker} at time {t!r}, bin {b.index}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if self.track_dirty:
                b.dirty.update(b.states)
        if ctx._out:
            out, ctx._out = ctx._out, []
            self._emit(t, out)

    def _group_fold(self, t: Any, recs: list[Any], groups: dict[int, tuple[Bin, list[Any]]]) -> None:
        """Group a fold's records by bin (arrival order within a bin); records of bins
        still on their way here wait for them."""
        key = self.key
        held = self._bin_at
        memo_get = self._memo.get
        # key -> the record list of its bin in this batch: one dict lookup per record
        lists: dict[Any, list[Any]] = {}
        r: Any = None
        try:
            for r in recs:
                k = key(r)
                lst = lists.get(k)
                if lst is None:
                    b = held[memo_get(k, -1)]
                    if b is None:
                        b = self.bin_for(k, r, t)
                        if b is None:
                            self._pend(k, r, t)
                            continue
                    g = groups.get(b.index)
                    if g is None:
                        g = groups[b.index] = (b, [])
                    lst = lists[k] = g[1]
                lst.append(r)
        except TstateError:
            raise
        except Exception as exc:
            raise self._error(exc, r, t) from exc

    def _fire(self, t: Any, bin_indexes: dict[int, None]) -> None:
        self._note_applied(t)
        ctx = self.ctx
        ctx.time = t
        handler = self.on_notify
        new_state = self.new_state
        track = self.track_dirty
        ctx._firing = True
        try:
            self._fire_bins(t, bin_indexes, handler, new_state, track)
        finally:
            ctx._firing = False
        if ctx._out:
            out, ctx._out = ctx._out, []
            self._emit(t, out)

    def _fire_bins(self, t: Any, bin_indexes: dict[int, None], handler: Any, new_state: Any, track: bool) -> None:
        ctx = self.ctx
        for bi in bin_indexes:
            b = self.bins.get(bi)
            if b is None:
                b = self._held_bin(bi)  # restored lazily: decoded now
            keys = b.timers.pop(t, None)
            if not keys:
                continue
            if track:
                b.timers_changed = True
            states = b.states
            cow = self.cow if self.cow_copies else None
            fz = b.frozen if cow is not None else None
            for k in keys:
                if fz is not None and cow is not None:
                    v = fz.get(k, NO_STATE)
                    if v is not NO_STATE and type(v) is not Copied:  # frozen by a checkpoint, not copied yet
                        cow.before_write(b, k)
                s = states.get(k, _MISSING)
                if s is _MISSING:
                    s = states[k] = new_state()
                    if track:
                        b.added[k] = None
                ctx.key = k
                try:
                    ns = handler(s, t, ctx)
                except TstateError:
                    raise
                except Exception as exc:
                    raise OperatorError(
                        f"operator {self.name!r} on_notify on worker {self.worker} at time {t!r} for key {k!r} raised "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                if ctx._cleared:  # clear() already removed the state
                    ctx._cleared = False
                    continue
                if ns is not None:
                    states[k] = ns
                if track:
                    b.dirty[k] = states[k]

    def _no_return(self, k: Any, s: Any, record: Any, t: Any) -> StateReturnError:
        why = "its state is None, which" if s is None else f"its state type {self.spec.schema.name}"
        fn = getattr(self.fn, "__qualname__", repr(self.fn))
        return StateReturnError(
            f"operator {self.name!r} on worker {self.worker} at time {t!r}: {fn} returned None for key {k!r} "
            f"(record {record!r}), but {why} cannot change in place: return the new state "
            "(return the old one to keep it), or call ctx.clear()"
        )

    def _error(self, exc: Exception, record: Any, t: Any) -> TstateError:
        try:
            k = self.key(record)
        except Exception as kexc:
            return KeyFunctionError(
                f"operator {self.name!r}: the key function raised {type(kexc).__name__}: {kexc} "
                f"on record {record!r} at time {t!r}"
            )
        try:
            hash(k)
        except TypeError:
            return KeyFunctionError(
                f"operator {self.name!r}: key {k!r} of record {record!r} at time {t!r} is not hashable"
            )
        return OperatorError(
            f"operator {self.name!r} on worker {self.worker} at time {t!r} raised {type(exc).__name__}: {exc} "
            f"(key {k!r}, record {record!r})"
        )

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
        if any(epoch(tt) < t for tt in self.pending_times):
            return False
        return not any(mt < t for mt, _, _ in self.outgoing)

    def release_barrier(self) -> None:
        self.barrier = None
        if self.stash or self.timer_times:
            self.request_activation()

    # -- inspection -----------------------------------------------------------------
    def is_quiet(self) -> bool:
        """No buffered records: the state reflects every record received."""
        return not self.stash and not self.pending


def _epoch_open(frontier: Any, t: int) -> bool:
    """Records of an epoch before ``t`` may still arrive (at any iteration)."""
    return any(epoch(e) < t for e in frontier.elements())


def _lex_lt(a: Any, b: Any) -> bool:
    return bool(a < b)
