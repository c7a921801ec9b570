"""Timestamps: the product partial order, its lexicographic linear extension, vectors."""

from __future__ import annotations

import doctest
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstate.progress.timestamp as timestamp_mod
from tstate.progress.timestamp import (
    TIME_MAX,
    Product,
    depth,
    from_vector,
    less_equal,
    less_than,
    minimum,
    to_vector,
)

from tests.progress.strategies import any_coords, depths, small_coords, times, vec_le, vec_to_time, vectors


@st.composite
def same_depth_times(draw, n: int, coords=small_coords):
    d = draw(depths)
    return [draw(times(d, coords)) for _ in range(n)]


@st.composite
def chains(draw):
    """``a <= b <= c`` built by adding non-negative offsets, plus their depth."""
    d = draw(depths)
    a = draw(vectors(d))
    b = tuple(x + draw(small_coords) for x in a)
    c = tuple(x + draw(small_coords) for x in b)
    return d, a, b, c


# -- the partial order ---------------------------------------------------------------


@given(same_depth_times(2, any_coords))
def test_less_equal_is_the_coordinatewise_order(ts):
    a, b = ts
    va, vb = to_vector(a), to_vector(b)
    assert less_equal(a, b) == vec_le(va, vb)
    assert less_than(a, b) == (vec_le(va, vb) and va != vb)
    if type(a) is Product:
        assert a.less_equal(b) == less_equal(a, b)


@given(depths.flatmap(lambda d: times(d, any_coords)))
def test_reflexive(t):
    assert less_equal(t, t)
    assert not less_than(t, t)


@given(same_depth_times(2))
def test_antisymmetric(ts):
    a, b = ts
    if less_equal(a, b) and less_equal(b, a):
        assert a == b
    # strict order is asymmetric
    assert not (less_than(a, b) and less_than(b, a))


@given(same_depth_times(3))
def test_transitive_random_triples(ts):
    a, b, c = ts
    if less_equal(a, b) and less_equal(b, c):
        assert less_equal(a, c)
    if less_than(a, b) and less_equal(b, c):
        assert less_than(a, c)


@given(chains())
def test_transitive_chains(chain):
    _, a, b, c = chain
    ta, tb, tc = (vec_to_time(v) for v in (a, b, c))
    assert less_equal(ta, tb) and less_equal(tb, tc) and less_equal(ta, tc)
    assert less_than(ta, tc) == (a != c)


def test_incomparable_products():
    assert not less_equal(Product(1, 2), Product(2, 1))
    assert not less_equal(Product(2, 1), Product(1, 2))
    assert less_equal(Product(1, 1), Product(2, 1))
    assert not less_equal(Product(Product(0, 5), 0), Product(Product(1, 4), 9))
    assert less_than(Product(Product(0, 4), 0), Product(Product(1, 4), 9))


# -- the lexicographic order is a linear extension -------------------------------------


@given(same_depth_times(2, any_coords))
def test_lexicographic_order_is_total_and_extends_the_partial_order(ts):
    a, b = ts
    va, vb = to_vector(a), to_vector(b)
    # Python's comparison on times is exactly tuple order on the vectors
    assert (a < b) == (va < vb)
    assert (a <= b) == (va <= vb)
    assert (a == b) == (va == vb)
    # total: exactly one of <, ==, >
    assert [a < b, a == b, a > b].count(True) == 1
    # linear extension
    if less_equal(a, b):
        assert a <= b
    if less_than(a, b):
        assert a < b


@given(same_depth_times(6))
def test_sorted_never_puts_a_larger_time_first(ts):
    s = sorted(ts)
    for i, j in itertools.combinations(range(len(s)), 2):
        assert not less_than(s[j], s[i])


# -- vectors, depth, minimum --------------------------------------------------------------


@given(depths.flatmap(lambda d: vectors(d, any_coords)))
def test_vector_round_trip(v):
    t = from_vector(v)
    assert t == vec_to_time(v)
    assert to_vector(t) == v
    assert from_vector(list(v)) == t
    assert depth(t) == len(v) - 1
    assert hash(t) == hash(vec_to_time(v))


@given(depths.flatmap(lambda d: times(d, any_coords)))
def test_time_round_trip(t):
    assert from_vector(to_vector(t)) == t


def test_to_vector_examples():
    assert to_vector(7) == (7,)
    assert to_vector(Product(Product(1, 2), 3)) == (1, 2, 3)
    assert from_vector((1, 2, 3)) == Product(Product(1, 2), 3)
    assert from_vector([4]) == 4
    assert depth(5) == 0 and depth(Product(5, 0)) == 1 and depth(Product(Product(0, 0), 0)) == 2


@pytest.mark.parametrize("d", range(5))
def test_minimum_shape(d):
    m = minimum(d)
    assert depth(m) == d
    assert to_vector(m) == (0,) * (d + 1)


@given(depths.flatmap(lambda d: st.tuples(st.just(d), times(d, any_coords))))
def test_minimum_is_least(dt):
    d, t = dt
    assert less_equal(minimum(d), t)
    assert minimum(d) <= t
    assert less_equal(t, from_vector((TIME_MAX,) * (d + 1)))


def test_doctests():
    assert doctest.testmod(timestamp_mod).failed == 0
