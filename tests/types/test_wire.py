"""Checkpoint format 2 (msgspec): what is encoded natively and what is not, the format's
few choices (maps for every dict but those keyed by structs, datetimes with their
offset, private fields), and values msgspec cannot type read through the reference path."""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

import msgpack
import msgspec
import pytest
from attrs import define, field, frozen

from tstate.errors import StateTypeError
from tstate.types import Array, Map, StateCodec, analyse
from tstate.types.builtins import converter
from tstate.types.wire import decode_any, decodes_natively, encodes_natively


@frozen
class Leg:
    origin: str
    delay: Optional[int] = None


@define
class Plain:
    n: int = 0
    names: dict[int, str] = field(factory=dict)
    legs: list[Leg] = field(factory=list)
    counts: Map[tuple[str, int], float] = field(factory=Map)


@define
class Private:
    _hidden: int = 0
    shown: int = 0


@define
class Dated:
    when: Optional[dt.datetime] = None


@pytest.mark.parametrize(
    "tp, enc, dec",
    [
        (Plain, True, True),
        (dict[int, list[int]], True, True),
        (Map[str, Array[Leg]], True, True),
        (Private, False, True),  # msgspec skips private fields when encoding
        (Dated, False, True),  # an aware datetime would lose its offset
        (dict[Leg, int], False, False),  # keyed by structs: pairs
        (list[bytes | str], True, False),  # msgspec cannot type a union of str and bytes
    ],
)
def test_native_or_not(tp: Any, enc: bool, dec: bool) -> None:
    schema = analyse(tp)
    assert (encodes_natively(schema), decodes_natively(schema)) == (enc, dec)
    assert StateCodec(tp).encodes_natively == enc
    assert (StateCodec(tp).wire_type is not None) == dec


def test_format_2_choices() -> None:
    codec = StateCodec(Plain)
    value = Plain(1, {7: "x"}, [Leg("a", 2)], Map({("k", 1): 0.5}))
    data = codec.encode(value)
    raw = msgpack.unpackb(data, strict_map_key=False, use_list=False)
    assert raw["names"] == {7: "x"}  # format 1 wrote [[7, "x"]]
    assert raw["counts"] == {("k", 1): 0.5}
    assert raw["legs"] == ({"origin": "a", "delay": 2},)
    assert codec.decode(data) == value
    assert msgpack.unpackb(StateCodec(dict[Leg, int]).encode({Leg("a"): 1})) == [[{"origin": "a", "delay": None}, 1]]
    aware = dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30)))
    assert msgpack.unpackb(StateCodec(Dated).encode(Dated(aware))) == {"when": "2024-03-01T12:30:00-05:30"}
    back = StateCodec(Dated).decode(StateCodec(Dated).encode(Dated(aware)))
    assert back.when.utcoffset() == aware.utcoffset()
    assert msgpack.unpackb(StateCodec(Private).encode(Private(3, 4))) == {"_hidden": 3, "shown": 4}
    assert StateCodec(Private).decode(StateCodec(Private).encode(Private(3, 4))) == Private(3, 4)


def test_format_1_builtins_are_read() -> None:
    """What format 1 wrote (the builtins form, packed by msgpack-python) decodes."""
    value = Plain(1, {7: "x"}, [Leg("a")], Map({("k", 1): 0.5}))
    codec = StateCodec(Plain)
    old = msgpack.packb(converter.unstructure(value, Plain), use_bin_type=True)
    assert msgpack.unpackb(old, strict_map_key=False)["names"] == [[7, "x"]]
    back = codec.decode(old)
    assert back == value and back.counts.has_base and type(back.legs[0]) is Leg


def test_values_msgspec_cannot_type_round_trip() -> None:
    codec = StateCodec(list[bytes | str])
    assert codec.decode(codec.encode([b"a", "a"])) == [b"a", "a"]
    keyed = StateCodec(Map[Leg, list[Leg]])
    m = Map({Leg("a"): [Leg("b", 1)]})
    assert keyed.decode(keyed.encode(m)) == m
    # an offset with seconds (Python allows it, RFC 3339 does not): the reference path reads it
    odd = dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1, seconds=30)))
    assert StateCodec(dt.datetime).decode(StateCodec(dt.datetime).encode(odd)) == odd


def test_what_a_typed_decoder_refuses_is_an_error_naming_the_type() -> None:
    with pytest.raises(StateTypeError, match="cannot decode the stored value as Plain"):
        StateCodec(Plain).decode(msgspec.msgpack.encode({"n": "x"}))
    with pytest.raises(StateTypeError, match="not valid msgpack"):
        StateCodec(list[int]).decode(b"\xc1")
    with pytest.raises(StateTypeError, match="not valid msgpack"):
        decode_any(b"\xc1")


def test_encoding_refuses_what_msgspec_cannot_encode_with_the_field_path() -> None:
    class Name(str):
        pass

    with pytest.raises(StateTypeError, match=r"^Plain\.names\{7\}: expected str, got \S*Name "):
        StateCodec(Plain).encode(Plain(names={7: Name("x")}))
    with pytest.raises(StateTypeError, match=r"^state\[0\]: expected int between"):
        StateCodec(list[int]).encode([2**64])
