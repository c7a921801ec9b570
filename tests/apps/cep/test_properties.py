"""Property tests: the NFA engine agrees with the brute-force reference matcher on
random patterns and short streams -- the same matches, emitted by the same calls in the
same order, and the same timed-out partial matches (compared as sets: the engine, like
Flink, reports a partial match once per automaton state it waits in) -- and keeps its
shared buffer consistent."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, note

from apps.cep import Matcher
from apps.cep.reference import reference_run
from tests.apps.cep.helpers import check_state, drive, mkey, results, timeout_set
from tests.apps.cep.strategies import pattern_specs, streams


def _end(stream) -> int:
    return (stream[-1][1] if stream else 0) + 10


@given(pattern_specs(), streams())
def test_nfa_equals_reference(spec, stream) -> None:
    note(repr(spec))
    pattern = spec.build()

    def between(m, st):
        check_state(st)
        return st

    got = drive(pattern, stream, _end(stream), between=between)
    want = reference_run(pattern, stream, _end(stream))
    assert results(got) == results(want)
    assert timeout_set(got) == timeout_set(want)


@given(pattern_specs(), streams())
def test_process_alone_equals_reference(spec, stream) -> None:
    """Without advance_time between events, process() applies the expiry itself: the
    same matches in the same order; the queued timeouts come with the final call."""
    note(repr(spec))
    pattern = spec.build()
    got = drive(pattern, stream, _end(stream), advance=False)
    want = reference_run(pattern, stream, _end(stream))
    assert [mkey(m) for _, m in got.matches] == [mkey(m) for _, m in want.matches]
    assert {(mkey(t.partial), t.timeout_time) for _, t in got.timeouts} == {
        (mkey(t.partial), t.timeout_time) for _, t in want.timeouts
    }


@given(pattern_specs(), streams())
def test_state_is_released(spec, stream) -> None:
    """With a window, once event time passes every window nothing is left behind."""
    pattern = spec.build()
    m = Matcher(pattern)
    st = m.new_state()
    for e, t in stream:
        m.advance_time(st, t)
        m.process(st, e, t)
        check_state(st)
    m.advance_time(st, _end(stream) + 10)
    check_state(st)
    if pattern.window is not None:
        assert st.is_empty() and not st.nodes and not st.events and not st.refs


@given(pattern_specs(), streams())
def test_reports_without_timeouts(spec, stream) -> None:
    """report_timeouts=False changes nothing but the timeouts."""
    pattern = spec.build()
    got = drive(Matcher(pattern, report_timeouts=False), stream, _end(stream))
    want = drive(pattern, stream, _end(stream))
    assert results(got) == results(want) and got.timeouts == []
    assert Counter(mkey(m) for _, m in got.matches) == Counter(
        mkey(m) for _, m in want.matches
    )
