"""ChangeBatch against a dict reference on random interleavings of its operations."""

from __future__ import annotations

import doctest
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import tstate.progress.change_batch as change_batch_mod
from tstate.progress.change_batch import ChangeBatch
from tstate.progress.timestamp import Product

from tests.progress.strategies import times

deltas = st.integers(min_value=-3, max_value=3)
#: A strategy of times of one kind per example: ints (few or many distinct) or products.
time_kinds = st.sampled_from(
    [
        st.integers(0, 3),
        st.integers(0, 40),
        times(1),
        times(2, st.integers(0, 2)),
    ]
)


def consolidated(ref: Counter) -> list[tuple[Any, int]]:
    return sorted(((t, d) for t, d in ref.items() if d), key=lambda p: p[0])


def ops(ts: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    update = st.tuples(st.just("update"), ts, deltas)
    extend = st.tuples(st.just("extend"), st.lists(st.tuples(ts, deltas), max_size=40))
    reads = st.sampled_from(
        [("compact",), ("is_empty",), ("len",), ("iter",), ("drain",), ("repr",)]
    )
    # updates dominate, so that batches grow past the automatic compaction threshold
    return st.lists(st.one_of(update, update, update, extend, reads), max_size=150)


def check(b: ChangeBatch, ref: Counter) -> None:
    expected = consolidated(ref)
    assert list(b) == expected
    assert len(b) == len(expected)
    assert b.is_empty() == (not expected)


@given(st.data())
def test_matches_counter_reference(data):
    ts = data.draw(time_kinds)
    initial = data.draw(st.lists(st.tuples(ts, deltas), max_size=40))
    b = ChangeBatch(initial)
    ref: Counter = Counter()
    for t, d in initial:
        ref[t] += d
    distinct = {t for t, _ in initial}
    for op in data.draw(ops(ts)):
        kind = op[0]
        if kind == "update":
            b.update(op[1], op[2])
            ref[op[1]] += op[2]
            distinct.add(op[1])
        elif kind == "extend":
            b.extend(op[1])
            for t, d in op[1]:
                ref[t] += d
                distinct.add(t)
        elif kind == "compact":
            b.compact()
            check(b, ref)
        elif kind == "is_empty":
            assert b.is_empty() == (not consolidated(ref))
        elif kind == "len":
            assert len(b) == len(consolidated(ref))
        elif kind == "iter":
            assert list(b) == consolidated(ref)
            assert list(b) == consolidated(ref)  # iterating does not consume
        elif kind == "drain":
            assert b.drain() == consolidated(ref)
            ref.clear()
            distinct.clear()
            assert b.is_empty() and len(b) == 0 and list(b) == [] and b.drain() == []
        elif kind == "repr":
            assert repr(b) == f"ChangeBatch({consolidated(ref)!r})"
        # Laziness must not mean unbounded growth: the buffer is compacted once it
        # is twice as long as the last consolidated prefix (and longer than 32).
        assert len(b._updates) <= max(40, 2 * len(distinct) + 1)
    check(b, ref)
    assert b.drain() == consolidated(ref)
    assert b.is_empty()


@given(st.data())
def test_long_runs_of_updates_without_reads(data):
    """Many updates (and extends) between two reads: the automatic compactions
    inside ``update``/``extend`` must not lose or double anything."""
    ts = data.draw(time_kinds)
    b = ChangeBatch()
    ref: Counter = Counter()
    update = st.tuples(ts, deltas)
    for _ in range(data.draw(st.integers(1, 3))):
        n = data.draw(st.integers(0, 150))
        run: list[Any] = data.draw(st.lists(update, min_size=n, max_size=n))
        for k, more in data.draw(st.lists(st.tuples(st.integers(0, n), st.lists(update, max_size=50)), max_size=4)):
            run.insert(k, more)
        for op in run:
            if isinstance(op, tuple):
                b.update(*op)
                ref[op[0]] += op[1]
            else:
                b.extend(op)
                for t, d in op:
                    ref[t] += d
        check(b, ref)
    assert b.drain() == consolidated(ref)


@given(st.data())
def test_iteration_during_updates_is_a_snapshot(data):
    ts = data.draw(time_kinds)
    b = ChangeBatch()
    ref: Counter = Counter()
    for t, d in data.draw(st.lists(st.tuples(ts, deltas), min_size=1, max_size=60)):
        it = iter(b)
        before = consolidated(ref)
        b.update(t, d)
        ref[t] += d
        assert list(it) == before
    assert b.drain() == consolidated(ref)


@given(st.lists(st.tuples(st.integers(0, 5), deltas), max_size=80))
def test_canceling_updates_leave_it_empty(updates):
    b = ChangeBatch()
    for t, d in updates:
        b.update(t, d)
    for t, d in updates:
        b.update(t, -d)
    assert b.is_empty()
    assert len(b) == 0
    assert b.drain() == []


def test_small_cases():
    b = ChangeBatch()
    assert b.is_empty() and len(b) == 0 and b.drain() == []
    b.update(3, 0)
    assert b.is_empty() and list(b) == []
    b.update(3, 1)
    assert list(b) == [(3, 1)]
    b.compact()
    b.compact()
    assert list(b) == [(3, 1)]
    b.update(3, -1)
    assert b.is_empty()
    b = ChangeBatch([(Product(1, 2), 1), (Product(0, 5), 2), (Product(1, 2), 1)])
    assert b.drain() == [(Product(0, 5), 2), (Product(1, 2), 2)]
    assert doctest.testmod(change_batch_mod).failed == 0


def test_many_updates_of_one_time_stay_compact():
    b = ChangeBatch()
    for i in range(10_000):
        b.update(7, 1 if i % 2 == 0 else -1)
        assert len(b._updates) <= 34
    assert b.is_empty()
