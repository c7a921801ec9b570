"""TypedDict records as state types: plain dicts with known keys (rows of a table)."""

from __future__ import annotations

import datetime as dt
from typing import NotRequired, Optional, TypedDict

import pytest

from tstate.errors import StateTypeError
from tstate.types import StateCodec, analyse, to_arrow
from tstate.types.schema import Kind


class Row(TypedDict):
    date: dt.datetime
    delay: Optional[int]
    origin: str
    tags: NotRequired[list[str]]


class Wider(TypedDict):
    date: dt.datetime
    delay: Optional[int]
    origin: str
    tags: NotRequired[list[str]]
    gate: NotRequired[int]


class Required(TypedDict):
    date: dt.datetime
    delay: Optional[int]
    origin: str
    tags: list[str]


ROWS = [
    {"date": dt.datetime(2020, 1, 1, 6, 5), "delay": None, "origin": "ATL"},
    {"date": dt.datetime(2020, 1, 1, 7), "delay": 12, "origin": "JFK", "tags": ["a", "b"]},
]


def test_schema_of_a_record() -> None:
    s = analyse(Row)
    assert s.kind is Kind.RECORD and s.name == "Row" and s.py_type is dict
    assert s.describe().splitlines() == [
        "Row", "  date: datetime", "  delay: Optional[int]", "  origin: str", "  tags: list[str] (may be absent)",
    ]  # fmt: skip
    assert s.canonical.endswith("{date:datetime;delay:optional[int];origin:str;tags:list[str]?}")


def test_records_round_trip_and_are_checked() -> None:
    codec = StateCodec(list[Row])
    assert codec.decode(codec.encode(ROWS)) == ROWS
    bad = [
        ({"date": dt.datetime(2020, 1, 1), "delay": "7", "origin": "ATL"}, r"state\[0\]\{'delay'\}: expected Optional\[int\], got str '7'"),
        ({"date": dt.datetime(2020, 1, 1), "origin": "ATL"}, r"state\[0\]: expected Row with key 'delay'"),
        ({**ROWS[0], "gate": 3}, r"state\[0\]: expected Row without key 'gate' \(its keys: date, delay, origin, tags\)"),
        ({**ROWS[1], "tags": ["a", 1]}, r"state\[0\]\{'tags'\}\[1\]: expected str, got int 1"),
    ]
    for value, message in bad:
        with pytest.raises(StateTypeError, match=message):
            codec.encode([value])


def test_records_in_arrow_and_compatibility() -> None:
    t = to_arrow([(1, ROWS[0]), (2, ROWS[1])], Row)
    assert t.column_names == ["key", "date", "delay", "origin", "tags"]
    assert [f.nullable for f in t.schema] == [False, False, True, False, True]
    assert t.column("tags").to_pylist() == [None, ["a", "b"]]

    assert analyse(Wider).compatible_with(analyse(Row)) is None  # a key that may be absent
    assert analyse(Row).compatible_with(analyse(Wider)) == "Row{'gate'}: key removed (state written with it cannot be read without it)"
    assert analyse(Required).compatible_with(analyse(Row)) == "Required{'tags'}: key became required (state written before may lack it)"
    # the same record (name and module) with "tags" required: the first differing path
    same_name = TypedDict("Row", {"date": dt.datetime, "delay": Optional[int], "origin": str, "tags": list[str]})  # type: ignore[misc]
    assert analyse(Row).diff(analyse(same_name)) == "Row{'tags'}"


def test_unencodable_value_types_are_named() -> None:
    Bad = TypedDict("Bad", {"ok": int, "blob": object})  # type: ignore[misc]
    with pytest.raises(StateTypeError, match=r"Bad\{'blob'\}: type object is not encodable"):
        analyse(Bad)
