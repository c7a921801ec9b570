"""CEP as a tstate operator: :func:`cep` matches a pattern per key over a stream, in
event time, with the matcher's state as typed, checkpointed, migratable keyed state.

>>> import tstate as ts
>>> from apps.cep import Pattern
>>> from apps.cep.dataflow import cep
>>> flow = ts.Dataflow("abc")
>>> # records (key, event time, kind); dataflow epochs of 10 event-time units
>>> src = flow.source(ts.io.from_batches([(0, [("k", 3, "a"), ("k", 1, "x")]), (1, [("k", 12, "b"), ("k", 2, "b")])]))
>>> ab = Pattern.begin("a").where(lambda e: e[2] == "a").followed_by("b").where(lambda e: e[2] == "b")
>>> out = cep(flow, src, ab, key=lambda e: e[0], time=lambda e: e[1], epoch=10,
...           event_type=tuple[str, int, str])
>>> matches, timeouts, late = out.collect()        # three in-memory sinks
>>> flow.run()
>>> [(t, k, m["a"][0][1], m["b"][0][1]) for t, (k, m) in matches.items]
[(1, 'k', 3, 12)]
>>> late.items                                # event time 2 < 10 when epoch 1 arrived
[(1, ('k', ('k', 2, 'b')))]

Event time and dataflow time
----------------------------
Records carry two clocks.  The **dataflow time** is the record's epoch in the tstate
dataflow (an ``int``, coarse: an hour of flights); the **event time** ``time(record)``
is fine-grained (the flight's minute), in units such that dataflow epoch ``T`` covers
the event times ``[T * epoch, (T + 1) * epoch)``.

*Watermark.*  Once the operator's input frontier has passed epoch ``T`` (no record at a
dataflow time ``<= T`` can still arrive), event time is complete below

    ``W(T) = (T + 1) * epoch - lateness``.

*Late events.*  A record arriving at dataflow time ``Ta`` whose event time ``e`` is
below the watermark already reached, ``e < W(Ta - 1) = Ta * epoch - lateness``, is
**late**: it goes to the ``late`` output as ``(key, record)`` at time ``Ta`` and is not
matched.  With ``lateness = 0`` an event is on time as long as it arrives no later than
in its own epoch; ``lateness`` (event-time units) tolerates that much more.

*Buffering and release.*  Every other event is appended to the key's state and
**released** to the matcher at its *release epoch* ``R(e) = max(Ta, (e + lateness) //
epoch)``, the first epoch ``>= Ta`` with ``W(R) > e``: when the frontier passes ``R``,
a timer of the key (``ctx.notify_at(R)``, set once per key and epoch) feeds the matcher
every buffered event with ``e < W(R)`` in event-time order (equal times in arrival
order), then calls ``advance_time(W(R))``.  So each key's matcher gets exactly its
non-late events, in timestamp order, through ``process`` -- the calls of a sequential
run of the matcher over those events, plus ``advance_time`` at the watermarks -- and
finds the same matches as that sequential run.  (Which partial matches are *reported
as timed out* depends on where ``advance_time`` is called: a held match released by
an expiry at one watermark prunes partial matches that a single, later
``advance_time`` would report as timed out.)  The calls, hence every output and its
time, are the same for any number of workers, across migrations and across
checkpoint/restore.

*Timeouts.*  A partial match with a window (``within``) expires at event time
``x = start + within`` (:meth:`~apps.cep.matcher.Matcher.next_timeout` gives the
earliest); the key keeps a timer at ``T(x)``, the first epoch with ``W(T) >= x``
(``ceil((x + lateness) / epoch) - 1``), when ``advance_time(W(T))`` discards it.

When is a match emitted, and at which dataflow time
---------------------------------------------------
Every output record is emitted at the dataflow time of the timer call that produced
it (late events: at their arrival epoch ``Ta``):

* a **match completed by an event** (``Matcher.process``) is emitted at that event's
  release epoch ``R(e)``;
* a **timed-out** partial match (``TimedOut``) and a **match completed by time** (a
  trailing ``not_followed_by`` whose window closed) are emitted at
  ``max(R(last), T(x))``: ``R(last)`` is the release epoch of the last event the partial
  match accepted, ``x`` its window's end;
* a match **held back** by an after-match skip strategy (until no partial match that
  started earlier is alive) is emitted when the last of those dies: at the release
  epoch of the event that made it fail, or when it times out (previous rule) -- never
  before the release epoch of its own completing event.

Within one timer call the order is the matcher's (by first event, then completing
event); across keys and workers there is no order within an epoch.  Output records:
``matches``: ``(key, Match)``; ``timeouts``: ``(key, TimedOut)``; ``late``:
``(key, record)``.  When the input ends the frontier becomes empty and every pending
timer fires: buffered events are released and every window expires.

State
-----
One :class:`CepState` per key: the matcher's :class:`~apps.cep.state.KeyState`
(``nfa``), the buffered events ``(event time, record)`` (``buffer``), and the epoch of
the key's earliest pending timer (``wake``, so that a timer is set once per key and
epoch, not per event).  A key whose state becomes empty (nothing buffered, no partial
match) is dropped (``ctx.clear()``), so idle keys cost nothing -- unless
``keep_idle_keys=True``.  The state type is
``CepState[event_type, time_type]``: ``event_type`` must be a type tstate can encode
(an attrs class, a tuple of scalars, a ``TypedDict`` for dict records, ...), checked when
the dataflow is built.  Records may be plain dicts (the rows ``ts.io.parquet`` /
``ts.io.csv`` give): without ``event_type`` the type is the source's
(:meth:`~tstate.io.sources.Source.record_type`, a ``TypedDict`` of the file's columns),
and the first record is checked against it (a mismatch raises
:class:`~tstate.errors.StateTypeError` naming the column).
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left
from collections.abc import Callable, Iterator
from operator import attrgetter, itemgetter
from typing import Any, Generic, Optional, TypeVar

from attrs import define, field, frozen

from tstate.dataflow import DEFAULT_BINS, Dataflow, StatefulStream, Stream
from tstate.errors import ConfigurationError, StateTypeError
from tstate.io.sinks import Collected
from tstate.io.sources import UNIX_EPOCH, EventTime

from apps.cep.durations import in_units, is_duration
from apps.cep.matcher import Match, Matcher, TimedOut
from apps.cep.pattern import Pattern
from apps.cep.state import KeyState

__all__ = ["CepState", "CepStreams", "Clock", "MATCH", "TIMEOUT", "LATE", "cep", "release_epoch", "resolve_clock", "watermark"]

E = TypeVar("E")
T = TypeVar("T")

#: tags of the operator's (single) output stream, split into the three outputs
MATCH, TIMEOUT, LATE = 0, 1, 2


@define
class CepState(Generic[E, T]):
    """The state of one key (see the module docstring)."""

    nfa: KeyState[E, T] = field(factory=KeyState)
    #: events waiting for the watermark, in arrival order: (event time, record)
    buffer: list[tuple[T, E]] = field(factory=list)
    #: the epoch of the key's earliest pending timer (None: no timer needed)
    wake: Optional[int] = None

    def is_empty(self) -> bool:
        return not self.buffer and self.nfa.is_empty()


@frozen
class CepStreams:
    """What :func:`cep` returns: the three output streams (also unpackable as
    ``matches, timeouts, late = cep(...)``), the stateful operator (for
    ``flow.state(out.operator)``) and the :class:`Matcher`."""

    matches: Stream
    timeouts: Stream
    late: Stream
    operator: StatefulStream
    matcher: Matcher
    epoch: Any
    lateness: Any

    def __iter__(self) -> Iterator[Stream]:
        return iter((self.matches, self.timeouts, self.late))

    def collect(self) -> tuple[Collected, Collected, Collected]:
        """In-memory sinks of the three outputs: ``(matches, timeouts, late)``
        :class:`~tstate.io.sinks.Collected` lists of ``(time, (key, value))``."""
        n = self.operator.name
        return (
            self.matches.collect(name=f"{n}.matches.collect"),
            self.timeouts.collect(name=f"{n}.timeouts.collect"),
            self.late.collect(name=f"{n}.late.collect"),
        )


def watermark(epoch_time: int, epoch: Any, lateness: Any = 0, origin: Any = 0) -> Any:
    """``W(T)``: the event time below which everything is complete once the frontier
    passed dataflow time ``epoch_time``."""
    return origin + (epoch_time + 1) * epoch - lateness


def release_epoch(event_time: Any, epoch: Any, lateness: Any = 0, origin: Any = 0) -> int:
    """The first epoch ``R`` with ``W(R) > event_time`` (the release epoch of an event
    arriving no later than ``R``)."""
    return int((event_time - origin + lateness) // epoch)


def _timeout_epoch(x: Any, epoch: Any, lateness: Any, origin: Any = 0) -> int:
    """The first epoch ``T`` with ``W(T) >= x``."""
    return int(-((origin - x - lateness) // epoch)) - 1  # ceil((x - origin + lateness) / epoch) - 1


@frozen
class Clock:
    """How :func:`cep` reads event time, resolved from its arguments and the source:
    ``time`` (record -> event time), ``epoch`` / ``lateness`` / ``window`` (numbers in
    the event time's unit, or ``timedelta`` values when event times are datetimes),
    ``origin`` (the event time at which dataflow epoch 0 starts), ``unit`` (the
    duration of 1 of a numeric event time, if known), ``time_type`` (for the state)."""

    time: Callable[[Any], Any]
    epoch: Any
    lateness: Any
    window: Any
    origin: Any
    unit: Optional[dt.timedelta]
    time_type: Any


def _field_getter(name: str) -> Callable[[Any], Any]:
    """Read field ``name`` of a dict record (by key) or of an object (by attribute)."""
    item = itemgetter(name)
    attr = attrgetter(name)

    def get(rec: Any) -> Any:
        return item(rec) if rec.__class__ is dict else attr(rec)

    get.__name__ = f"field_{name}"
    return get


def resolve_clock(
    stream: Stream,
    pattern: Pattern,
    time: Optional[Callable[[Any], Any]],
    epoch: Any,
    lateness: Any,
    time_unit: Optional[dt.timedelta],
    time_type: Any,
    where: str = "cep",
) -> Clock:
    """Resolve event time for :func:`cep` (rules in its docstring)."""
    src = stream.origin_source()
    declared: Optional[EventTime] = src.event_time() if src is not None else None
    if time is None:
        if declared is None:
            raise ConfigurationError(
                f"{where}: time= is needed: the stream does not come from a source that declares its "
                "event time (ts.io.parquet / ts.io.csv, apps.cep.source.flight_source)"
            )
        time = _field_getter(declared.field)
    elif not callable(time):
        raise ConfigurationError(f"{where}: time must be a function of the record, got {time!r}")
    if epoch is None:  # the source's, else one event-time unit per dataflow epoch
        epoch = declared.epoch if declared is not None else 1
    unit = time_unit if time_unit is not None else (declared.unit if declared is not None else None)
    for name, value, zero_ok in (("epoch", epoch, False), ("lateness", lateness, True)):
        ok = is_duration(value) and (
            value >= dt.timedelta(0) if isinstance(value, dt.timedelta) else value >= 0
        )
        if ok and not zero_ok:
            ok = value != 0 and value != dt.timedelta(0)
        if not ok:
            raise ConfigurationError(
                f"{where}: {name} must be a {'non-negative' if zero_ok else 'positive'} "
                f"datetime.timedelta or number of event-time units, got {value!r}"
            )
    if unit is not None and not (isinstance(unit, dt.timedelta) and unit > dt.timedelta(0)):
        raise ConfigurationError(f"{where}: time_unit must be a positive datetime.timedelta, got {unit!r}")
    window = pattern.window
    if unit is not None:  # numeric event time in known units: every duration becomes a number
        epoch, lateness, window = (in_units(d, unit) if isinstance(d, dt.timedelta) else d for d in (epoch, lateness, window))
        origin: Any = 0
        tt = int if time_type is None else time_type
    elif isinstance(epoch, dt.timedelta):  # datetime event time
        if not isinstance(lateness, dt.timedelta):
            if lateness:
                raise ConfigurationError(
                    f"{where}: the event times are datetimes (the epoch is {epoch!r}): give lateness "
                    f"as a datetime.timedelta, not {lateness!r}"
                )
            lateness = dt.timedelta(0)
        if window is not None and not isinstance(window, dt.timedelta):
            raise ConfigurationError(
                f"{where}: the event times are datetimes (the epoch is {epoch!r}): give the pattern's "
                f"within() a datetime.timedelta, not {window!r}"
            )
        origin = declared.origin if declared is not None and isinstance(declared.origin, dt.datetime) else UNIX_EPOCH
        tt = dt.datetime if time_type is None else time_type
    else:  # numbers in an unknown unit
        for name, value in (("lateness", lateness), ("the pattern's within()", window)):
            if isinstance(value, dt.timedelta):
                raise ConfigurationError(
                    f"{where}: {name} is {value!r}, but the event times are numbers of an unknown unit: "
                    "give time_unit= (e.g. timedelta(minutes=1)) or a number"
                )
        origin = 0
        tt = int if time_type is None else time_type
    return Clock(time, epoch, lateness, window, origin, unit, tt)


def cep(
    flow: Dataflow,
    stream: Stream,
    pattern: Pattern,
    *,
    key: Callable[[Any], Any],
    time: Optional[Callable[[Any], Any]] = None,
    event_type: Any = None,
    epoch: Any = None,
    lateness: Any = 0,
    time_unit: Optional[dt.timedelta] = None,
    time_type: Any = None,
    report_timeouts: bool = True,
    keep_idle_keys: bool = False,
    bins: int = DEFAULT_BINS,
    name: Optional[str] = None,
) -> CepStreams:
    """Match ``pattern`` per ``key(record)`` over ``stream`` in event time
    ``time(record)`` (see the module docstring for the exact semantics).

    Event time is a number or a ``datetime`` (naive UTC, as ``ts.io.parquet`` gives
    timestamps; or UTC-aware).  What the source declares
    (:meth:`~tstate.io.sources.Source.event_time`: ``ts.io.parquet``/``csv``,
    :func:`apps.cep.source.flight_source`) need not be given again:

    * ``time``: default the source's time field;
    * ``epoch``: the event time one dataflow epoch covers -- a number of event-time
      units (60 for minutes in hourly epochs) or a ``timedelta`` (datetime event
      times); default the source's epoch, else 1 (dataflow time = event time);
    * ``time_unit``: the duration of 1 of a numeric event time (default the source's,
      e.g. one minute for ``flight_source``); with it, ``timedelta`` values of
      ``epoch``, ``lateness`` and the pattern's ``within`` are converted to numbers;
    * ``lateness``: how far behind the watermark an event may arrive and still be
      matched (a number of event-time units or a ``timedelta``).

    ``event_type``: the records' type, for the state's codec -- default the source's
    (:meth:`~tstate.io.sources.Source.record_type`: for ``ts.io.parquet``/``csv`` dict
    rows a ``TypedDict`` of the file's columns, checked on the first record; for
    ``flight_source`` ``FlightEvent``); ``time_type``: the event time's type (default
    ``int`` for numbers, ``datetime`` for datetimes);
    ``report_timeouts``: see :class:`Matcher`;
    ``keep_idle_keys``: keep a key's state when it becomes empty instead of dropping
    it (faster when a bounded set of keys is active all the time -- the flight app's
    airports: dropping and re-creating the state of a key every epoch costs ~20% of
    the throughput there -- but the state then grows with the number of keys ever
    seen); ``bins``: state bins of the operator; ``name``: the operator's name
    (default ``"cep"``, made unique).  Returns a :class:`CepStreams`.  Bad arguments
    raise :class:`~tstate.errors.ConfigurationError` (or
    :class:`~apps.cep.errors.PatternError` for the pattern) when the dataflow is built."""
    if not callable(key):
        raise ConfigurationError("cep: key must be a function of the record")
    clock = resolve_clock(stream, pattern, time, epoch, lateness, time_unit, time_type)
    time = clock.time
    inferred = event_type is None
    if inferred:
        src = stream.origin_source()
        event_type = src.record_type() if src is not None else None
        if event_type is None:
            raise ConfigurationError(
                "cep: event_type= is needed: the stream does not come from a source that declares the type of "
                "its records (ts.io.parquet / ts.io.csv: a TypedDict of the columns; flight_source: FlightEvent)"
            )
    m: Matcher[Any] = Matcher(
        pattern, event_type=event_type, time_type=clock.time_type, time_unit=clock.unit,
        report_timeouts=report_timeouts,
    )  # fmt: skip
    if isinstance(m.window, dt.timedelta) != isinstance(clock.epoch, dt.timedelta) and m.window is not None:
        raise ConfigurationError(
            f"cep: the pattern's window {pattern.window!r} and the epoch {clock.epoch!r} are not in the same "
            "terms (both timedeltas for datetime event times, or numbers with time_unit=)"
        )
    time_type = clock.time_type
    state_type = CepState[event_type, time_type]  # type: ignore[valid-type]
    process = m.process
    advance = m.advance_time
    window = m.window
    by_time = itemgetter(0)
    drop = not keep_idle_keys
    E_, L_, O_ = clock.epoch, clock.lateness, clock.origin
    LO_ = O_ - L_  # W(T-1) = T*E + (O - L)

    # per-event arithmetic on datetimes allocates: the watermark of the current epoch
    # and (datetime event time: exact) the start of the epoch a key's timer is set for
    # are computed once and kept, each as one tuple (workers on threads share them)
    exact = isinstance(E_, dt.timedelta)
    seen: list[tuple[Any, Any]] = [(None, None), (None, None)]  # (epoch, watermark), (wake epoch, its start)

    def on_event(s: CepState, rec: Any, ctx: Any) -> None:
        t = time(rec)
        now = ctx.time
        mark = seen[0]
        if mark[0] != now:
            mark = seen[0] = (now, now * E_ + LO_)
        try:
            late = t < mark[1]  # below the watermark already reached
        except TypeError:
            raise _time_error(rec, t, E_, O_) from None
        if late:
            ctx.emit((LATE, ctx.key, rec))
            if drop and s.wake is None and s.is_empty():
                ctx.clear()  # do not keep an empty state for a key seen only late
            return
        s.buffer.append((t, rec))
        w = s.wake
        if w is not None and exact:
            start = seen[1]
            if start[0] != w:
                start = seen[1] = (w, w * E_ + LO_)  # (t - O + L) // E < w  <=>  t < w*E + O - L
            if t >= start[1]:
                return  # the key's timer is early enough
            w = None
        if w is None or (t - O_ + L_) // E_ < w:  # an earlier timer is needed
            need = max(int((t - O_ + L_) // E_), ctx.time)  # (>= ctx.time but for float rounding)
            ctx.notify_at(need)
            s.wake = need

    def on_timer(s: CepState, now: int, ctx: Any) -> None:
        wm = O_ + (now + 1) * E_ - L_
        nfa = s.nfa
        buf = s.buffer
        k = ctx.key
        emit = ctx.emit
        if buf:
            if len(buf) > 1:
                buf.sort(key=by_time)  # stable: equal times stay in arrival order
            if buf[-1][0] < wm:
                ready = buf
                s.buffer = buf = []
            else:
                i = bisect_left(buf, wm, key=by_time)
                ready = buf[:i]
                del buf[:i]
            for t, rec in ready:
                ms = process(nfa, rec, t)
                if ms:
                    for x in ms:
                        emit((MATCH, k, x))
        runs = nfa.runs
        if nfa.expired or (window is not None and runs and wm - runs[0][2] >= window):
            ms, tos = advance(nfa, wm)
            for x in ms:
                emit((MATCH, k, x))
            for y in tos:
                emit((TIMEOUT, k, y))
            runs = nfa.runs
        # the next timer: the earliest buffered event, the earliest window to close
        need: Any = None
        if buf:
            need = (buf[0][0] - O_ + L_) // E_
        if window is not None and runs:
            to = _timeout_epoch(runs[0][2] + window, E_, L_, O_)
            if need is None or to < need:
                need = to
        if need is None:
            s.wake = None
            if drop and nfa.is_empty():  # nothing pending: drop the key's state
                ctx.clear()
        else:
            need = int(need)
            if need <= now:  # cannot happen (all due work was done); be safe
                need = now + 1
            ctx.notify_at(need)
            s.wake = need

    on_event.__name__ = "cep"  # the operator's default name ("cep", "cep#3", ...)
    handler: Callable[[Any, Any, Any], None] = on_event
    if inferred:  # check the first record against the type inferred from the source
        handler = _checking_first(on_event, event_type, lambda: op.name)
    flow.record_types(Match, TimedOut)  # the records it emits (they cross Spark exchanges)
    op = flow.stateful(stream, key=key, state=state_type, bins=bins, name=name)(handler)
    op.on_notify(on_timer)
    nm = op.name
    matches = op.flat_map(_pick(MATCH), name=f"{nm}.matches")
    timeouts = op.flat_map(_pick(TIMEOUT), name=f"{nm}.timeouts")
    late = op.flat_map(_pick(LATE), name=f"{nm}.late")
    return CepStreams(matches, timeouts, late, op, m, E_, L_)


def _checking_first(
    on_event: Callable[[Any, Any, Any], None], event_type: Any, op_name: Callable[[], str]
) -> Callable[[Any, Any, Any], None]:
    """``on_event`` that first checks the first record it sees against ``event_type``
    (raising :class:`~tstate.errors.StateTypeError` naming the field), then no more."""
    from tstate.types.check import Mismatch, compile_checker
    from tstate.types.schema import analyse, root_label

    schema = analyse(event_type)
    check = compile_checker(schema)
    pending = [True]

    def on_event_checked(s: Any, rec: Any, ctx: Any) -> None:
        if pending[0]:
            try:
                check(rec)
            except Mismatch as m:
                raise StateTypeError(
                    f"{op_name()}: the record {rec!r} does not match {schema.name}, the type inferred from the "
                    f"source's columns: {m.error(root_label(schema))} (give event_type= to declare it)"
                ) from None
            pending[0] = False
        on_event(s, rec, ctx)

    on_event_checked.__name__ = "cep"
    return on_event_checked


def _time_error(rec: Any, t: Any, epoch: Any, origin: Any) -> ConfigurationError:
    kind = "datetimes" if isinstance(epoch, dt.timedelta) else "numbers"
    hint = ""
    if isinstance(t, dt.datetime) and isinstance(origin, dt.datetime) and (t.tzinfo is None) != (origin.tzinfo is None):
        hint = " (naive and UTC-aware datetimes cannot be mixed)"
    return ConfigurationError(
        f"cep: record {rec!r} has event time {t!r} ({type(t).__name__}), but the epoch {epoch!r} "
        f"makes the event times {kind}{hint}"
    )


def _pick(tag: int) -> Callable[[tuple[int, Any, Any]], tuple[tuple[Any, Any], ...]]:
    def pick(r: tuple[int, Any, Any]) -> tuple[tuple[Any, Any], ...]:
        return ((r[1], r[2]),) if r[0] == tag else ()

    return pick
