"""The round an engine running iterate scopes in rounds processes next
(:mod:`tstate.progress.rounds`), against a plain reference model: the minimal pending
times by brute force over pairs, the frontier by its definition."""

from __future__ import annotations

from typing import Any, Optional

from hypothesis import given
from hypothesis import strategies as st

from tstate.progress.rounds import next_round, round_frontier
from tstate.progress.timestamp import Product

times = st.builds(Product, st.integers(0, 3), st.integers(0, 4))


def leq(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1]


def brute_min(ts: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return {t for t in ts if not any(u != t and leq(u, t) for u in ts)}


def reference(
    loops: list[list[int]], pending: dict[int, set[Any]], timers: dict[int, dict[int, list[Any]]], hi: Optional[int]
) -> Optional[tuple[tuple[int, ...], dict[int, set[tuple[int, int]]], dict[int, set[int]]]]:
    active, fronts, due = [], {}, {}
    for i, lp in enumerate(loops):
        every = {(t.outer, t.inner) for b in lp for t in pending[b]}
        every |= {(t.outer, t.inner) for b in lp for ts in timers[b].values() for t in ts}
        ready = {t for t in every if hi is None or t[0] < hi}
        if not ready:
            continue
        active.append(i)
        m = brute_min(ready)
        cand = (every - m) | {(o, n + 1) for o, n in m} | ({(hi, 0)} if hi is not None else set())
        front = brute_min(cand)
        for b in lp:
            fronts[b] = front
            due[b] = {bn for bn, ts in timers[b].items() if any(not any(leq(f, (t.outer, t.inner)) for f in front) for t in ts)}
    return (tuple(active), fronts, due) if active else None


@st.composite
def rounds(draw: Any) -> Any:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    loops, b = [], 0
    for n in sizes:
        loops.append(list(range(b, b + n)))
        b += n
    pending = {x: draw(st.sets(times, max_size=4)) for x in range(b)}
    timers = {x: draw(st.dictionaries(st.integers(0, 3), st.lists(times, min_size=1, max_size=3), max_size=3)) for x in range(b)}
    hi = draw(st.one_of(st.none(), st.integers(0, 4)))
    return loops, pending, timers, hi


@given(rounds())
def test_next_round_is_the_reference_models(case: Any) -> None:
    loops, pending, timers, hi = case
    got = next_round(loops, pending, timers, hi)
    want = reference(loops, pending, timers, hi)
    if want is None:
        assert got is None
        return
    assert got is not None
    active, fronts, due = want
    assert got.active == active
    assert {b: {(t.outer, t.inner) for t in f} for b, f in got.frontier.items()} == fronts
    assert {b: set(d) for b, d in got.due.items()} == due


@given(st.sets(times, min_size=1, max_size=6), st.one_of(st.none(), st.integers(0, 4)))
def test_a_round_frontier_is_past_the_times_it_processes_and_before_the_rest(pending: set[Product], hi: Optional[int]) -> None:
    from tstate.progress.rounds import minimal, passed

    ready = minimal(t for t in pending if hi is None or t.outer < hi)
    front = round_frontier(pending, ready, hi)
    assert all(passed(front, m) for m in ready)  # the processed times are complete after the round
    assert not any(passed(front, t) for t in pending - set(ready))  # the others are not
