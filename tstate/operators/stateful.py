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
from typing import TYPE_CHECKING, Any, Callable, Optional

from sortedcontainers import SortedDict

from tstate.capability import Capability
from tstate.errors import GraphError, KeyFunctionError, OperatorError, StateReturnError, TstateError
from tstate.keys import KeyRouter
from tstate.operators.base import OperatorRuntime
from tstate.progress.timestamp import epoch, less_equal
from tstate.state.bin import NO_STATE, Bin
from tstate.state.context import Context
from tstate.types.copier import immutable
from tstate.checkpoint.freeze import Copied

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import NodeSpec
    from tstate.engine.execution import Execution

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


class StatefulRuntime(OperatorRuntime):
    """One worker's share of a stateful operator: the bins it owns."""

    def __init__(self, exe: "Execution", spec: "NodeSpec", worker: int) -> None:
        super().__init__(exe, spec, worker)
        o = spec.options
        self.fn: Callable[..., Any] = o["fn"]
        self.handlers: dict[str, Any] = o["handlers"]
        self.key: Callable[[Any], Any] = o["key"]
        self.new_state: Callable[[], Any] = o["new_state"]
        self.fold: bool = o.get("fold", False)
        #: 0: ``fn`` may return None (mutable state); 1: it must return the new state;
        #: 2: it must when the state is None (``Optional[T]``; see returns_required)
        self.must_return: int = {"never": 0, "always": 1, "when None": 2}[o.get("returns", "never")]
        # a small memo: keys this worker holds are in _key_bin already
        self.keys = KeyRouter(o["bins"], limit=1 << 12)
        self.bins: dict[int, Bin] = {}
        self._key_bin: dict[Any, Bin] = {}
        self._key_states: dict[Any, dict[Any, Any]] = {}  # key -> its bin's states (hot path)
        self.stash: SortedDict = SortedDict()  # time -> [batch, ...] not yet applicable
        self.timer_times: SortedDict = SortedDict()  # time -> {bin index: None}
        self.caps: dict[Any, Capability] = {}
        self.ctx = Context(self)
        self.track_dirty = bool(exe.checkpointing)
        #: checkpoint barrier: nothing at a time >= it is applied until it is captured
        self.barrier: Any = None
        #: the in-flight checkpoint's frozen bins (copy-on-write before writing a key of
        #: ``bin.frozen``: tstate.checkpoint.freeze)
        self.cow: Any = None
        #: whether a state can change in place (else a frozen key's state is never
        #: changed, only replaced: no copy-on-write is needed)
        self.cow_copies = not immutable(spec.options["schema"])
        self.max_applied: Any = None
        # ownership (migration): bins this worker holds, records waiting for bins
        # still on their way here, and the moves this worker must make
        history = exe.configs.get(spec.index)
        self.owned: set[int] = (
            {b for b, w in enumerate(history.initial) if w == worker} if history is not None else set(range(o["bins"]))
        )
        self.pending: dict[int, list[tuple[Any, list[Any]]]] = {}
        self.pending_times: dict[Any, int] = {}
        self.outgoing: list[tuple[int, int, int]] = []
        self._shipped: set[tuple[Any, int]] = set()  # (time, bin) moves already made
        self._codec: Any = None
        self.refresh_moves()

    # -- bins ---------------------------------------------------------------------
    def bin_for(self, k: Any, record: Any, time: Any) -> Optional[Bin]:
        """The bin of key ``k`` if this worker holds it (None: it is on its way here)."""
        try:
            bi = self.keys.bin(k)
        except KeyFunctionError as exc:
            raise KeyFunctionError(f"operator {self.name!r}: record {record!r} at time {time!r}: {exc}") from None
        if bi not in self.owned:
            return None
        b = self.bins.get(bi)
        if b is None:
            b = self.bins[bi] = Bin(bi)
        self._key_bin[k] = b
        self._key_states[k] = b.states
        return b

    def install_bin(self, b: Bin) -> None:
        """Take ownership of a bin (migration / recovery)."""
        self.owned.add(b.index)
        self.bins[b.index] = b
        for t in b.timers:
            self._index_timer(t, b.index)

    def remove_bin(self, index: int) -> Bin:
        """Give up a bin (migration): its state and timers leave with it."""
        self.owned.discard(index)
        b = self.bins.pop(index, None)
        if b is None:
            return Bin(index)
        self._key_bin.clear()
        self._key_states.clear()
        for t in list(b.timers):
            owners = self.timer_times.get(t)
            if owners is not None:
                owners.pop(index, None)
                if not owners:
                    del self.timer_times[t]
                    self._release(t)
        return b

    @property
    def codec(self) -> Any:
        if self._codec is None:
            from tstate.types import StateCodec

            self._codec = StateCodec(self.spec.options["state_type"])
        return self._codec

    # -- migration ------------------------------------------------------------------
    def refresh_moves(self) -> None:
        """Re-read this worker's outgoing moves from the configuration history."""
        history = self.exe.configs.get(self.node)
        moves = history.moves() if history is not None else []
        self.outgoing = [(t, b, dst) for t, b, src, dst in moves if src == self.worker and (t, b) not in self._shipped]

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
        records and timers before ``t`` are done here."""
        while self.outgoing:
            t, bi, dst = self.outgoing[0]
            if bi not in self.owned or _epoch_open(frontier, t):
                return
            if self.stash and epoch(self.stash.peekitem(0)[0]) < t:
                return
            b = self.bins.get(bi)
            if b is not None and any(epoch(tt) < t for tt in b.timers):
                return
            self.outgoing.pop(0)
            self._shipped.add((t, bi))
            self._ship(bi, t, dst)

    def _ship(self, bi: int, t: Any, dst: int) -> None:
        import time as _time

        from tstate.state.payload import decode_bin, encode_bin

        start = _time.perf_counter()
        b = self.remove_bin(bi)
        data = encode_bin(b, self.codec, self.name)
        target = self.exe.operators[dst][self.node]
        assert isinstance(target, StatefulRuntime)
        target.receive_bin(decode_bin(data, target.codec), t)
        self.exe.metrics.record_move(self.name, bi, self.worker, dst, t, len(data), _time.perf_counter() - start)

    def receive_bin(self, b: Bin, t: Any) -> None:
        """Install a bin that arrived from its previous owner, then release the records
        that were waiting for it (into the time-ordered buffer)."""
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
        bin, key -> bin and key -> states entries go; its timers stay), and the next
        checkpoint deletes it only if an earlier one may hold it."""
        b = self._key_bin.pop(key, None) or self.bin_for(key, None, None)
        assert b is not None  # the current key's bin is here
        self._key_states.pop(key, None)
        # (a frozen key keeps the state object it had: clearing does not change it)
        b.clear_key(key, self.track_dirty)

    def _index_timer(self, t: Any, bin_index: int) -> None:
        owners = self.timer_times.get(t)
        if owners is None:
            self.timer_times[t] = {bin_index: None}
            self._hold(t)
        else:
            owners[bin_index] = None

    def _add_timer(self, key: Any, t: Any) -> None:
        if "on_notify" not in self.handlers:
            raise GraphError(f"operator {self.name!r}: ctx.notify_at needs an @{self.name}.on_notify handler")
        b = self._key_bin.get(key)
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
                and (self.barrier is None or epoch(t) < self.barrier)
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
        if self.outgoing:
            self._ship_ready_bins(frontier)
            if self.stash or self.timer_times:
                self._drain(frontier)

    def _drain(self, frontier: Any) -> None:
        """Apply buffered records and fire timers that became ready, in time order."""
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

    def _next_ready(self, frontier: Any) -> Any:
        """The next buffered time to process: ``(t, 0)`` for records, ``(t, 1)`` for
        timers (records of a time before its timers).  Ready means: records at ``t`` once
        no earlier time can arrive (``not frontier.less_than(t)``), timers once the
        frontier passed ``t``, nothing at or after a checkpoint barrier's epoch -- and
        no buffered item at a time ``<= t`` is still waiting.  Candidates are walked in
        lexicographic order, a linear extension of the product order, so an item that
        must come first is always met first; with ``int`` times the first one decides."""
        barrier = self.barrier
        blocked: list[Any] = []
        stash = ((t, 0) for t in self.stash.keys())
        timers = ((t, 1) for t in self.timer_times.keys())
        for t, kind in heapq.merge(stash, timers):
            ready = not frontier.less_than(t) if kind == 0 else not frontier.less_equal(t)
            if ready and barrier is not None and epoch(t) >= barrier:
                ready = False
            if ready and not any(less_equal(b, t) for b in blocked):
                return t, kind
            if type(t) is int:
                return None  # a total order: every later item waits too
            blocked.append(t)
        return None

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
        key_bin = self._key_bin
        new_state = self.new_state
        must_return = self.must_return
        r: Any = None
        cow = self.cow if self.cow_copies else None
        try:
            if self.track_dirty:
                for r in recs:
                    k = key(r)
                    b = key_bin.get(k)
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
                key_states = self._key_states
                missing = _MISSING
                for r in recs:
                    k = key(r)
                    st = key_states.get(k)
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
            self.outputs[0].push(t, out)

    def _apply_fold(self, t: Any, recs: list[Any]) -> None:
        ctx = self.ctx
        ctx.time = t
        groups: dict[int, tuple[Bin, list[Any]]] = {}
        if type(recs) is BinBatch and recs.bin in self.owned:  # one bin, known: no keying
            b = self.bins.get(recs.bin)
            if b is None:
                b = self.bins[recs.bin] = Bin(recs.bin)
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
            self.outputs[0].push(t, out)

    def _group_fold(self, t: Any, recs: list[Any], groups: dict[int, tuple[Bin, list[Any]]]) -> None:
        """Group a fold's records by bin (arrival order within a bin); records of bins
        still on their way here wait for them."""
        key = self.key
        key_bin = self._key_bin
        # key -> the record list of its bin in this batch: one dict lookup per record
        lists: dict[Any, list[Any]] = {}
        r: Any = None
        try:
            for r in recs:
                k = key(r)
                lst = lists.get(k)
                if lst is None:
                    b = key_bin.get(k)
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
        handler = self.handlers["on_notify"]
        new_state = self.new_state
        track = self.track_dirty
        ctx._firing = True
        try:
            self._fire_bins(t, bin_indexes, handler, new_state, track)
        finally:
            ctx._firing = False
        if ctx._out:
            out, ctx._out = ctx._out, []
            self.outputs[0].push(t, out)

    def _fire_bins(self, t: Any, bin_indexes: dict[int, None], handler: Any, new_state: Any, track: bool) -> None:
        ctx = self.ctx
        for bi in bin_indexes:
            b = self.bins[bi]
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
        why = "its state is None, which" if s is None else f"its state type {self.spec.options['schema'].name}"
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
