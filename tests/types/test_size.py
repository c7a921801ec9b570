"""estimated_size: exact for small values without datetimes, within 2x otherwise."""

import datetime as dt
from typing import Any

from attrs import define, field
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.types.type_strategies import state_types
from tstate.types import Array, Map, StateCodec, analyse, estimated_size
from tstate.types.schema import Kind
from tstate.types.strategies import from_type


def _has(tp: Any, *kinds: Kind) -> bool:
    def walk(s: Any) -> bool:
        return s.kind in kinds or any(walk(a) for a in s.args) or any(walk(f.schema) for f in s.fields)

    return walk(analyse(tp))


def _union_keys(tp: Any) -> bool:
    """Dicts whose declared key is not str but may hold only str keys at runtime."""

    def walk(s: Any) -> bool:
        if s.kind in (Kind.DICT, Kind.MAP) and s.args[0].kind is not Kind.STR and _has_str(s.args[0]):
            return True
        return any(walk(a) for a in s.args) or any(walk(f.schema) for f in s.fields)

    def _has_str(s: Any) -> bool:
        return s.kind is Kind.STR or any(_has_str(a) for a in s.args)

    return walk(analyse(tp))


@given(st.data())
def test_exact_for_small_values(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    assume(not _has(tp, Kind.DATETIME) and not _union_keys(tp))
    value = data.draw(from_type(tp), label="value")
    assert estimated_size(value) == len(StateCodec(tp).encode(value))


@given(st.data())
def test_within_a_factor_of_two(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    value = data.draw(from_type(tp), label="value")
    size = len(StateCodec(tp).encode(value))
    assert size / 2 <= estimated_size(value) <= size * 2


@define
class Point:
    x: int
    y: float
    name: str
    tags: list[int] = field(factory=list)


def test_large_containers_are_sampled_but_close() -> None:
    values = [
        list(range(100_000)),
        [Point(i, i / 3, f"p{i}", [i] * (i % 7)) for i in range(5_000)],
        {f"k{i}": [i, i * 1000] for i in range(10_000)},
        {(i, str(i)): float(i) for i in range(3_000)},
        set(range(0, 10**9, 10**5)),
        Map({i: "x" * (i % 50) for i in range(2_000)}),
        Array([dt.datetime(2020, 1, 1, 0, 0, 0, i + 1) for i in range(1_000)]),
    ]
    types_ = [
        list[int], list[Point], dict[str, list[int]], dict[tuple[int, str], float], set[int], Map[int, str],
        Array[dt.datetime],
    ]
    for value, tp in zip(values, types_):
        size = len(StateCodec(tp).encode(value))
        assert 0.8 * size <= estimated_size(value) <= 1.25 * size, tp


def test_scalars_and_unknowns() -> None:
    for v in (0, 127, 128, -32, -33, 255, -129, 65535, -32769, 2**32 - 1, -(2**31) - 1, 2**40, 2**64 - 1):
        assert estimated_size(v) == len(StateCodec(int).encode(v)), v
    for n in (0, 31, 32, 255, 256, 65535, 65536):
        assert estimated_size("a" * n) == len(StateCodec(str).encode("a" * n))
        assert estimated_size(b"a" * n) == len(StateCodec(bytes).encode(b"a" * n))
        assert estimated_size(list(range(n))) == len(StateCodec(list[int]).encode(list(range(n)))) or n > 64
    assert estimated_size("é✓") == len(StateCodec(str).encode("é✓"))
    aware = dt.datetime(2020, 1, 1, 1, 2, 3, 4, tzinfo=dt.timezone.utc)
    assert estimated_size(aware) == len(StateCodec(dt.datetime).encode(aware))
    assert estimated_size(object()) == 16
