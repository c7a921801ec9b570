"""Antichain and MutableAntichain against brute-force definitions."""

from __future__ import annotations

import doctest
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstate.progress.frontier as frontier_mod
from tstate.errors import ProgressError
from tstate.progress.frontier import Antichain, MutableAntichain, minimal_elements
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import Product, less_equal, less_than

from tests.progress.strategies import brute_minimal, times

#: One kind of time per example: ints, products, nested products (small coordinates,
#: so that comparable, incomparable and equal times are all frequent).
time_kinds = st.sampled_from(
    [
        st.integers(0, 6),
        times(1, st.integers(0, 4)),
        times(2, st.integers(0, 2)),
        times(3, st.integers(0, 1)),
    ]
)


def minimal(items: Any) -> set[Any]:
    return brute_minimal(items, less_equal)


@st.composite
def multisets(draw, min_size: int = 0):
    ts = draw(time_kinds)
    return ts, draw(st.lists(ts, min_size=min_size, max_size=12))


# -- Antichain --------------------------------------------------------------------------


@given(multisets(), st.data())
def test_antichain_is_the_minimal_elements(case, data):
    ts, items = case
    a = Antichain(items)
    els = a.elements
    assert set(els) == minimal(items)
    assert len(els) == len(set(els)) == len(a)
    assert list(els) == sorted(els)
    assert list(a) == list(els)
    assert bool(a) == (not a.is_empty()) == bool(items)
    for x in els:
        for y in els:
            assert x == y or not less_equal(x, y)
    assert minimal_elements(items) == sorted(minimal(items))
    # independent of insertion order and multiplicity
    perm = data.draw(st.permutations(items))
    b = Antichain(perm + perm[: len(perm) // 2])
    assert a == b and hash(a) == hash(b)
    assert a == Antichain._from_minimal(reversed(els))
    assert (a == Antichain(items[1:])) == (set(els) == minimal(items[1:]))
    assert a != list(els)


@given(multisets(), st.data())
def test_antichain_queries_match_definitions(case, data):
    ts, items = case
    a = Antichain(items)
    probes = data.draw(st.lists(ts, min_size=1, max_size=8)) + items
    for t in probes:
        assert a.less_equal(t) == any(less_equal(e, t) for e in items)
        assert a.less_than(t) == any(less_than(e, t) for e in items)
        # as a frontier: t is complete iff not a.less_equal(t)
        if t in items:
            assert a.less_equal(t)


@given(multisets(), st.data())
def test_dominates(case, data):
    ts, items = case
    other = data.draw(st.lists(ts, max_size=8))
    a, b = Antichain(items), Antichain(other)
    expected = all(any(less_equal(x, y) for x in items) for y in other)
    assert a.dominates(b) == expected
    assert a.dominates(a) and a.dominates(Antichain())
    assert Antichain().dominates(b) == (not other)
    # semantics: whatever b allows, a allows too
    probes = data.draw(st.lists(ts, max_size=8)) + other + items
    if a.dominates(b):
        for t in probes:
            if b.less_equal(t):
                assert a.less_equal(t)
    # joining: Antichain(items + other) is dominated by... and dominates both sides
    join = Antichain(items + other)
    assert join.dominates(a) and join.dominates(b)


@given(multisets(), st.data())
def test_with_element(case, data):
    ts, items = case
    t = data.draw(ts)
    a = Antichain(items)
    before = a.elements
    b = a.with_element(t)
    assert b == Antichain(items + [t])
    assert set(b.elements) == minimal(items + [t])
    assert a.elements == before  # immutable
    assert (b == a) == a.less_equal(t)


def test_antichain_examples():
    a = Antichain([Product(1, 2), Product(2, 1), Product(2, 2)])
    assert list(a) == [Product(1, 2), Product(2, 1)]
    assert a.less_equal(Product(2, 2)) and not a.less_than(Product(2, 1))
    assert not a.less_equal(Product(1, 1))
    assert Antichain([3, 1, 2]).elements == (1,)
    e = Antichain()
    assert e.is_empty() and not e and len(e) == 0 and not e.less_equal(0)
    assert repr(Antichain([5])) == "Antichain([5])"
    assert doctest.testmod(frontier_mod).failed == 0


def test_antichain_of_path_summaries():
    """The docstring: an antichain of times *or path summaries*."""
    s_inner = PathSummary(1, 1, (0, 1))
    s_outer = PathSummary(1, 1, (1, 0))
    s_both = PathSummary(1, 1, (1, 1))
    a = Antichain([s_both, s_inner, s_outer])
    assert set(a) == {s_inner, s_outer}
    assert a.less_equal(s_both) and a.less_than(s_both) and not a.less_equal(PathSummary.identity(1))
    assert a.with_element(PathSummary.identity(1)) == Antichain([PathSummary.identity(1)])


# -- MutableAntichain ---------------------------------------------------------------------


@st.composite
def update_batches(draw):
    """Batches of ``(time, delta)`` whose counts are never negative *after* a batch
    (but may be transiently negative inside one: the batch is shuffled)."""
    ts = draw(time_kinds)
    counts: Counter = Counter()
    batches = []
    for _ in range(draw(st.integers(1, 12))):
        batch = []
        for t, d in draw(st.lists(st.tuples(ts, st.integers(-3, 3)), max_size=8)):
            d = max(d, -counts[t])  # keep the running count non-negative
            counts[t] += d
            batch.append((t, d))
        if draw(st.booleans()):  # sometimes retract something that is held
            held = sorted(t for t, c in counts.items() if c > 0)
            if held:
                t = draw(st.sampled_from(held))
                d = -draw(st.integers(1, counts[t]))
                counts[t] += d
                batch.append((t, d))
        batches.append(draw(st.permutations(batch)))
    return ts, batches


def support(counts: Counter) -> set[Any]:
    return {t for t, c in counts.items() if c > 0}


@given(update_batches(), st.data())
def test_mutable_antichain_matches_brute_force(case, data):
    ts, batches = case
    m = MutableAntichain()
    counts: Counter = Counter()
    for batch in batches:
        old = minimal(support(counts))
        for t, d in batch:
            counts[t] += d
        assert all(c >= 0 for c in counts.values())
        new = minimal(support(counts))
        changes = m.update_iter(iter(batch))  # any iterable
        # exactly the symmetric difference, sorted by time
        expected = sorted([(t, -1) for t in old - new] + [(t, 1) for t in new - old], key=lambda p: p[0])
        assert changes == expected
        assert set(m.frontier) == new
        assert m.frontier == Antichain(support(counts))
        assert sorted(m.elements()) == sorted(new)
        assert m.is_empty() == (not new)
        for t in data.draw(st.lists(ts, max_size=4)) + list(counts):
            assert m.count_for(t) == counts[t]
            assert m.less_equal(t) == any(less_equal(e, t) for e in support(counts))
            assert m.less_than(t) == any(less_than(e, t) for e in support(counts))
    # retracting everything empties the frontier
    rest = [(t, -c) for t, c in counts.items() if c]
    old = minimal(support(counts))
    assert m.update_iter(rest) == sorted([(t, -1) for t in old], key=lambda p: p[0])
    assert m.is_empty() and m.frontier == Antichain()


@given(update_batches())
def test_mutable_antichain_constructor(case):
    _, batches = case
    flat = [u for batch in batches for u in batch]
    counts: Counter = Counter()
    for t, d in flat:
        counts[t] += d
    m = MutableAntichain(flat)
    assert set(m.frontier) == minimal(support(counts))


@given(update_batches(), st.data())
def test_negative_counts_raise(case, data):
    ts, batches = case
    m = MutableAntichain()
    counts: Counter = Counter()
    for batch in batches:
        m.update_iter(batch)
        for t, d in batch:
            counts[t] += d
    # drive one time (held or not, in the frontier or not) below zero
    t = data.draw(st.one_of(ts, st.sampled_from(sorted(counts)) if counts else ts))
    extra = data.draw(st.lists(st.tuples(ts, st.integers(0, 3)), max_size=3))
    bad = extra + [(t, -(counts[t] + data.draw(st.integers(1, 3))))]
    # the positive extras must not mask the offending decrement
    bad = [(u, d) for u, d in bad if u != t or d < 0]
    with pytest.raises(ProgressError):
        m.update_iter(data.draw(st.permutations(bad)))


def test_negative_count_examples():
    with pytest.raises(ProgressError):
        MutableAntichain().update_iter([(5, -1)])
    m = MutableAntichain([(3, 1)])
    with pytest.raises(ProgressError):
        m.update_iter([(5, -1)])  # 5 is not in the frontier
    m = MutableAntichain([(3, 1), (5, 1)])
    with pytest.raises(ProgressError):
        m.update_iter([(5, -2)])
    # transiently negative inside a batch is fine
    m = MutableAntichain([(3, 1)])
    assert m.update_iter([(3, -1), (3, -1), (3, 2)]) == []
    assert m.update_iter([(4, -1), (4, 1)]) == []
    assert m.frontier == Antichain([3])


def test_mutable_antichain_examples():
    m = MutableAntichain()
    assert m.update_iter([(3, 1), (5, 1)]) == [(3, 1)]
    assert m.update_iter([(3, -1)]) == [(3, -1), (5, 1)]
    assert m.update_iter([(5, 0)]) == []
    m = MutableAntichain()
    assert m.update_iter([(Product(1, 2), 1), (Product(2, 1), 1)]) == [(Product(1, 2), 1), (Product(2, 1), 1)]
    assert m.update_iter([(Product(1, 1), 1)]) == [(Product(1, 1), 1), (Product(1, 2), -1), (Product(2, 1), -1)]
    assert m.update_iter([(Product(1, 1), -1)]) == [(Product(1, 1), -1), (Product(1, 2), 1), (Product(2, 1), 1)]
    assert "MutableAntichain" in repr(m)
