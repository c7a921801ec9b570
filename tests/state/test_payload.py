"""Bin payloads: whole bins of arbitrary state types and keys round-trip in one call;
wrongly typed states are named by operator, key and field path; format-1 payloads are
read."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgpack
import pytest
from attrs import define, field
from hypothesis import given
from hypothesis import strategies as st

from tests.types.type_strategies import state_types
from tstate.errors import SchemaMismatchError, StateTypeError
from tstate.progress.timestamp import Product
from tstate.state.bin import Bin
from tstate.state.payload import bin_to_builtins, decode_bin, decode_payload, encode_bin
from tstate.types import Map, StateCodec
from tstate.types.codec import MAGIC_FORMAT_1
from tstate.types.strategies import from_type

keys = st.one_of(
    st.integers(-(2**70), 2**70),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
    st.none(),
    st.dates(),
    st.datetimes(timezones=st.just(dt.timezone(dt.timedelta(hours=3)))),
    st.frozensets(st.integers(0, 9), max_size=3),
    st.tuples(st.text(max_size=2), st.integers(0, 9)),
)
times = st.one_of(st.integers(0, 100), st.builds(Product, st.integers(0, 9), st.integers(0, 9)))


@given(st.data())
def test_bins_of_arbitrary_types_round_trip(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    codec = StateCodec(tp)
    b = Bin(data.draw(st.integers(0, 255), label="bin"))
    b.states = data.draw(st.dictionaries(keys, from_type(tp), max_size=6), label="states")
    for t, ks in data.draw(st.dictionaries(times, st.lists(keys, max_size=3), max_size=3), label="timers").items():
        for k in ks:
            b.add_timer(t, k)
    back = decode_bin(encode_bin(b, codec), codec)
    assert back.index == b.index and back.states == b.states and back.timers == b.timers
    assert {type(k) for k in back.states} == {type(k) for k in b.states}
    # format 1 (what tstate wrote before msgspec) reads back the same
    old = msgpack.packb([MAGIC_FORMAT_1, codec.fingerprint, bin_to_builtins(b, codec)], use_bin_type=True)
    old_back = decode_bin(old, codec)
    assert old_back.states == b.states and old_back.timers == b.timers


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)
    counts: Map[int, int] = field(factory=Map)


def test_a_wrongly_typed_state_is_named_by_operator_key_and_path() -> None:
    codec = StateCodec(Route)
    b = Bin(0)
    b.states = {"ok": Route(1, [2]), ("LAX", 3): Route(1, [2, "3"])}
    with pytest.raises(StateTypeError, match=r"^operator 'track', key \('LAX', 3\): Route\.delays\[1\]: expected int"):
        encode_bin(b, codec, "track")
    b.states = {"big": Route(counts=Map({1: 2**64}))}
    with pytest.raises(StateTypeError, match=r"^operator 'track', key 'big': Route\.counts\{1\}: expected int between"):
        encode_bin(b, codec, "track")


def test_decoded_tracked_state_is_clean_and_fingerprints_are_checked() -> None:
    codec = StateCodec(Map[str, int])
    b = Bin(1)
    b.states = {"k": Map({"a": 1})}
    back = decode_bin(encode_bin(b, codec), codec)
    assert back.states["k"].has_base and not back.states["k"].dirty
    with pytest.raises(SchemaMismatchError):
        decode_payload(encode_bin(b, codec), StateCodec(Map[str, str]))


def test_states_are_checked_after_encoding_and_the_culprit_named() -> None:
    """encode_bin encodes first and checks after: every kind of mistake is still refused
    (no bytes come out) and named by operator, key and field path."""
    cases: list[tuple[Any, Any, str]] = [
        (list[int], [1, "2"], r"state\[1\]: expected int, got str"),
        (list[int], (1, 2), r"state: expected list\[int\], got tuple"),  # msgpack cannot tell them apart
        (list[bytes], [b"a", bytearray(b"b")], r"state\[1\]: expected bytes, got bytearray"),  # nor these
        (Map[int, int], Map({1: 2, 3: "x"}), r"state\{3\}: expected int, got str"),
        (Map[int, int], Map({1: 2, "k": 3}), r"state\{key\}: expected int, got str"),
        (dict[str, float], {"a": 1.5, "b": None}, r"state\{'b'\}: expected float, got NoneType"),
        (dict[str, list[int]], {"a": [1], "b": (2,)}, r"state\{'b'\}: expected list\[int\], got tuple"),
        (Route, Route(1, [2], Map({1: 2 ** 64})), r"Route\.counts\{1\}: expected int between"),
    ]
    for tp, bad, message in cases:
        codec = StateCodec(tp)
        b = Bin(0)
        b.states = {"fine": _a_valid(tp), ("k", 7): bad}
        with pytest.raises(StateTypeError, match=r"^operator 'op', key \('k', 7\): " + message):
            encode_bin(b, codec, "op")


def _a_valid(tp: Any) -> Any:
    return {list[int]: [1], list[bytes]: [b"x"], Map[int, int]: Map({1: 1}), dict[str, float]: {"a": 1.0},
            dict[str, list[int]]: {"a": [1]}, Route: Route()}[tp]


def test_a_state_that_contains_itself_is_refused_not_a_recursion_error() -> None:
    codec = StateCodec(list[list[int]])
    loop: list[Any] = [1]
    loop.append(loop)
    b = Bin(0)
    b.states = {"k": [loop]}
    with pytest.raises(StateTypeError, match=r"^operator 'op', key 'k': state\[0\]\[1\]: expected int, got list"):
        encode_bin(b, codec, "op")


@given(st.data())
def test_states_encoded_in_chunks_are_the_bytes_of_one_call(data: st.DataObject) -> None:
    """encode_states encodes and checks CHUNK states at a time: the bytes are those of
    encoding the whole list at once, at every size around the chunk and header bounds."""
    from tstate.state import payload
    from tstate.types import wire

    n = data.draw(st.sampled_from([0, 1, 15, 16, 17, payload.CHUNK - 1, payload.CHUNK, payload.CHUNK + 1,
                                   3 * payload.CHUNK + 5, 65_535, 65_536, 65_540]), label="n")
    codec = StateCodec(Route)
    values = [Route(i, [i, -i], Map({i: i + 1})) for i in range(n)]
    raw = payload.encode_states(values, codec)
    assert raw is not None and bytes(raw) == wire.encode(values)


def test_a_wrong_state_in_a_later_chunk_is_named() -> None:
    """A wrongly typed state after the first chunk (encoded fine, refused by the check
    of its chunk) or beyond 64 bits (refused by the encoder) is named by its key."""
    from tstate.state.payload import CHUNK

    codec = StateCodec(Route)
    b = Bin(0)
    b.states = {i: Route(i, [i]) for i in range(3 * CHUNK)}
    b.states[2 * CHUNK + 3] = Route(1, [2, "3"])
    with pytest.raises(StateTypeError, match=rf"^operator 'op', key {2 * CHUNK + 3}: Route\.delays\[1\]: expected int"):
        encode_bin(b, codec, "op")
    b.states[2 * CHUNK + 3] = Route(2**64)
    with pytest.raises(StateTypeError, match=rf"^operator 'op', key {2 * CHUNK + 3}: Route\.flights: expected int between"):
        encode_bin(b, codec, "op")
