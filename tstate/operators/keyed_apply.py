"""Applying a time's records and timers to keyed state: the processing path's inner loop.

:class:`KeyedApply` calls a stateful operator's function for each record (``fn(state,
record, ctx)``), its ``on_notify`` handler for each timer (``handler(state, time,
ctx)``), or its ``fold_bins`` function once per bin (``fn(states, records, ctx)``),
on the bins of one worker (:class:`~tstate.operators.held_bins.HeldBins`, each a
:class:`~tstate.state.storage.KeyedBin`).  The stateful runtime
(:mod:`tstate.operators.stateful`) decides *when* (time order, frontiers, barriers,
moves); this module only *applies*, one loop for every case:

- a key not resident in its bin is loaded (:meth:`~tstate.state.storage.KeyedBin.load`)
  or starts from the declared new state;
- a returned state replaces the old one; ``None`` keeps it (a state that cannot change
  in place must be returned: :class:`~tstate.errors.StateReturnError`);
  ``ctx.clear()`` drops it;
- with ``track`` (checkpointing) every change is recorded in the bin for the next
  capture (``dirty``, ``added``), and with ``cow`` (an asynchronous checkpoint still
  reading frozen states, :mod:`tstate.state.cow`) a frozen state is copied before it
  can change in place;
- a record whose bin is on its way here goes to ``pend`` (Megaphone's buffering).

Errors name the operator, worker, time, key and record
(:class:`~tstate.errors.OperatorError`, :class:`~tstate.errors.KeyFunctionError`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tstate.errors import KeyFunctionError, OperatorError, StateReturnError, TstateError
from tstate.operators.held_bins import HeldBins
from tstate.plan.stateful import Stateful
from tstate.state.bin import Bin
from tstate.state.context import Context
from tstate.state.cow import Copied, CopyOnWrite
from tstate.state.storage import NO_STATE

__all__ = ["KeyedApply", "BinBatch"]

#: ``Stateful.returns`` -> 0: ``fn`` may return None (mutable state); 1: it must return
#: the new state; 2: it must when the state is None (``Optional[T]``)
_MUST_RETURN = {"never": 0, "always": 1, "when None": 2}


class BinBatch(list):  # type: ignore[type-arg]
    """A batch of records that all belong to bin ``bin``, as its sender already knows
    (the Spark backend's boundary tasks: the shuffle grouped the records by bin).  A
    ``fold_bins`` operator applies it to that bin without keying every record again;
    any other operator treats it as a plain list."""

    __slots__ = ("bin",)

    def __init__(self, records: Any, bin: int) -> None:
        super().__init__(records)
        self.bin = bin


class KeyedApply:
    """A stateful node's functions applied to one worker's bins (see the module docstring)."""

    def __init__(self, node: Stateful, held: HeldBins, ctx: Context, worker: int, pend: Callable[[Any, Any, Any], None]) -> None:
        self.node = node
        self.name = node.name
        self.worker = worker
        self.fn: Callable[..., Any] = node.fn
        self.on_notify: Optional[Callable[..., Any]] = node.on_notify
        self.key: Callable[[Any], Any] = node.key
        self.new_state: Callable[[], Any] = node.new_state
        self.must_return: int = _MUST_RETURN[node.returns]
        self.held = held
        self.ctx = ctx
        self.pend = pend

    def _miss(self, k: Any, r: Any, t: Any) -> Optional[Bin]:
        """The bin of key ``k`` (record ``r`` at ``t``), not found by the fast lookup: made
        or decoded now, or None if it is on its way here (the record waits for it)."""
        b = self.held.of_key(k, r, t)
        if b is None:
            self.pend(k, r, t)
        return b

    def _fresh(self, b: Bin, k: Any, track: bool) -> Any:
        """The state of key ``k``, not resident in ``b``: loaded from the bin's store,
        else the declared new state (a new key); made resident."""
        s = b.load(k)
        if s is NO_STATE:
            s = self.new_state()
            if track:
                b.added[k] = None
        b.states[k] = s
        return s

    def records(self, t: Any, recs: list[Any], cow: Optional[CopyOnWrite], track: bool) -> None:
        """Apply records ``recs`` at ``t``, in order, each to its key's state."""
        ctx = self.ctx
        ctx.time = t
        fn, key, must_return = self.fn, self.key, self.must_return
        held = self.held.at
        memo_get = self.held.memo.get
        missing = NO_STATE
        r: Any = None
        try:
            for r in recs:
                k = key(r)
                b = held[memo_get(k, -1)]
                if b is None and (b := self._miss(k, r, t)) is None:
                    continue
                if cow is not None:
                    fz = b.frozen
                    if fz is not None:
                        v = fz.get(k, missing)
                        if v is not missing and type(v) is not Copied:  # frozen by a checkpoint, not copied yet
                            cow.before_write(b, k)
                states = b.states
                s = states.get(k, missing)
                if s is missing:
                    s = self._fresh(b, k, track)
                ctx.key = k
                ns = fn(s, r, ctx)
                if ctx._cleared:  # clear() already removed the state
                    ctx._cleared = False
                    continue
                if ns is not None:
                    states[k] = ns
                elif must_return and (must_return == 1 or s is None):
                    raise self._no_return(k, s, r, t)
                else:
                    ns = s
                if track:
                    b.dirty[k] = ns
        except TstateError:
            raise
        except Exception as exc:
            raise self._error(exc, r, t) from exc

    def timers(self, t: Any, bin_indexes: dict[int, None], cow: Optional[CopyOnWrite], track: bool) -> None:
        """Fire the timers at ``t`` of the bins ``bin_indexes``: ``on_notify`` for each
        key with a timer there, in the order they were set."""
        ctx = self.ctx
        ctx.time = t
        handler = self.on_notify
        assert handler is not None  # (no timer is set without one)
        missing = NO_STATE
        ctx._firing = True
        try:
            for bi in bin_indexes:
                b = self.held.bins.get(bi)
                if b is None:
                    b = self.held.held(bi)  # restored lazily: decoded now
                keys = b.timers.pop(t, None)
                if not keys:
                    continue
                if track:
                    b.timers_changed = True
                states = b.states
                fz = b.frozen if cow is not None else None
                for k in keys:
                    if fz is not None:
                        v = fz.get(k, missing)
                        if v is not missing and type(v) is not Copied:  # frozen by a checkpoint, not copied yet
                            cow.before_write(b, k)  # type: ignore[union-attr]
                    s = states.get(k, missing)
                    if s is missing:
                        s = self._fresh(b, k, track)
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
        finally:
            ctx._firing = False

    def fold(self, t: Any, recs: list[Any], cow: Optional[CopyOnWrite], track: bool) -> None:
        """``fold_bins``: the function once per bin, with the bin's states and its
        records of ``recs`` (arrival order)."""
        ctx = self.ctx
        ctx.time = t
        held = self.held
        groups: dict[int, tuple[Bin, list[Any]]] = {}
        if type(recs) is BinBatch and recs.bin in held.owned:  # one bin, known: no keying
            b = held.at[recs.bin]
            if b is None:
                b = held.held(recs.bin)
            groups[b.index] = (b, recs)
        else:
            self._group(t, recs, groups)
        for b, rs in groups.values():
            if b.frozen is not None and cow is not None:
                cow.before_write_bin(b)
            ctx.key = None
            states = b.all_resident()
            try:
                self.fn(states, rs, ctx)
            except TstateError:
                raise
            except Exception as exc:
                raise OperatorError(
                    f"operator {self.name!r} on worker {self.worker} at time {t!r}, bin {b.index}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if track:
                b.dirty.update(states)

    def _group(self, t: Any, recs: list[Any], groups: dict[int, tuple[Bin, list[Any]]]) -> None:
        """Group a fold's records by bin (arrival order within a bin); records of bins
        still on their way here wait for them."""
        key = self.key
        held = self.held.at
        memo_get = self.held.memo.get
        # key -> the record list of its bin in this batch: one dict lookup per record
        lists: dict[Any, list[Any]] = {}
        r: Any = None
        try:
            for r in recs:
                k = key(r)
                lst = lists.get(k)
                if lst is None:
                    b = held[memo_get(k, -1)]
                    if b is None and (b := self._miss(k, r, t)) is None:
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

    def _no_return(self, k: Any, s: Any, record: Any, t: Any) -> StateReturnError:
        why = "its state is None, which" if s is None else f"its state type {self.node.schema.name}"
        fn = getattr(self.fn, "__qualname__", repr(self.fn))
        return StateReturnError(
            f"operator {self.name!r} on worker {self.worker} at time {t!r}: {fn} returned None for key {k!r} "
            f"(record {record!r}), but {why} cannot change in place: return the new state "
            "(return the old one to keep it), or call ctx.clear()"
        )

    def _error(self, exc: Exception, record: Any, t: Any) -> TstateError:
        """What a failing call (or key function) on ``record`` at ``t`` is reported as."""
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
