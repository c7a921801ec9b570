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

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from attrs import define, frozen

from apps.cep.buffer import release
from apps.cep.context import NO_RUN
from apps.cep.durations import resolve
from apps.cep.emission import MatchEmitter
from apps.cep.errors import PatternError
from apps.cep.nfa import NFA, PENDING, Leaf, compile_pattern
from apps.cep.pattern import Pattern
from apps.cep.runs import start_runs, step_runs
from apps.cep.state import KeyState
from apps.cep.transitions import TransitionEvaluator, decide, walk

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
        names = pattern.names
        tr = self._transitions = TransitionEvaluator(self.nfa, {n: i for i, n in enumerate(names)})
        # what the hot path reads of the decision trees, in its own attributes
        self._fast, self._start_fast, self._start_tree = tr.fast, tr.start_fast, tr.start_tree
        self._ctx, self._plans = tr.ctx, tr.plans
        self._pending = [k == PENDING for k in self.nfa.kinds]
        self._emission = MatchEmitter(pattern, Match, report_timeouts)
        self._emit = self._emission.emit
        self._materialize = self._emission.materialize

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
        ctx = self._ctx
        ctx._nodes = state.nodes
        ctx._events = state.events
        ctx.timestamp = timestamp
        fast = self._fast
        changes: list[tuple[int, Leaf]] | None = None
        run: Any = None
        leaf: Leaf | None
        # Phase 1: evaluate the conditions (the only user code) without touching the state
        # (inline: a call per event costs ~12% here; see apps.cep.transitions).
        try:
            i = 0
            for run in runs:
                f = fast[run[0]]
                if f is None:
                    leaf = decide(self._plans, run, event, ctx)
                    if not leaf.kind:
                        leaf = None
                elif f[2]:  # one condition; when false nothing changes
                    ctx._run = run
                    leaf = f[1] if f[0](event, ctx) else None
                else:
                    leaf = f[1] if f[0](event) else None
                if leaf is not None:
                    if changes is None:
                        changes = [(i, leaf)]
                    else:
                        changes.append((i, leaf))
                i += 1  # noqa: SIM113 -- enumerate() allocates a tuple per run
            run = None
            sf = self._start_fast
            if sf is not None:  # one simple condition decides
                start = sf[2] if sf[0](event) else sf[1]
            else:
                start = self._start_tree
                if start.__class__ is tuple:
                    ctx._run = NO_RUN
                    start = walk(start, event, ctx)
        except (AttributeError, KeyError) as exc:
            self._transitions.failed(exc, run, event)
            raise
        eid = state.next_event
        state.next_event = eid + 1
        if changes is None and not start.ops:
            return out  # the common case: the event changes nothing
        return self._apply(state, runs, changes, start, event, timestamp, eid, out)

    def _apply(
        self,
        state: KeyState,
        runs: list[Any],
        changes: list[tuple[int, Leaf]] | None,
        start: Leaf,
        event: Any,
        timestamp: Any,
        eid: int,
        out: list[Match],
    ) -> list[Match]:
        """Phase 2 of :meth:`process`: apply the outcomes of event ``eid`` (``changes`` to
        the partial matches ``runs``, ``start`` the start state's leaf) and emit the
        matches they complete into ``out``."""
        potentials: list[tuple[int, Any, int, int]] = []
        if changes is not None:
            runs = step_runs(state, runs, changes, event, timestamp, eid, potentials)
        if start.ops:
            start_runs(state, runs, start, event, timestamp, eid, potentials)
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
                release(state, node)
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
                release(st, run[1])
        if pots or st.held:
            self._emit(st, pots, out, seq)

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
