"""The per-key matching engine.

>>> from apps.cep import Pattern, Matcher
>>> m = Matcher(Pattern.begin("a").where(lambda e: e == "a").followed_by("b").where(lambda e: e == "b"))
>>> st = m.new_state()
>>> [m.process(st, e, t) for t, e in enumerate(["a", "x", "b"])]
[[], [], [Match({'a': ('a',), 'b': ('b',)}, first_time=0, last_time=2)]]

Contract
--------
* A :class:`Matcher` compiles its pattern once and holds **no per-key state**; one
  matcher serves every key.  All the state of a key is the :class:`KeyState` returned by
  :meth:`Matcher.new_state` (plain typed data, see :mod:`apps.cep.state`), which the
  caller stores per key and passes to every call.
* :meth:`Matcher.process` takes the events of one key **in timestamp order** (equal
  timestamps in arrival order; the caller guarantees it -- it is not checked).
* :meth:`Matcher.advance_time` tells the engine that event time has reached ``t`` for
  the key (no event with a smaller timestamp will follow): partial matches whose window
  has closed (``t - start >= within``) are discarded and returned as :class:`TimedOut`;
  a partial match waiting in a trailing ``not_followed_by`` becomes a match then.  Call
  it before ``process(state, event, t)`` whenever ``t`` grew -- as Flink's CEP operator
  does -- and whenever the input frontier passes a time (:meth:`Matcher.next_timeout`
  says when the next window of the key closes).  ``process`` applies the same expiry
  itself, so skipping ``advance_time`` never produces a wrong match: it only delays the
  reporting of timeouts (they are queued in the state until the next ``advance_time``).
* Matches are returned by the call that completes them: by ``process`` for a match
  ending at the event, by ``advance_time`` (or the expiry step at the start of
  ``process``) for a trailing ``not_followed_by``.  With a skip strategy other than
  ``no_skip`` a complete match is held back while a partial match that started earlier
  is still alive (as Flink does), and is returned by the call that resolves it.
* Within one call, matches are ordered by their first event, then by the event that
  completed them, then by their event ids (Flink leaves ties unspecified).
* A condition that reads a missing field (``AttributeError``/``KeyError``) raises
  :class:`~apps.cep.errors.EventFieldError`; the conditions are all evaluated before the
  state is changed, so the event is not applied (the key's state stays consistent; only
  an expiry done at the start of the same call -- see above -- has taken effect, and
  the matches it completed are lost with the call).
* The matcher is not thread-safe (conditions get a context object it reuses); use one
  matcher per thread.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from attrs import define, frozen

from apps.cep.durations import resolve
from apps.cep.errors import AfterMatchSkipError, EventFieldError, PatternError
from apps.cep.nfa import (
    EMPTY,
    IDENTITY,
    MOVE1,
    NFA,
    PENDING,
    TAKE1,
    Leaf,
    compile_pattern,
)
from apps.cep.pattern import Pattern, SkipKind
from apps.cep.state import KeyState

__all__ = ["Match", "Matcher", "TimedOut"]

E = TypeVar("E")


@define(frozen=True, eq=False, repr=False)
class Match(Mapping):
    """A match: an immutable mapping stage name -> tuple of the events accepted for the
    stage (oldest first; only stages that accepted events appear, in pattern order),
    with the timestamps of its first and last event.

    ``stages`` are the names of the pattern's positive stages (the matcher fills it):
    ``m[stage]`` answers ``()`` for one of them that took no event (an optional or
    ``*`` stage -- Flink's ``getEventsForPattern`` gives an empty list), so code reading a
    match need not test for it; iteration, ``len`` and ``in`` still cover only the
    stages that took events, and a name the pattern does not have raises ``KeyError``.

    An attrs class (``Match(events, first_time, last_time, stages=())``), so that
    matches can cross a Spark exchange (:mod:`tstate.spark.records`)."""

    _events: dict[str, tuple[Any, ...]]
    first_time: Any
    last_time: Any
    stages: tuple[str, ...] = ()

    def __getitem__(self, stage: str) -> tuple[Any, ...]:
        try:
            return self._events[stage]
        except KeyError:
            if stage in self.stages:
                return ()
            if self.stages:
                raise KeyError(
                    f"no stage {stage!r} in the pattern (stages: {', '.join(self.stages)})"
                ) from None
            raise

    def __contains__(self, stage: object) -> bool:
        return stage in self._events

    def __iter__(self) -> Iterator[str]:
        return iter(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Match):
            return (
                self._events == other._events
                and self.first_time == other.first_time
                and self.last_time == other.last_time
            )
        if isinstance(other, Mapping):
            return dict(self._events) == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def events(self) -> list[Any]:
        """All the events of the match, in stage order (= time order)."""
        return [e for evs in self._events.values() for e in evs]

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in self._events.items()}

    def __repr__(self) -> str:
        return f"Match({self._events!r}, first_time={self.first_time!r}, last_time={self.last_time!r})"


@frozen
class TimedOut:
    """A partial match discarded because its window closed: the events it had accepted
    (a :class:`Match`-like mapping) and the time the window closed
    (``start + within``)."""

    partial: Match
    timeout_time: Any


class _Ctx:
    """The context an iterative condition receives (see :mod:`apps.cep.conditions`).
    One instance per matcher, re-pointed at each partial match (not reentrant)."""

    __slots__ = ("_events", "_index", "_nodes", "_run", "timestamp")

    def __init__(self, index: dict[str, int]) -> None:
        self._nodes: dict[int, list[int]] = {}
        self._events: dict[int, Any] = {}
        self._run: tuple = _NO_RUN
        self.timestamp: Any = None
        self._index = index

    def _stage(self, stage: str) -> int:
        try:
            return self._index[stage]
        except KeyError:
            raise PatternError(
                f"ctx: no stage named {stage!r} in the pattern"
            ) from None

    def events(self, stage: str) -> list[Any]:
        """The events accepted so far for ``stage``, oldest first."""
        k = self._stage(stage)
        events = self._events
        out = []
        for n in self._back():
            if n[1] == k:
                out.append(events[n[0]])
            elif n[1] < k:
                break
        out.reverse()
        return out

    def last(self, stage: str) -> Any:
        """The latest event accepted for ``stage``, or None."""
        k = self._stage(stage)
        for n in self._back():
            if n[1] == k:
                return self._events[n[0]]
            if n[1] < k:
                return None
        return None

    def previous(self) -> Any:
        """The latest event accepted into the partial match (any stage), or None."""
        eid = self._run[4]
        return self._events[eid] if eid >= 0 else None

    def all_events(self) -> list[Any]:
        """Every event accepted into the partial match so far, oldest first."""
        events = self._events
        out = [events[n[0]] for n in self._back()]
        out.reverse()
        return out

    def _back(self) -> Iterator[list[Any]]:
        """The partial match's buffer nodes ``[event id, stage, previous node, refs]``,
        newest first."""
        nodes = self._nodes
        nid = self._run[1]
        while nid >= 0:
            n = nodes[nid]
            yield n
            nid = n[2]


_NO_RUN = (-1, -1, None, -1, -1)


def _release(st: KeyState, nid: int) -> None:
    """Drop one reference to buffer node ``nid`` (freeing what becomes unreferenced)."""
    nodes = st.nodes
    while nid >= 0:
        n = nodes[nid]
        n[3] -= 1
        if n[3] > 0:
            return
        del nodes[nid]
        eid = n[0]
        r = st.refs[eid] - 1
        if r:
            st.refs[eid] = r
        else:
            del st.refs[eid]
            del st.events[eid]
            del st.times[eid]
        nid = n[2]


def _plan(tree: Any) -> tuple:
    """How the engine evaluates a state's decision tree: (kind, fn, leaf if false, leaf
    if true, predicate, tree); kind 0: a leaf (no condition), 1/2: a single simple /
    iterative condition, 3: a general tree."""
    if tree.__class__ is not tuple:
        return (0, None, tree, tree, None, tree)
    fn, takes_ctx, pred, f, t = tree
    if f.__class__ is not tuple and t.__class__ is not tuple:
        return (2 if takes_ctx else 1, fn, f, t, pred, tree)
    return (3, None, None, None, None, tree)


class Matcher(Generic[E]):
    """A compiled pattern and the operations on a key's :class:`KeyState` (see the
    module docstring for the contract).

    ``event_type``/``time_type`` only serve :attr:`state_type`, the concrete type to
    give cattrs when (un)structuring a state (``KeyState[event_type, time_type]``;
    ``time_type`` defaults to ``datetime`` when the window is a ``timedelta`` kept as
    it is, else ``int``).  ``time_unit`` (a ``timedelta``): the duration of 1 of a
    numeric timestamp, with which a ``timedelta`` window (``within(timedelta(hours=3))``)
    is converted to the timestamps' unit (:attr:`window`); without it such a window is
    kept and the timestamps must be ``datetime`` values.
    ``report_timeouts=False`` drops timed-out partial matches instead of reporting them
    (Flink reports them only to a ``TimedOutPartialMatchHandler``)."""

    def __init__(
        self,
        pattern: Pattern,
        *,
        event_type: Any = Any,
        time_type: Any = None,
        time_unit: dt.timedelta | None = None,
        report_timeouts: bool = True,
    ) -> None:
        self.pattern = pattern
        self.report_timeouts = report_timeouts
        self.nfa: NFA = compile_pattern(pattern)
        if time_unit is not None and not (
            isinstance(time_unit, dt.timedelta) and time_unit > dt.timedelta(0)
        ):
            raise PatternError(
                f"Matcher: time_unit must be a positive datetime.timedelta, got {time_unit!r}"
            )
        self.time_unit = time_unit
        #: the window in the timestamps' terms (a number, or a timedelta for datetimes)
        self.window = resolve(pattern.window, time_unit, "within")
        self.skip = pattern.skip
        if time_type is None:
            time_type = dt.datetime if isinstance(self.window, dt.timedelta) else int
        self.state_type = KeyState[event_type, time_type]  # type: ignore[valid-type]
        self._names = pattern.names
        self._positive = tuple(s.name for s in pattern.stages if not s.negative)
        self._index = {n: i for i, n in enumerate(self._names)}
        self._trees = self.nfa.trees
        self._start_tree = self.nfa.start_tree
        self._plans = [_plan(t) for t in self._trees]
        # states decided by one condition whose "false" outcome changes nothing:
        # (fn, leaf if true, takes_ctx)
        self._fast = [
            (p[1], p[3], p[0] == 2)
            if p[0] in (1, 2) and p[2].kind == IDENTITY
            else None
            for p in self._plans
        ]
        st = self._start_tree
        self._start_fast = (
            (st[0], st[3], st[4])
            if st.__class__ is tuple
            and not st[1]
            and st[3].__class__ is not tuple
            and st[4].__class__ is not tuple
            else None
        )
        self._pending = [k == PENDING for k in self.nfa.kinds]
        self._no_skip = pattern.skip.kind is SkipKind.NO_SKIP
        self._drop_doomed = not report_timeouts and pattern.skip.kind in (
            SkipKind.SKIP_TO_NEXT,
            SkipKind.SKIP_PAST_LAST_EVENT,
        )
        self._skip_stage = (
            self._index.get(pattern.skip.stage) if pattern.skip.stage else None
        )
        self._ctx = _Ctx(self._index)
        codes = set()
        for p in self.nfa.predicates:
            codes.add(getattr(p.cond.fn, "__code__", None))
            for leaf in p.cond.leaves:
                codes.add(getattr(leaf, "__code__", None))
                call = type(leaf).__dict__.get("__call__")  # a callable object's method
                codes.add(getattr(call, "__code__", None))
        codes.discard(None)
        self._cond_codes = frozenset(codes)

    # ---- state ------------------------------------------------------------------------
    def new_state(self) -> KeyState:
        """A fresh, empty state for one key."""
        return KeyState()

    def next_timeout(self, state: KeyState) -> Any | None:
        """The earliest time at which a partial match of ``state`` expires (when
        ``advance_time`` has something to do), or None."""
        if self.window is None or not state.runs:
            return None
        return state.runs[0][2] + self.window

    # ---- the hot path -------------------------------------------------------------------
    def process(self, state: KeyState, event: Any, timestamp: Any) -> list[Match]:
        """Feed one event of the key; return the matches it completes (see the module
        docstring).  Events must come in timestamp order."""
        out: list[Match] = []
        # list[Any]: in phase 2 a slot of ``runs`` briefly holds None (the partial match
        # died) or a list of the partial matches it turned into, until the reshape
        runs: list[Any] = state.runs
        window = self.window
        if window is not None and runs:
            try:
                due = timestamp - runs[0][2] >= window
            except TypeError:
                raise self._time_error(timestamp) from None
            if due:
                self._expire(state, timestamp, out)
                runs = state.runs
        eid = state.next_event
        state.next_event = eid + 1
        ctx = self._ctx
        ctx._nodes = state.nodes
        ctx._events = state.events
        ctx.timestamp = timestamp
        fast = self._fast
        changes: list[tuple[int, Leaf]] | None = None
        run: Any = None
        t: Any = None
        # Phase 1: evaluate the conditions (the only user code) without touching the state.
        try:
            i = 0
            for run in runs:
                f = fast[run[0]]
                if f is not None:  # one condition; when false nothing changes
                    if f[2]:
                        ctx._run = run
                        if f[0](event, ctx):
                            if changes is None:
                                changes = [(i, f[1])]
                            else:
                                changes.append((i, f[1]))
                    elif f[0](event):
                        if changes is None:
                            changes = [(i, f[1])]
                        else:
                            changes.append((i, f[1]))
                else:
                    t = self._decide(run, event, ctx)
                    if t.kind:
                        if changes is None:
                            changes = [(i, t)]
                        else:
                            changes.append((i, t))
                i += 1  # noqa: SIM113 -- enumerate() allocates a tuple per run
            run = None
            sf = self._start_fast
            if sf is not None:  # one simple condition decides
                t = sf[2] if sf[0](event) else sf[1]
            else:
                t = self._start_tree
                if t.__class__ is tuple:
                    ctx._run = _NO_RUN
                    t = self._walk(t, event, ctx)
        except (AttributeError, KeyError) as exc:
            state.next_event = eid
            pred = getattr(exc, "_cep_predicate", None)
            if pred is None:
                tree = self._start_tree if run is None else self._plans[run[0]][5]
                pred = tree[2] if tree.__class__ is tuple else None
            self._field_error(exc, pred, event)
            raise
        start_leaf = t
        if changes is None and not start_leaf.ops:
            return out  # the common case: the event changes nothing
        # Phase 2: apply the outcomes.
        potentials: list[tuple[int, Any, int, int]] = []
        nodes = state.nodes
        erefs = state.refs
        if changes is not None:
            reshape = False
            for i, leaf in changes:
                run = runs[i]
                kind = leaf.kind
                if kind == TAKE1:
                    # the run's reference on its node moves to the new node
                    if eid in erefs:
                        erefs[eid] += 1
                    else:
                        erefs[eid] = 1
                        state.events[eid] = event
                        state.times[eid] = timestamp
                    nn = state.next_node
                    state.next_node = nn + 1
                    refs = 0
                    if leaf.target >= 0:
                        runs[i] = (leaf.target, nn, run[2], run[3], eid)
                        refs = 1
                    else:
                        runs[i] = None
                        reshape = True
                    if leaf.completes:
                        potentials.append((nn, run[2], run[3], eid))
                        refs += 1
                    nodes[nn] = [eid, leaf.stage, run[1], refs]
                elif kind == MOVE1:
                    runs[i] = (leaf.target, run[1], run[2], run[3], run[4])
                elif kind == EMPTY:  # the partial match dies
                    _release(state, run[1])
                    runs[i] = None
                    reshape = True
                else:
                    produced = self._apply(
                        state, run, leaf, event, timestamp, eid, potentials
                    )
                    if len(produced) == 1:
                        runs[i] = produced[0]
                    else:
                        runs[i] = produced if produced else None
                        reshape = True
            if reshape:
                new_runs = []
                for r in runs:
                    if r is None:
                        continue
                    if r.__class__ is list:
                        new_runs.extend(r)
                    else:
                        new_runs.append(r)
                state.runs = runs = new_runs
        if start_leaf.ops:
            if start_leaf.kind == TAKE1 and start_leaf.target >= 0:
                if eid in erefs:
                    erefs[eid] += 1
                else:
                    erefs[eid] = 1
                    state.events[eid] = event
                    state.times[eid] = timestamp
                nn = state.next_node
                state.next_node = nn + 1
                runs.append((start_leaf.target, nn, timestamp, eid, eid))
                if start_leaf.completes:
                    potentials.append((nn, timestamp, eid, eid))
                    nodes[nn] = [eid, start_leaf.stage, -1, 2]
                else:
                    nodes[nn] = [eid, start_leaf.stage, -1, 1]
            else:
                start_run = (-1, -1, timestamp, eid, -1)
                runs.extend(
                    self._apply(
                        state, start_run, start_leaf, event, timestamp, eid, potentials
                    )
                )
        if potentials:
            self._emit(state, potentials, out, eid)
        elif (
            changes is not None
            and state.held
            and (not runs or runs[0][3] >= state.held[0][2])
        ):
            # partial matches died: release the matches they held back
            self._emit(state, potentials, out, eid)
        return out

    def _walk(self, t: Any, event: Any, ctx: _Ctx) -> Leaf:
        try:
            while t.__class__ is tuple:
                if t[1]:
                    r = t[0](event, ctx)
                else:
                    r = t[0](event)
                t = t[4] if r else t[3]
        except (AttributeError, KeyError) as exc:
            if not hasattr(exc, "_cep_predicate"):
                try:
                    exc._cep_predicate = t[2]  # type: ignore[union-attr]
                except AttributeError:  # an exception type without a __dict__
                    pass
            raise
        return t

    def _decide(self, run: tuple, event: Any, ctx: _Ctx) -> Leaf:
        p = self._plans[run[0]]
        k = p[0]
        if k == 0:
            return p[2]
        ctx._run = run
        if k == 2:
            return p[3] if p[1](event, ctx) else p[2]
        if k == 1:
            return p[3] if p[1](event) else p[2]
        return self._walk(p[5], event, ctx)

    def _apply(
        self,
        st: KeyState,
        run: tuple,
        leaf: Leaf,
        event: Any,
        ts: Any,
        eid: int,
        potentials: list,
    ) -> list[tuple]:
        """Carry out the ops of ``leaf`` for partial match ``run`` (node -1: the start
        state, whose new partial matches start at this event); return the partial
        matches it turns into (in order)."""
        _, node, start_t, start_id, last = run
        nodes = st.nodes
        produced: list[tuple] = []
        created: list[int] = []
        for op in leaf.ops:
            kind = op[0]
            if kind == "ignore":
                produced.append((op[1], node, start_t, start_id, last))
                nodes[node][3] += 1
            elif kind == "final":
                potentials.append((node, start_t, start_id, eid))
                nodes[node][3] += 1
            else:
                _, stage, target, completes, pending = op
                if eid in st.refs:
                    st.refs[eid] += 1
                else:
                    st.refs[eid] = 1
                    st.events[eid] = event
                    st.times[eid] = ts
                nn = st.next_node
                st.next_node = nn + 1
                rec = [eid, stage, node, 0]
                nodes[nn] = rec
                if node >= 0:
                    nodes[node][3] += 1
                created.append(nn)
                if target >= 0:
                    produced.append((target, nn, start_t, start_id, eid))
                    rec[3] += 1
                if pending >= 0:
                    produced.append((pending, nn, start_t, start_id, eid))
                    rec[3] += 1
                if completes:
                    potentials.append((nn, start_t, start_id, eid))
                    rec[3] += 1
        if leaf.stop:
            for r in produced:
                _release(st, r[1])
            produced = []
        for nn in created:  # a node nothing refers to (cannot happen; be safe)
            made = nodes.get(nn)
            if made is not None and made[3] == 0:
                made[3] = 1
                _release(st, nn)
        if node >= 0:
            _release(st, node)
        return produced

    # ---- time ---------------------------------------------------------------------------
    def advance_time(
        self, state: KeyState, timestamp: Any
    ) -> tuple[list[Match], list[TimedOut]]:
        """Event time reached ``timestamp`` for the key: expire partial matches whose
        window closed; return the matches this completes (trailing ``not_followed_by``,
        held matches released) and the timed-out partial matches (including those
        ``process`` found and queued)."""
        out: list[Match] = []
        window = self.window
        if window is not None and state.runs:
            try:
                due = timestamp - state.runs[0][2] >= window
            except TypeError:
                raise self._time_error(timestamp) from None
            if due:
                self._expire(state, timestamp, out)
        timeouts: list[TimedOut] = []
        if state.expired:
            for node, tt in state.expired:
                timeouts.append(TimedOut(self._materialize(state, node), tt))
                _release(state, node)
            state.expired = []
        return out, timeouts

    def _expire(self, st: KeyState, t: Any, out: list[Match]) -> None:
        window = self.window
        runs = st.runs
        k = 0
        n = len(runs)
        while k < n and t - runs[k][2] >= window:
            k += 1
        if k == 0:
            return
        expired = runs[:k]
        st.runs = runs[k:]
        seq = st.next_event
        pots = []
        pending = self._pending
        report = self.report_timeouts
        for run in expired:
            if pending[run[0]]:
                pots.append((run[1], run[2], run[3], seq))
            elif report:
                st.expired.append((run[1], run[2] + window))
            else:
                _release(st, run[1])
        if pots or st.held:
            self._emit(st, pots, out, seq)

    # ---- emitting matches -----------------------------------------------------------------
    def _chain(self, st: KeyState, nid: int) -> list[list[int]]:
        nodes = st.nodes
        out = []
        while nid >= 0:
            n = nodes[nid]
            out.append(n)
            nid = n[2]
        out.reverse()
        return out

    def _key(self, st: KeyState, m: tuple[int, Any, int, int]) -> tuple:
        return (m[2], m[3], tuple((n[0], n[1]) for n in self._chain(st, m[0])))

    def _materialize(self, st: KeyState, nid: int) -> Match:
        names = self._names
        events = st.events
        groups: dict[int, list[Any]] = {}
        chain = self._chain(st, nid)
        for n in chain:
            groups.setdefault(n[1], []).append(events[n[0]])
        return Match(
            {names[k]: tuple(groups[k]) for k in sorted(groups)},
            st.times[chain[0][0]],
            st.times[chain[-1][0]],
            self._positive,
        )

    def _hold(self, st: KeyState, m: tuple[int, Any, int, int]) -> None:
        """Insert ``m`` into the held matches, ordered by (start, completion, events)."""
        held = st.held
        k = (m[2], m[3])
        i = bisect.bisect_right(held, k, key=lambda x: (x[2], x[3]))
        if i and (held[i - 1][2], held[i - 1][3]) == k:  # a tie: order by event ids
            lo = bisect.bisect_left(held, k, key=lambda x: (x[2], x[3]))
            mk = self._key(st, m)
            i = lo + bisect.bisect_right([self._key(st, h) for h in held[lo:i]], mk)
        held.insert(i, m)

    def _emit(self, st: KeyState, potentials: list, out: list[Match], seq: int) -> None:
        if self._no_skip:
            if len(potentials) > 1:
                potentials.sort(key=lambda m: self._key(st, m))
            for m in potentials:
                out.append(self._materialize(st, m[0]))
                _release(st, m[0])
            return
        held = st.held
        for m in potentials:
            self._hold(st, m)
        self._release_held(st, out)
        if self._drop_doomed and held and potentials:
            # A run that shares its start with a held match can never yield a match that
            # survives (the held match is emitted first and prunes it, or is pruned
            # together with it), and with timeouts unreported it has no other effect:
            # drop it now rather than evaluate it until then.
            for m in potentials:
                self._drop_runs_from(st, m[2])

    def _drop_runs_from(self, st: KeyState, start_id: int) -> None:
        runs = st.runs
        lo = bisect.bisect_left(runs, start_id, key=lambda r: r[3])
        hi = lo
        while hi < len(runs) and runs[hi][3] == start_id:
            _release(st, runs[hi][1])
            hi += 1
        if hi > lo:
            del runs[lo:hi]

    def _release_held(self, st: KeyState, out: list[Match]) -> None:
        held = st.held
        while held:
            m = held[0]
            runs = st.runs
            if runs and runs[0][3] < m[2]:
                break  # a partial match that started earlier is still alive
            del held[0]
            chain = self._chain(st, m[0])
            out.append(self._materialize(st, m[0]))
            pid, inclusive = self._pruning_id(chain, st)
            if pid is not None:
                k = 0
                while k < len(runs) and (
                    runs[k][3] <= pid if inclusive else runs[k][3] < pid
                ):
                    _release(st, runs[k][1])
                    k += 1
                if k:
                    st.runs = runs[k:]
                k = 0
                while k < len(held) and (
                    held[k][2] <= pid if inclusive else held[k][2] < pid
                ):
                    _release(st, held[k][0])
                    k += 1
                if k:
                    del held[:k]
            _release(st, m[0])

    def _pruning_id(self, chain: list[list[int]], st: KeyState) -> tuple[int | None, bool]:
        kind = self.skip.kind
        if kind is SkipKind.SKIP_TO_NEXT:
            return chain[0][0], True
        if kind is SkipKind.SKIP_PAST_LAST_EVENT:
            return chain[-1][0], True
        k = self._skip_stage
        ids = [n[0] for n in chain if n[1] == k]
        pid = (ids[0] if kind is SkipKind.SKIP_TO_FIRST else ids[-1]) if ids else None
        if self.skip.throw_on_miss and (pid is None or pid == chain[0][0]):
            self._skip_error(chain, st, pid is None)
        return pid, False

    def _skip_error(self, chain: list[list[int]], st: KeyState, missing: bool) -> None:
        names = self._names
        events = st.events
        match: dict[str, list[Any]] = {}
        for n in chain:
            match.setdefault(names[n[1]], []).append(events[n[0]])
        how = "first" if self.skip.kind is SkipKind.SKIP_TO_FIRST else "last"
        if missing:
            raise AfterMatchSkipError(
                f"after match skip to {how} {self.skip.stage!r}: the match {match!r} has no event for "
                f"{self.skip.stage!r} (throw_exception_on_miss)"
            )
        raise AfterMatchSkipError(
            f"after match skip to {how} {self.skip.stage!r}: the target is the first event of the match "
            f"{match!r}, so the next match would start where this one did (throw_exception_on_miss)"
        )

    # ---- errors -----------------------------------------------------------------------------
    def _time_error(self, timestamp: Any) -> PatternError:
        w = self.pattern.window
        if isinstance(self.window, dt.timedelta):
            how = (
                "a timedelta window needs datetime timestamps, or the stream's time unit: "
                "Matcher(..., time_unit=timedelta(minutes=1)) for timestamps in minutes"
            )
        else:
            how = "a numeric window needs numeric timestamps; give datetime timestamps a timedelta window"
        return PatternError(
            f"within({w!r}): cannot compare the window with timestamp {timestamp!r} "
            f"({type(timestamp).__name__}): {how}"
        )

    def _field_error(self, exc: BaseException, pred: Any, event: Any) -> None:
        """Turn an AttributeError/KeyError raised inside condition ``pred`` into an
        EventFieldError naming the stage and the field (else return: re-raised)."""
        if pred is None:
            return
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code not in self._cond_codes:
            tb = tb.tb_next
        if tb is None:
            return  # not raised by a condition
        if isinstance(exc, KeyError):
            fld = exc.args[0] if exc.args else None
        else:
            fld = getattr(exc, "name", None)
            if fld is None:
                fld = str(exc)
        what = {
            "condition": "condition",
            "until": "until condition",
            "negation": "condition",
        }[pred.what]
        raise EventFieldError(
            f"pattern stage {pred.stage!r}: the {what} reads field {fld!r}, which the event "
            f"{event!r} does not have ({type(exc).__name__}: {exc})",
            stage=pred.stage,
            field=fld,
        ) from exc
