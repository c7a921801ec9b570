"""Arrow export of state for queries: columns, types, values."""

import datetime as dt
from typing import Optional

import pyarrow as pa
import pytest
from attrs import define, field, frozen
from hypothesis import given
from hypothesis import strategies as st

from tests.types.type_strategies import Color, Mode, state_types
from tstate.errors import StateTypeError
from tstate.types import Array, Map, analyse, arrow_schema, to_arrow
from tstate.types.strategies import from_type


@frozen
class Leg:
    origin: str
    delay: Optional[int] = None


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)
    by_hour: dict[int, int] = field(factory=dict)
    leg: Leg = Leg("")
    seen: set[str] = field(factory=set)
    color: Color = Color.RED
    mode: Optional[Mode] = None
    when: Optional[dt.datetime] = None
    day: dt.date = dt.date(2020, 1, 1)
    pair: tuple[int, str] = (0, "")
    either: int | str = 0
    ratio: float = 0.0
    blob: bytes = b""
    items: Map[str, list[float]] = field(factory=Map)
    log: Array[Leg] = field(factory=Array)


def test_columns_and_types() -> None:
    route = Route(
        flights=2,
        delays=[5, 7],
        by_hour={7: 1},
        leg=Leg("ATL", 3),
        seen={"x"},
        color=Color.BLUE,
        mode=Mode.SLOW,
        when=dt.datetime(2020, 1, 2, 3, 4, 5, 6),
        pair=(1, "a"),
        either="s",
        ratio=0.5,
        blob=b"\x00",
        items=Map({"a": [1.5]}),
        log=Array([Leg("JFK")]),
    )
    table = to_arrow([(("ATL", 2001), route), (("JFK", 2002), Route())], Route)
    assert table.column_names == [
        "key_0", "key_1", "flights", "delays", "by_hour", "leg", "seen", "color", "mode", "when", "day", "pair",
        "either", "ratio", "blob", "items", "log",
    ]
    s = table.schema
    assert s.field("key_0").type == pa.string() and s.field("key_1").type == pa.int64()
    assert s.field("flights").type == pa.int64() and not s.field("flights").nullable
    assert s.field("delays").type == pa.list_(pa.field("item", pa.int64(), nullable=False))
    assert s.field("by_hour").type == pa.map_(pa.int64(), pa.field("value", pa.int64(), nullable=False))
    assert s.field("leg").type == pa.struct(
        [pa.field("origin", pa.string(), nullable=False), pa.field("delay", pa.int64())]
    )
    assert s.field("seen").type.value_type == pa.string()
    assert s.field("color").type == pa.int64() and s.field("mode").type == pa.string()
    assert s.field("mode").nullable and s.field("when").nullable
    assert s.field("when").type == pa.timestamp("us") and s.field("day").type == pa.date32()
    assert s.field("pair").type == pa.struct([pa.field("_1", pa.int64(), False), pa.field("_2", pa.string(), False)])
    assert s.field("either").type == pa.string()
    assert s.field("ratio").type == pa.float64() and s.field("blob").type == pa.binary()
    assert s.field("items").type == pa.map_(pa.string(), pa.field("value", pa.list_(pa.field("item", pa.float64(), False)), False))
    assert s.field("log").type.value_type == s.field("leg").type
    assert s == arrow_schema(Route, tuple[str, int])
    assert arrow_schema(analyse(Route)).names == table.column_names[2:]

    row = table.to_pylist()[0]
    assert row == {
        "key_0": "ATL",
        "key_1": 2001,
        "flights": 2,
        "delays": [5, 7],
        "by_hour": [(7, 1)],
        "leg": {"origin": "ATL", "delay": 3},
        "seen": ["x"],
        "color": 30000,
        "mode": "slow",
        "when": dt.datetime(2020, 1, 2, 3, 4, 5, 6),
        "day": dt.date(2020, 1, 1),
        "pair": {"_1": 1, "_2": "a"},
        "either": "s",
        "ratio": 0.5,
        "blob": b"\x00",
        "items": [("a", [1.5])],
        "log": [{"origin": "JFK", "delay": None}],
    }
    assert table.to_pylist()[1]["mode"] is None
    assert table.to_pandas().shape == (2, 17)


def test_reading_state_does_not_mark_tracked_containers() -> None:
    route = Route(items=Map({"a": [1.0]}), log=Array([Leg("x")]))
    route.items.mark_clean()
    route.log.mark_clean()
    to_arrow([("k", route)], Route)
    assert not route.items.dirty and not route.log.dirty


def test_scalar_state_and_key_types() -> None:
    table = to_arrow([("a", 1), ("b", 2)], int)
    assert table.column_names == ["key", "value"]
    assert table.column("value").to_pylist() == [1, 2]
    assert table.schema.field("key").type == pa.string()
    typed = to_arrow([((Color.RED, 1), [1.0])], list[float], key_type=tuple[Color, int])
    assert typed.column_names == ["key_0", "key_1", "value"]
    assert typed.to_pylist() == [{"key_0": 1, "key_1": 1, "value": [1.0]}]
    inferred = to_arrow([(Color.GREEN, None)], Optional[int])
    assert inferred.to_pylist() == [{"key": 2, "value": None}]
    assert inferred.schema.field("value").nullable
    empty = to_arrow([], Route)
    assert empty.num_rows == 0 and empty.schema.field("key").type == pa.null()
    named = to_arrow([("a", 1)], int, key_name="route")
    assert named.column_names == ["route", "value"]


def test_aware_datetimes_become_utc() -> None:
    when = dt.datetime(2020, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    table = to_arrow([("k", when)], dt.datetime)
    assert table.column("value").to_pylist() == [dt.datetime(2020, 1, 1, 10)]


def test_errors() -> None:
    with pytest.raises(StateTypeError, match=r"^Route\.delays\[0\]: expected int, got str 'x' \(at key 'k'\)"):
        to_arrow([("k", Route(delays=["x"]))], Route)

    @define
    class Keyed:
        key: str

    with pytest.raises(StateTypeError, match="column 'key' would appear twice"):
        to_arrow([("k", Keyed("v"))], Keyed)
    assert to_arrow([("k", Keyed("v"))], Keyed, key_name="k").column_names == ["k", "key"]
    with pytest.raises(StateTypeError, match="tuple keys of different lengths"):
        to_arrow([((1,), 1), ((1, 2), 2)], int)
    with pytest.raises(StateTypeError, match="column 'value': cannot be stored as Arrow int64"):
        to_arrow([("k", 2**64 - 1)], int)
    with pytest.raises(StateTypeError, match="column 'key'"):
        to_arrow([("k", 1), (2, 1)], int)


@given(st.data())
def test_any_state_type_exports(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    rows = data.draw(st.lists(st.tuples(st.text(max_size=3), from_type(tp)), max_size=4), label="rows")
    table = to_arrow(rows, tp, key_type=str)
    assert table.num_rows == len(rows)
    assert table.schema == arrow_schema(tp, str)
    if analyse(tp).kind.value not in ("struct", "record"):  # (their fields are columns)
        assert table.column_names == ["key", "value"]
