"""The two flight patterns: hand-checked scenarios, and the NFA engine against the
hand-written baseline on a slice of the real data."""

from __future__ import annotations

import datetime as dt
import os

import pytest

import apps
from apps.cep import Matcher
from apps.cep.baseline import CascadeBaseline, RecoveryBaseline
from apps.cep.flights import (
    DATA_PATH,
    Flight,
    delay_cascade,
    read_flights,
    recovery,
    time_minutes,
)

T0 = dt.datetime(2001, 1, 1)


def fl(minute: int, delay: int, origin: str = "ATL") -> Flight:
    return Flight(T0 + dt.timedelta(minutes=minute), delay, 500, origin, "ORD")


def run(pattern, flights: list[Flight], end: int | None = None) -> list[list[int]]:
    """Matches as lists of delays, keyed by origin, in emission order."""
    m = Matcher(pattern)
    states: dict = {}
    out = []
    for f in flights:
        st = states.setdefault(f.origin, m.new_state())
        t = time_minutes(f)
        out += m.advance_time(st, t)[0]
        out += m.process(st, f, t)
    if end is not None:
        for st in states.values():
            out += m.advance_time(st, end)[0]
    return [[f.delay for f in x.events()] for x in out]


def test_time_minutes() -> None:
    assert time_minutes(Flight(dt.datetime(1970, 1, 1, 1, 2), 0, 0, "A", "B")) == 62
    assert time_minutes(fl(5, 0)) - time_minutes(fl(0, 0)) == 5


def test_cascade() -> None:
    flights = [
        fl(0, 45),
        fl(10, 20),
        fl(20, 50),
        fl(30, 10),
        fl(40, 60),
        fl(50, 70),
        fl(60, 0),
    ]
    # 45 -> 50 -> 60: the first cascade (reported at its second rise); 60 -> 70 needs a
    # third departure, and everything up to 60 is consumed (skip past last event)
    assert run(delay_cascade(), flights) == [[45, 50, 60]]
    # not "each delayed more than the previous": no match
    assert run(delay_cascade(), [fl(0, 45), fl(10, 50), fl(20, 48), fl(30, 49)]) == []
    # a first departure with a delay of at most 30 starts nothing
    assert run(delay_cascade(), [fl(0, 30), fl(10, 50), fl(20, 60)]) == []


def test_cascade_window_and_keys() -> None:
    # the second rise comes 3 hours after the first departure: too late
    assert run(delay_cascade(), [fl(0, 45), fl(60, 50), fl(180, 60)]) == []
    assert run(delay_cascade(), [fl(0, 45), fl(60, 50), fl(179, 60)]) == [[45, 50, 60]]
    # keys are independent
    flights = [
        fl(0, 45, "A"),
        fl(1, 50, "B"),
        fl(2, 50, "A"),
        fl(3, 55, "B"),
        fl(4, 60, "A"),
    ]
    assert run(delay_cascade(), flights) == [[45, 50, 60]]


def test_cascade_earliest_start_wins() -> None:
    # 90 starts first and never rises twice: the cascade 40 -> 50 -> 60 that started
    # later is held back until 90's window closes, then reported
    flights = [fl(0, 90), fl(10, 40), fl(20, 50), fl(30, 60)]
    assert run(delay_cascade(), flights) == []
    assert run(delay_cascade(), flights, end=time_minutes(fl(180, 0))) == [[40, 50, 60]]


def test_recovery() -> None:
    flights = [
        fl(0, 90),
        fl(10, 20),
        fl(30, -3),
        fl(40, 70),
        fl(50, 80),
        fl(60, 0),
        fl(70, 65),
        fl(200, 0),
    ]
    # 90 recovers at -3; 70 is cancelled by 80 (another big delay), which recovers at 0;
    # 65 does not recover within 2 hours
    assert run(recovery(), flights) == [[90, -3], [80, 0]]
    assert run(recovery(), [fl(0, 61), fl(119, 0)]) == [[61, 0]]
    assert run(recovery(), [fl(0, 61), fl(120, 0)]) == []


def _compare(path: str, n: int | None) -> None:
    flights = read_flights(path, 0, n)
    times = [time_minutes(f) for f in flights]
    for pattern, cls in (
        (delay_cascade(), CascadeBaseline),
        (recovery(), RecoveryBaseline),
    ):
        for report in (False, True):
            m = Matcher(pattern, report_timeouts=report)
            nfa: dict = {}
            base: dict = {}
            got: dict = {}
            want: dict = {}
            for f, t in zip(flights, times):
                st = nfa.get(f.origin)
                if st is None:
                    st = nfa[f.origin] = m.new_state()
                    base[f.origin] = cls()
                got.setdefault(f.origin, []).extend(
                    x.to_dict() for x in m.process(st, f, t)
                )
                want.setdefault(f.origin, []).extend(base[f.origin].process(f, t))
            assert got == want
            assert sum(len(v) for v in got.values()) > 100


@pytest.mark.skipif(not os.path.exists(DATA_PATH), reason=f"{DATA_PATH} is absent")
def test_baseline_equals_nfa_on_real_data() -> None:
    """Rows 0..50000 of flights-3m.parquet, keyed by origin: the same matches, per key,
    in the same order (with and without timeout reporting)."""
    _compare(DATA_PATH, 50_000)


SAMPLE = os.path.join(os.path.dirname(apps.__file__), "data", "flights-sample.parquet")


@pytest.mark.skipif(not os.path.exists(SAMPLE), reason=f"{SAMPLE} is absent")
def test_baseline_equals_nfa_on_sample() -> None:
    """The sample shipped with the app (always there, also on CI)."""
    _compare(SAMPLE, None)
