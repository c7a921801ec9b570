"""Durations as ``datetime.timedelta`` (``within``, ``lateness``, ``epoch``), numbers
kept as the stream's time unit, and the event time declared once, by the source."""

from __future__ import annotations

import datetime as dt
import operator
from pathlib import Path

import attrs
import pytest
from attrs import frozen

import tstate as ts
from apps.cep import Matcher, Pattern, PatternError
from apps.cep.dataflow import cep
from apps.cep.durations import in_units, resolve
from apps.cep.flights import FlightEvent, delay_cascade, recovery
from apps.cep.source import flight_source
from tests.apps.cep.helpers import drive, mkey
from tstate.errors import ConfigurationError

SAMPLE = Path(__file__).resolve().parents[3] / "apps" / "data" / "flights-sample.parquet"
H = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)


def ab(window=None) -> Pattern:
    p = Pattern.begin("a").where(lambda e: e[0] == "a").followed_by("b").where(lambda e: e[0] == "b")
    return p if window is None else p.within(window)


def test_within_takes_a_timedelta() -> None:
    assert ab(H).window == H
    assert ab(H).within(dt.timedelta(minutes=30)).window == dt.timedelta(minutes=30)
    assert ab(5).within(3).window == 3  # numbers stay accepted
    with pytest.raises(PatternError, match="positive"):
        ab(dt.timedelta(0))
    with pytest.raises(PatternError, match="both as timedeltas or both as numbers"):
        ab(H).within(30)
    with pytest.raises(PatternError, match="timedelta or a number"):
        ab("1h")


def test_a_timedelta_window_with_datetime_timestamps() -> None:
    t0 = dt.datetime(2024, 5, 1, 12)
    events = [("a1", t0), ("a2", t0 + 30 * MINUTE), ("b", t0 + 70 * MINUTE)]
    r = drive(ab(H), [(e, t) for e, t in events], t0 + 10 * H)
    # within is exclusive: a1 -> b spans 70 minutes; a2 -> b 40
    assert [m.to_dict() for _, m in r.matches] == [{"a": ["a2"], "b": ["b"]}]
    assert [(t.partial.to_dict(), t.timeout_time) for _, t in r.timeouts] == [({"a": ["a1"]}, t0 + H)]
    assert Matcher(ab(H)).state_type.__args__[1] is dt.datetime  # the state's time type


def test_a_timedelta_window_with_numeric_timestamps_needs_the_unit() -> None:
    events = [("a1", 0), ("a2", 30), ("b", 70)]  # minutes
    by_minutes = drive(Matcher(ab(H), time_unit=MINUTE), events, 1000)
    by_number = drive(ab(60), events, 1000)
    assert Matcher(ab(H), time_unit=MINUTE).window == 60
    assert [mkey(m) for _, m in by_minutes.matches] == [mkey(m) for _, m in by_number.matches] == [
        (("a", ("a2",)), ("b", ("b",)))
    ]
    assert Matcher(ab(dt.timedelta(seconds=90)), time_unit=MINUTE).window == 1.5
    m = Matcher(ab(H))  # no unit: the timestamps must be datetimes
    st = m.new_state()
    m.process(st, "a", 0)
    with pytest.raises(PatternError, match=r"timestamp 5 \(int\).*time_unit=timedelta\(minutes=1\)"):
        m.process(st, "b", 5)
    with pytest.raises(PatternError, match="time_unit must be a positive"):
        Matcher(ab(H), time_unit=60)


def test_resolve_and_in_units() -> None:
    assert in_units(dt.timedelta(hours=3), MINUTE) == 180 and type(in_units(3 * H, MINUTE)) is int
    assert resolve(None, MINUTE, "w") is None and resolve(7, MINUTE, "w") == 7
    with pytest.raises(PatternError, match="lateness"):
        resolve("x", None, "lateness")


# -- the dataflow: epoch, time field and unit from the source ---------------------------------


