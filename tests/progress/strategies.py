"""Hypothesis strategies and brute-force helpers shared by the progress tests.

Times are generated as coordinate vectors (outermost first) and turned into ``int`` /
nested :class:`Product` with :func:`from_vector`; the brute-force models below work on
the vectors directly so that they do not depend on the code under test.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from hypothesis import strategies as st

from tstate.progress.timestamp import TIME_MAX, Product

MAX_DEPTH = 3

#: Small coordinates (so that equal and comparable times are frequent).
small_coords = st.integers(min_value=0, max_value=4)
#: Coordinates over the whole range, biased to the small ones and to the top.
any_coords = st.one_of(
    small_coords,
    st.integers(min_value=0, max_value=TIME_MAX),
    st.integers(min_value=TIME_MAX - 3, max_value=TIME_MAX),
)


def vec_to_time(v: Sequence[int]) -> Any:
    """A coordinate vector as a time, built without the code under test."""
    t: Any = v[0]
    for x in v[1:]:
        t = Product(t, x)
    return t


def vectors(depth: int, coords: st.SearchStrategy[int] = small_coords) -> st.SearchStrategy[tuple[int, ...]]:
    return st.tuples(*([coords] * (depth + 1)))


def times(depth: int, coords: st.SearchStrategy[int] = small_coords) -> st.SearchStrategy[Any]:
    return vectors(depth, coords).map(vec_to_time)


depths = st.integers(min_value=0, max_value=MAX_DEPTH)


def vec_le(a: Sequence[int], b: Sequence[int]) -> bool:
    """The product partial order on vectors of equal length."""
    assert len(a) == len(b)
    return all(x <= y for x, y in zip(a, b))


def brute_minimal(items: Iterable[Any], le: Any) -> set[Any]:
    """The minimal elements of ``items`` under the partial order ``le`` (quadratic)."""
    s = set(items)
    return {t for t in s if not any(u != t and le(u, t) for u in s)}
