"""Shared helpers for the CEP tests: drive a Matcher like Flink's operator does and
render matches comparably."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from apps.cep import Match, Matcher, Pattern, TimedOut
from apps.cep.reference import RefResult


def drive(
    pattern: Pattern | Matcher,
    stream: Sequence[tuple[Any, Any]],
    end_time: Any = None,
    *,
    advance: bool = True,
    between: Callable[[Matcher, Any], Any] | None = None,
) -> RefResult:
    """Feed ``stream`` = [(event, ts)] to a fresh state: ``advance_time(ts)`` before
    each ``process`` (when ``advance``), ``advance_time(end_time)`` at the end.
    ``between(matcher, state)`` may replace the state between events (round trips)."""
    m = pattern if isinstance(pattern, Matcher) else Matcher(pattern)
    st = m.new_state()
    matches: list[tuple[tuple, Match]] = []
    timeouts: list[tuple[tuple, TimedOut]] = []
    for i, (e, t) in enumerate(stream):
        if between is not None:
            st = between(m, st)
        if advance:
            ms, tos = m.advance_time(st, t)
            matches += [(("advance", i), x) for x in ms]
            timeouts += [(("advance", i), x) for x in tos]
        matches += [(("event", i), x) for x in m.process(st, e, t)]
    if end_time is not None:
        if between is not None:
            st = between(m, st)
        ms, tos = m.advance_time(st, end_time)
        matches += [(("end",), x) for x in ms]
        timeouts += [(("end",), x) for x in tos]
    return RefResult(matches, timeouts)


def mkey(m: Match) -> tuple:
    """A hashable rendering of a match (stage -> events)."""
    return tuple((k, tuple(v)) for k, v in m.items())


def show(m: Match, sep: str = " ") -> str:
    """'a b1 c' -- the events of a match in order (events rendered with str)."""
    return sep.join(str(e) for e in m.events())


def results(r: RefResult) -> list[tuple[tuple, tuple]]:
    return [(step, mkey(m)) for step, m in r.matches]


def timeout_set(r: RefResult) -> set:
    return {(step, mkey(t.partial), t.timeout_time) for step, t in r.timeouts}


def check_state(st: Any) -> None:
    """The shared buffer's invariants: reference counts match the references, events
    are held exactly by their nodes, partial matches are ordered by start."""
    from collections import Counter

    refs: Counter = Counter()
    for r in st.runs:
        refs[r[1]] += 1
        assert st.nodes[r[1]][0] == r[4], "a run caches the wrong last event"
    for h in st.held:
        refs[h[0]] += 1
    for x in st.expired:
        refs[x[0]] += 1
    ev_refs: Counter = Counter()
    for nid, n in st.nodes.items():
        if n[2] >= 0:
            refs[n[2]] += 1
        ev_refs[n[0]] += 1
    for nid, n in st.nodes.items():
        assert n[3] == refs[nid], (
            f"node {nid}: refcount {n[3]}, referenced {refs[nid]} times"
        )
        assert n[3] > 0
    assert set(refs) <= set(st.nodes), "a reference to a freed node"
    assert dict(ev_refs) == st.refs, "event refcounts"
    assert set(st.events) == set(st.times) == set(st.refs)
    starts = [r[3] for r in st.runs]
    assert starts == sorted(starts), "runs not ordered by start"