def run_flights(patterns: dict[str, Pattern], **kw) -> dict[str, list]:
    flow = ts.Dataflow("flights")
    src = flow.source(flight_source(SAMPLE, epoch="1h"), name="flights")
    outs = {
        name: cep(flow, src, p, key=operator.attrgetter("origin"), event_type=FlightEvent, name=name, **kw).collect()
        for name, p in patterns.items()
    }
    flow.run()
    return {name: [sorted(map(repr, c.items)) for c in cs] for name, cs in outs.items()}


def with_window(p: Pattern, w) -> Pattern:
    return attrs.evolve(p, window=w)


@pytest.mark.skipif(not SAMPLE.exists(), reason="no bundled sample")
def test_the_epoch_and_time_come_from_the_source_once() -> None:
    # given twice (the old way) vs once: cep takes the time field ("minute"), the epoch (60)
    # and the unit (a minute) from flight_source; timedeltas are converted with that unit
    explicit = run_flights(
        {"cascade": delay_cascade(), "recovery": recovery()},
        time=operator.attrgetter("minute"), epoch=60, lateness=30,
    )  # fmt: skip
    declared = run_flights(
        {
            "cascade": with_window(delay_cascade(), dt.timedelta(hours=3)),
            "recovery": with_window(recovery(), dt.timedelta(hours=2)),
        },
        lateness=dt.timedelta(minutes=30),
    )
    assert declared == explicit
    assert all(len(explicit[n][0]) > 100 for n in explicit)  # matches were found


@frozen
class FlightRow:
    """A row of the flight table with its timestamp as a datetime (ts.io.parquet's record)."""

    date: dt.datetime
    delay: int
    distance: int
    origin: str
    destination: str


