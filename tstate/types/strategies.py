"""Hypothesis strategies for declared state types, for property tests.

:func:`from_type` generates arbitrary values of a state type, following its
:class:`~tstate.types.schema.Schema`: every value it draws passes the codec's check
and round-trips through it.  Sizes are bounded (``max_size`` items per container);
ints stay in the int64 range (so that they also fit an Arrow column), floats are
never NaN (NaN != NaN would break equality), datetimes are naive, and tracked
containers come fresh (never marked clean).  hypothesis is imported only when
:func:`from_type` is called, so the library does not depend on it.

>>> from hypothesis import given
>>> from tstate.types.codec import StateCodec
>>> codec = StateCodec(dict[str, list[int]])
>>> @given(from_type(dict[str, list[int]]))
... def test_round_trip(value):
...     assert codec.decode(codec.encode(value)) == value
>>> test_round_trip()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tstate.types.schema import Kind, Schema, analyse
from tstate.types.tracked import Array, Map

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["from_type"]

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def from_type(tp: Any, *, max_size: int = 5) -> SearchStrategy[Any]:
    """A strategy drawing values of the declared state type ``tp`` (or of a
    :class:`~tstate.types.schema.Schema` with its Python types)."""
    schema = tp if isinstance(tp, Schema) else analyse(tp)
    return _strategy(schema, max_size)


def _strategy(s: Schema, n: int) -> SearchStrategy[Any]:
    from hypothesis import strategies as st

    k = s.kind
    if k is Kind.INT:
        return st.integers(INT64_MIN, INT64_MAX)
    if k is Kind.FLOAT:
        return st.floats(allow_nan=False)
    if k is Kind.STR:
        return st.text(max_size=n * 4)
    if k is Kind.BYTES:
        return st.binary(max_size=n * 4)
    if k is Kind.BOOL:
        return st.booleans()
    if k is Kind.NONE:
        return st.none()
    if k is Kind.DATETIME:
        return st.datetimes()
    if k is Kind.DATE:
        return st.dates()
    if k is Kind.ENUM:
        return st.sampled_from(list(s.py_type))
    if k is Kind.OPTIONAL:
        return st.none() | _strategy(s.args[0], n)
    if k is Kind.UNION:
        return st.one_of([_strategy(a, n) for a in s.args])
    subs = [_strategy(a, n) for a in s.args]
    if k is Kind.LIST:
        return st.lists(subs[0], max_size=n)
    if k is Kind.ARRAY:
        return st.lists(subs[0], max_size=n).map(Array)
    if k is Kind.TUPLE:
        return st.lists(subs[0], max_size=n).map(tuple)
    if k is Kind.FIXED_TUPLE:
        return st.tuples(*subs)
    if k is Kind.SET:
        return st.sets(subs[0], max_size=n)
    if k is Kind.FROZENSET:
        return st.frozensets(subs[0], max_size=n)
    if k is Kind.DICT:
        return st.dictionaries(subs[0], subs[1], max_size=n)
    if k is Kind.MAP:
        return st.dictionaries(subs[0], subs[1], max_size=n).map(Map)
    if k is Kind.STRUCT:
        return st.builds(s.py_type, **{f.alias: _strategy(f.schema, n) for f in s.fields})
    if k is Kind.RECORD:
        return st.fixed_dictionaries(
            {f.name: _strategy(f.schema, n) for f in s.fields if not f.has_default},
            optional={f.name: _strategy(f.schema, n) for f in s.fields if f.has_default},
        )
    raise AssertionError(f"no strategy for {k}")  # pragma: no cover
