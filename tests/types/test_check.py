"""The vector checker says exactly what the per-value checker says, for many values at
once: checked against the per-value checker (the reference) on generated types, with
valid values and values broken in one place."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from attrs import define, field
from hypothesis import given
from hypothesis import strategies as st

from tests.types.type_strategies import state_types
from tstate.types import Array, Map, analyse
from tstate.types.check import Mismatch, compile_checker, compile_vector_checker
from tstate.types.strategies import from_type


def _reference(tp: Any, values: list[Any]) -> bool:
    check = compile_checker(analyse(tp), ranges=False)
    try:
        for v in values:
            check(v)
    except Mismatch:
        return False
    return True


#: values that are wrong for most declarations (and right for some)
_WRONG = st.sampled_from(["x", 1, 1.5, True, None, b"b", (1,), [1], {"k": 1}, frozenset({1}), dt.date(2020, 1, 1)])


def _break(value: Any, data: st.DataObject) -> Any:
    """``value`` with one part replaced by something else (maybe still valid)."""
    wrong = data.draw(_WRONG, label="wrong")
    t = type(value)
    if t is list and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return value[:i] + [_break(value[i], data)] + value[i + 1 :]
    if t is dict and value and data.draw(st.booleans()):
        k = data.draw(st.sampled_from(sorted(value, key=repr)))
        return {**value, k: _break(value[k], data)}
    if hasattr(value, "__attrs_attrs__") and value.__attrs_attrs__ and data.draw(st.booleans()):
        import attrs

        a = data.draw(st.sampled_from(value.__attrs_attrs__))
        try:
            return attrs.evolve(value, **{a.alias: _break(getattr(value, a.name), data)})
        except Exception:
            return wrong
    return wrong


@given(st.data())
def test_the_vector_checker_agrees_with_the_per_value_checker(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    values = data.draw(st.lists(from_type(tp), max_size=4), label="values")
    vector = compile_vector_checker(analyse(tp))
    assert vector(values) is True and vector(iter(values)) is True
    if data.draw(st.booleans(), label="break one"):
        i = data.draw(st.integers(0, len(values)), label="where")
        values = values[:i] + [_break(data.draw(from_type(tp), label="victim"), data)] + values[i:]
    assert vector(values) == _reference(tp, values)


@define
class Leg:
    origin: str
    delay: Optional[int] = None


@define
class Route:
    flights: int = 0
    ratio: float = 0.0
    delays: list[int] = field(factory=list)
    legs: list[Leg] = field(factory=list)
    by_name: dict[str, list[float]] = field(factory=dict)
    log: Array[str] = field(factory=Array)
    counts: Map[int, int] = field(factory=Map)
    pair: tuple[int, str] = (0, "")
    _secret: bytes = b""


def test_what_the_vector_checker_refuses() -> None:
    ok = compile_vector_checker(analyse(Route))
    good = [Route(1, 2, [3], [Leg("a", 1)], {"x": [1.0, 2]}, Array(["l"]), Map({1: 2}), (1, "a"), b"s")]
    assert ok(good) and ok([]) and ok(iter(good))
    for bad in (
        Route(flights=True),  # a bool is not an int
        Route(flights=1.0),
        Route(ratio="1"),
        Route(delays=(1,)),  # a tuple is not a list
        Route(delays=[1, True]),
        Route(legs=[Leg(1)]),
        Route(legs=[Route()]),  # type: ignore[list-item]
        Route(by_name={1: [1.0]}),  # type: ignore[dict-item]
        Route(by_name={"x": [1.0, "2"]}),
        Route(log=["l"]),  # type: ignore[arg-type]  # a list is not an Array
        Route(log=Array([1])),
        Route(counts={1: 2}),  # type: ignore[arg-type]
        Route(counts=Map({1: "2"})),
        Route(pair=(1, "a", 2)),  # type: ignore[arg-type]
        Route(pair=(1, 2)),  # type: ignore[arg-type]
        Route(secret="s"),  # type: ignore[arg-type]
        Leg("a"),
    ):
        assert not ok(good + [bad]), bad
        assert not _reference(Route, [bad]), bad
    # ints are not range-checked (the encoder refuses them), like compile_checker(..., ranges=False)
    assert ok([Route(flights=2**70, delays=[-(2**70)])])