@pytest.mark.skipif(not SAMPLE.exists(), reason="no bundled sample")
def test_datetime_event_time_from_a_table_source() -> None:
    # ts.io.parquet(time="date", epoch="1h") declares a datetime event time with a one-hour
    # epoch: cep needs neither time= nor epoch=, and takes timedelta windows and lateness
    flow = ts.Dataflow("rows")
    src = flow.source(ts.io.parquet(SAMPLE, time="date", epoch="1h", record=FlightRow), name="rows")
    outs = {}
    for name, p in (("cascade", delay_cascade()), ("recovery", recovery())):
        p = with_window(p, dt.timedelta(hours=p.window // 60))
        outs[name] = cep(
            flow, src, p, key=operator.attrgetter("origin"), event_type=FlightRow, name=name,
            lateness=dt.timedelta(minutes=30),
        ).collect()  # fmt: skip
    flow.run()

    def as_minutes(k: str, m) -> tuple:
        return (k, tuple((s, tuple((FlightEvent.from_flight(f).minute, f.delay) for f in evs)) for s, evs in m.items()))

    for name, (matches, timeouts, late) in outs.items():
        got = sorted(as_minutes(k, m) for _, (k, m) in matches.items)
        flow2 = ts.Dataflow("check")
        src2 = flow2.source(flight_source(SAMPLE, epoch="1h"), name="flights")
        pat = delay_cascade() if name == "cascade" else recovery()
        c = cep(flow2, src2, pat, key=operator.attrgetter("origin"), event_type=FlightEvent, lateness=30).collect()
        flow2.run()
        want = sorted(
            (k, tuple((s, tuple((f.minute, f.delay) for f in evs)) for s, evs in m.items())) for _, (k, m) in c[0].items
        )
        assert got == want and len(want) > 100
        # the match times are datetimes, and the dataflow times the same as with minutes
        assert all(isinstance(m.first_time, dt.datetime) for _, (_, m) in matches.items)
        assert sorted(t for t, _ in matches.items) == sorted(t for t, _ in c[0].items)
        assert len(timeouts.items) == len(c[1].items)


def test_bad_durations_are_refused_when_the_dataflow_is_built() -> None:
    rec = tuple[str, int]
    flow = ts.Dataflow("bad")
    src = flow.input("in")
    key, time = operator.itemgetter(0), operator.itemgetter(1)
    with pytest.raises(ConfigurationError, match="unknown unit: give time_unit="):
        cep(flow, src, ab(H), key=key, time=time, event_type=rec, epoch=10)
    with pytest.raises(ConfigurationError, match="lateness is .*unknown unit"):
        cep(flow, src, ab(5), key=key, time=time, event_type=rec, epoch=10, lateness=MINUTE)
    with pytest.raises(ConfigurationError, match="give the pattern's within\\(\\) a datetime.timedelta"):
        cep(flow, src, ab(60), key=key, time=time, event_type=rec, epoch=H)
    with pytest.raises(ConfigurationError, match="time= is needed"):
        cep(flow, src, ab(5), key=key, event_type=rec)
    with pytest.raises(ConfigurationError, match="epoch must be a positive"):
        cep(flow, src, ab(5), key=key, time=time, event_type=rec, epoch=dt.timedelta(0))
    # with a unit, every timedelta becomes a number of units
    out = cep(flow, src, ab(H), key=key, time=time, event_type=rec, epoch=H, lateness=MINUTE, time_unit=MINUTE)
    assert (out.epoch, out.lateness, out.matcher.window) == (60, 1, 60)


def test_datetime_event_time_with_an_in_memory_source() -> None:
    t0 = dt.datetime(2024, 5, 1)
    recs = [("k", t0 + 10 * MINUTE, "a"), ("k", t0 + 50 * MINUTE, "x"), ("k", t0 + 65 * MINUTE, "b")]
    flow = ts.Dataflow("dt")
    # dataflow epochs of one hour since 1970-01-01 (what ts.io.parquet stamps)
    hours = [(int((t - dt.datetime(1970, 1, 1)) // H), [r]) for r in recs for t in [r[1]]]
    src = flow.source(ts.io.from_batches(hours))
    pat = Pattern.begin("a").where(lambda e: e[2] == "a").followed_by("b").where(lambda e: e[2] == "b").within(H)
    out = cep(flow, src, pat, key=operator.itemgetter(0), time=operator.itemgetter(1), epoch=H,
              event_type=tuple[str, dt.datetime, str])  # fmt: skip
    matches, timeouts, late = out.collect()
    flow.run()
    assert [(m["a"][0][1], m["b"][0][1]) for _, (_, m) in matches.items] == [(recs[0][1], recs[2][1])]
    # a and b 55 minutes apart, a window of 50: the partial match times out at 01:00, when
    # the watermark of the first hour (the end of epoch 0:00-1:00) reaches it
    flow = ts.Dataflow("dt2")
    src = flow.source(ts.io.from_batches(hours))
    pat2 = attrs.evolve(pat, window=dt.timedelta(minutes=50))
    out = cep(flow, src, pat2, key=operator.itemgetter(0), time=operator.itemgetter(1), epoch=H,
              event_type=tuple[str, dt.datetime, str])  # fmt: skip
    matches, timeouts, late = out.collect()
    flow.run()
    assert matches.items == [] and [(t, to.timeout_time) for t, (_, to) in timeouts.items] == [
        (hours[0][0], t0 + 60 * MINUTE)
    ]
    # an aware datetime where naive ones are expected: a clear error
    flow = ts.Dataflow("dt3")
    src = flow.source(ts.io.from_batches([(hours[0][0], [("k", recs[0][1].replace(tzinfo=dt.timezone.utc), "a")])]))
    cep(flow, src, pat, key=operator.itemgetter(0), time=operator.itemgetter(1), epoch=H,
        event_type=tuple[str, dt.datetime, str])  # fmt: skip
    with pytest.raises(ConfigurationError, match="naive and UTC-aware"):
        flow.run()
