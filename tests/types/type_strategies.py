"""Hypothesis strategies of *state types* (not values): nested lists, dicts, sets,
Optionals, tuples, tracked containers, attrs classes and TypedDicts made on the fly."""

import datetime as dt
import enum
import itertools
from typing import Any, NotRequired, Optional, TypedDict

import attrs
from hypothesis import strategies as st

from tstate.types import Array, Map


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 30000


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


SCALARS = [int, float, str, bytes, bool, type(None), dt.datetime, dt.date, Color, Mode, int | str]
HASHABLE_SCALARS = [int, str, bytes, bool, dt.date, Color, Mode]

_names = itertools.count()


def make_struct(field_types: list[Any], frozen: bool = False) -> type:
    """An attrs class with fields ``f0, f1, ...`` of the given types."""
    return attrs.make_class(
        f"S{next(_names)}",
        {f"f{i}": attrs.field(type=t) for i, t in enumerate(field_types)},
        frozen=frozen,
    )


def make_record(field_types: list[Any]) -> type:
    """A TypedDict with keys ``k0, k1, ...`` of the given types; the last one may be
    absent (``NotRequired``) when there are several."""
    fields = {f"k{i}": t for i, t in enumerate(field_types)}
    if len(field_types) > 1:
        last = f"k{len(field_types) - 1}"
        fields[last] = NotRequired[fields[last]]
    return TypedDict(f"R{next(_names)}", fields)  # type: ignore[operator]


_hashable_base = st.sampled_from(HASHABLE_SCALARS)
#: Types that can be set elements and dict keys.
HASHABLE_TYPES = st.one_of(
    _hashable_base,
    st.tuples(_hashable_base, _hashable_base).map(lambda ab: tuple[ab[0], ab[1]]),
    _hashable_base.map(lambda t: tuple[t, ...]),
    _hashable_base.map(lambda t: frozenset[t]),
    st.lists(_hashable_base, min_size=1, max_size=3).map(lambda ts: make_struct(ts, frozen=True)),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        children.map(lambda t: list[t]),
        children.map(lambda t: dict[str, t]),
        st.tuples(HASHABLE_TYPES, children).map(lambda kv: dict[kv[0], kv[1]]),
        children.map(lambda t: Optional[t]),
        children.map(lambda t: tuple[t, ...]),
        st.tuples(children, children).map(lambda ab: tuple[ab[0], ab[1]]),
        HASHABLE_TYPES.map(lambda t: set[t]),
        HASHABLE_TYPES.map(lambda t: frozenset[t]),
        children.map(lambda t: Array[t]),
        st.tuples(HASHABLE_TYPES, children).map(lambda kv: Map[kv[0], kv[1]]),
        st.lists(children, min_size=1, max_size=4).map(make_struct),
        st.lists(children, min_size=1, max_size=4).map(make_record),
    )


_STATE_TYPES = st.recursive(st.sampled_from(SCALARS) | HASHABLE_TYPES, _extend, max_leaves=6)


def state_types() -> st.SearchStrategy[Any]:
    """Arbitrary supported state types, nested."""
    return _STATE_TYPES
