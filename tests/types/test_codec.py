"""The codec: round trips for arbitrary nested types, value checks with field paths,
envelopes and fingerprint mismatches, deltas of tracked containers."""

import datetime as dt
import threading
from typing import Any, Optional

import attrs
import msgpack
import pytest
from attrs import define, field, frozen
from hypothesis import given
from hypothesis import strategies as st

from tests.types.test_tracked import apply_array_op, apply_map_op, array_ops, map_ops
from tests.types.type_strategies import Color, Mode, state_types
from tstate.errors import SchemaMismatchError, StateTypeError
from tstate.types import Array, Map, StateCodec, decode_envelope, encode_envelope
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
    legs: list[Leg] = field(factory=list)
    seen: set[Leg] = field(factory=set)
    color: Color = Color.RED
    mode: Mode = Mode.FAST
    when: Optional[dt.datetime] = None
    day: dt.date = dt.date(2020, 1, 1)
    pair: tuple[int, str] = (0, "")
    either: int | str = 0
    ratio: float = 0.0
    by_pair: dict[tuple[str, int], list[float]] = field(factory=dict)
    names: dict[str, Leg] = field(factory=dict)
    tags: frozenset[str] = frozenset()
    blob: bytes = b""


@define
class Tracked:
    count: int = 0
    items: Map[str, int] = field(factory=Map)
    log: Array[int] = field(factory=Array)
    legs: Map[tuple[int, str], Leg] = field(factory=Map)
    note: Optional[str] = None


@frozen
class FrozenTracked:
    label: str
    items: Map[str, list[int]]


@define
class Private:
    _hidden: int
    shown: Map[str, int] = field(factory=Map)


# ---------------------------------------------------------------------- round trips


@given(st.data())
def test_round_trip_of_arbitrary_types(data: st.DataObject) -> None:
    tp = data.draw(state_types(), label="type")
    codec = StateCodec(tp)
    value = data.draw(from_type(tp), label="value")
    codec.check(value)
    assert codec.decode(codec.encode(value)) == value
    built = codec.to_builtins(value)
    assert codec.from_builtins(built) == value
    assert codec.from_builtins(msgpack.unpackb(msgpack.packb(built), strict_map_key=False)) == value


@given(from_type(Route))
def test_round_trip_of_a_rich_struct(route: Route) -> None:
    codec = StateCodec(Route)
    back = codec.decode(codec.encode(route))
    assert back == route
    assert type(back.ratio) is float and type(back.pair) is tuple and type(back.tags) is frozenset


@pytest.mark.parametrize(
    "tp, value",
    [
        (int, 2**64 - 1),
        (int, -(2**63)),
        (float, 3),
        (float, float("inf")),
        (Optional[int], None),
        (None, None),
        (dt.datetime, dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))),
        (dt.datetime, dt.datetime(1, 1, 1)),
        (dict[Color, list[Mode]], {Color.RED: [Mode.SLOW], Color.BLUE: []}),
        (dict[bytes, int], {b"\x00": 1}),
        (dict[int | str, int], {1: 1, "1": 2}),
        (dict[Optional[int], int], {None: 1, 0: 2}),
        (dict[frozenset[int], str], {frozenset({1, 2}): "x"}),
        (dict[Leg, int], {Leg("a", 1): 3}),
        (tuple[()], ()),
        (Map[str, Array[int]], Map({"a": Array([1, 2])})),
        (list[Map[int, str]], [Map({1: "x"}), Map()]),
        (Private, Private(3, Map({"a": 1}))),
        (str, "ünïcödé ✓"),
        (bytes, b"\xff\x00"),
    ],
)
def test_round_trip_examples(tp: Any, value: Any) -> None:
    codec = StateCodec(tp)
    back = codec.decode(codec.encode(value))
    assert back == value
    assert type(back) is type(value) or (tp is float and type(back) is float)


def test_decoded_tracked_containers_are_clean() -> None:
    codec = StateCodec(Map[str, Array[int]])
    back = codec.decode(codec.encode(Map({"a": Array([1])})))
    assert back.has_base and not back.dirty
    assert back.peek("a").has_base and not back.peek("a").dirty


def test_codec_is_cached_per_type() -> None:
    assert StateCodec(Route) is StateCodec(Route)
    assert StateCodec(list[int]) is StateCodec(list[int])
    assert StateCodec(Route).fingerprint == StateCodec(Route).schema.fingerprint
    assert repr(StateCodec(int)).startswith("StateCodec(int, fingerprint=")


def test_unencodable_type_is_rejected_when_the_codec_is_built() -> None:
    with pytest.raises(StateTypeError, match=r"^state\{\}: type object is not encodable"):
        StateCodec(dict[str, object])


def test_encoding_format() -> None:
    codec = StateCodec(Route)
    built = codec.to_builtins(
        Route(
            by_hour={7: 1},
            color=Color.BLUE,
            mode=Mode.SLOW,
            when=dt.datetime(2020, 1, 2, 3, 4, 5),
            seen={Leg("a")},
            by_pair={("x", 1): [0.5]},
            names={"n": Leg("b", 2)},
            tags=frozenset({"t"}),
            blob=b"\x01",
        )
    )
    assert built["by_hour"] == [[7, 1]]  # non-str keys: [key, value] pairs
    assert built["names"] == {"n": {"origin": "b", "delay": 2}}  # str keys: a map
    assert built["by_pair"] == [[("x", 1), [0.5]]]
    assert built["color"] == 30000 and built["mode"] == "slow"
    assert built["when"] == "2020-01-02T03:04:05" and built["day"] == "2020-01-01"
    assert built["seen"] == [{"origin": "a", "delay": None}] and built["tags"] == ["t"]
    assert built["blob"] == b"\x01"
    assert msgpack.unpackb(StateCodec(int).encode(5)) == 5
    assert StateCodec(str).encode("a") == msgpack.packb("a")


def test_to_builtins_shares_nothing_mutable() -> None:
    route = Route(delays=[1], by_hour={1: 2}, names={"n": Leg("x")})
    built = StateCodec(Route).to_builtins(route)
    route.delays.append(2)
    route.by_hour[3] = 4
    route.names["m"] = Leg("y")
    assert built["delays"] == [1] and built["by_hour"] == [[1, 2]] and list(built["names"]) == ["n"]
    nested = StateCodec(list[list[int]])
    inner = [1]
    out = nested.to_builtins([inner])
    inner.append(2)
    assert out == [[1]]


def test_old_state_without_a_defaulted_field_decodes() -> None:
    old = attrs.make_class("Route", {"x": attrs.field(type=int)})
    new = attrs.make_class("Route", {"x": attrs.field(type=int), "n": attrs.field(type=list[int], factory=list)})
    assert StateCodec(new).schema.compatible_with(StateCodec(old).schema) is None
    value = StateCodec(new).decode(StateCodec(old).encode(old(3)))
    assert value == new(3, [])


def test_encoding_is_thread_safe() -> None:
    codec = StateCodec(Route)
    values = [Route(flights=i, delays=list(range(i % 50))) for i in range(300)]
    expected = [codec.encode(v) for v in values]
    errors: list[Exception] = []

    def work() -> None:
        try:
            for _ in range(5):
                assert [codec.encode(v) for v in values] == expected
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ---------------------------------------------------------------------- checks


@pytest.mark.parametrize(
    "value, message",
    [
        (Route(delays=[1, 2, 3, "x"]), "Route.delays[3]: expected int, got str 'x'"),
        (Route(flights="3"), "Route.flights: expected int, got str '3'"),
        (Route(flights=True), "Route.flights: expected int, got bool True"),
        (Route(flights=2**64), "Route.flights: expected int between -2**63 and 2**64-1, got int 18446744073709551616"),
        (Route(delays=[0, -(2**63) - 1]), "Route.delays[1]: expected int between -2**63 and 2**64-1"),
        (Route(delays=(1, 2)), "Route.delays: expected list[int], got tuple (1, 2)"),
        (Route(by_hour={1: "a"}), "Route.by_hour{1}: expected int, got str 'a'"),
        (Route(by_hour={"a": 1}), "Route.by_hour{key}: expected int, got str 'a'"),
        (Route(legs=[Leg("a"), Leg(3)]), "Route.legs[1].origin: expected str, got int 3"),
        (Route(legs=[Leg("a", "late")]), "Route.legs[0].delay: expected Optional[int], got str 'late'"),
        (Route(seen={Leg(1)}), "Route.seen[].origin: expected str, got int 1"),
        (Route(color=1), "Route.color: expected Color, got int 1"),
        (Route(when=dt.date(2020, 1, 1)), "Route.when: expected Optional[datetime], got date"),
        (Route(day=dt.datetime(2020, 1, 1)), "Route.day: expected date, got datetime"),
        (Route(pair=(1,)), "Route.pair: expected tuple[int, str], got tuple (1,)"),
        (Route(pair=(1, 2)), "Route.pair[1]: expected str, got int 2"),
        (Route(either=1.5), "Route.either: expected int | str, got float 1.5"),
        (Route(ratio="x"), "Route.ratio: expected float, got str 'x'"),
        (Route(by_pair={("a", 1): [1.0, None]}), "Route.by_pair{('a', 1)}[1]: expected float, got NoneType None"),
        (Route(by_pair={("a", "b"): []}), "Route.by_pair{key}[1]: expected int, got str 'b'"),
        (Route(names={"n": Route()}), "Route.names{'n'}: expected Leg, got Route"),
        (Route(tags={"a"}), "Route.tags: expected frozenset[str], got set {'a'}"),
        (Route(blob="text"), "Route.blob: expected bytes, got str 'text'"),
        (Leg("a"), "Route: expected Route, got Leg Leg(origin='a', delay=None)"),
        (Route(delays=["x" * 100]), "Route.delays[0]: expected int, got str 'xxxxxxxxxxxxxxxxxxxx"),
    ],
)
def test_wrongly_typed_values_raise_with_the_field_path(value: Any, message: str) -> None:
    codec = StateCodec(Route)
    for fn in (codec.check, codec.encode, codec.to_builtins):
        with pytest.raises(StateTypeError) as info:
            fn(value)
        assert str(info.value).startswith(message), str(info.value)


def test_check_path_prefix() -> None:
    codec = StateCodec(dict[str, list[int]])
    with pytest.raises(StateTypeError, match=r"^track\.state\{'a'\}\[0\]: expected int"):
        codec.check({"a": ["x"]}, "track.state")
    with pytest.raises(StateTypeError, match=r"^state\{'a'\}\[0\]: expected int"):
        codec.encode({"a": ["x"]})
    with pytest.raises(StateTypeError, match=r"^state: expected int, got str"):
        StateCodec(int).encode("1")
    with pytest.raises(StateTypeError, match=r"^state: expected Map\[str, int\], got dict"):
        StateCodec(Map[str, int]).encode({"a": 1})
    with pytest.raises(StateTypeError, match=r"^state\[1\]: expected int"):
        StateCodec(Array[int]).encode(Array([1, "2"]))


def test_scalar_state_out_of_range() -> None:
    with pytest.raises(StateTypeError, match=r"^state: expected int between"):
        StateCodec(int).encode(-(2**64))
    with pytest.raises(StateTypeError, match=r"^state: expected float, got int"):
        StateCodec(float).encode(2**70)


def test_decoding_garbage_raises_state_type_error() -> None:
    with pytest.raises(StateTypeError, match="not valid msgpack"):
        StateCodec(Route).decode(b"\xc1")
    with pytest.raises(StateTypeError, match="cannot decode the stored value as Route"):
        StateCodec(Route).decode(msgpack.packb({"flights": "x"}))


# ---------------------------------------------------------------------- envelopes


def test_envelope_round_trip_and_fingerprint_mismatch() -> None:
    codec = StateCodec(Route)
    payload = {"bin": 3, "states": [["k", codec.to_builtins(Route(flights=1))]]}
    data = encode_envelope(codec.fingerprint, payload)
    got = decode_envelope(data, codec.fingerprint)
    assert codec.from_builtins(got["states"][0][1]) == Route(flights=1)
    other = StateCodec(Leg).fingerprint
    with pytest.raises(SchemaMismatchError) as info:
        decode_envelope(data, other)
    assert codec.fingerprint in str(info.value) and other in str(info.value)
    with pytest.raises(StateTypeError, match="not a tstate state envelope"):
        decode_envelope(msgpack.packb([1, 2]), codec.fingerprint)


# ---------------------------------------------------------------------- deltas


_map_edits = st.lists(map_ops.filter(lambda o: o[0] != "clean"), max_size=8)
_array_edits = st.lists(array_ops.filter(lambda o: o[0] != "clean"), max_size=8)


def _ops_on(value: Tracked, data: st.DataObject) -> None:
    for op in data.draw(_map_edits, label="map ops"):
        apply_map_op(value.items, op)
    for op in data.draw(_array_edits, label="array ops"):
        apply_array_op(value.log, op)
    if data.draw(st.booleans(), label="touch count"):
        value.count += 1
    if data.draw(st.booleans(), label="replace legs"):
        value.legs = Map({(1, "x"): Leg("x")})
    elif data.draw(st.booleans(), label="set a leg"):
        value.legs[(len(value.legs), "y")] = Leg("y", len(value.legs))


@given(st.data())
def test_delta_round_trip_for_a_struct_with_tracked_fields(data: st.DataObject) -> None:
    codec = StateCodec(Tracked)
    live = data.draw(from_type(Tracked), label="initial")
    stored = codec.decode(codec.encode(live))  # what a checkpoint holds
    codec.mark_clean(live)
    for _ in range(data.draw(st.integers(1, 4), label="rounds")):
        _ops_on(live, data)
        delta = codec.encode_delta(live)
        stored = codec.apply_delta(stored, delta)
        assert stored == live
        assert not live.items.dirty and not live.log.dirty
        assert not stored.items.dirty and stored.items.has_base


@given(st.dictionaries(st.text(max_size=3), st.integers(-100, 100), max_size=5), st.lists(map_ops, max_size=20))
def test_delta_round_trip_for_a_map_state(initial: dict[str, int], ops: list[tuple[Any, ...]]) -> None:
    codec = StateCodec(Map[str, int])
    live = codec.decode(codec.encode(Map(initial)))
    stored = codec.decode(codec.encode(live))
    for op in ops:
        if op[0] == "clean":
            stored = codec.apply_delta(stored, codec.encode_delta(live))
            assert stored == live
        else:
            apply_map_op(live, op)
    assert codec.apply_delta(stored, codec.delta_builtins(live)) == live


@given(st.lists(st.integers(-3, 3), max_size=5), st.lists(array_ops, max_size=20))
def test_delta_round_trip_for_an_array_state(initial: list[int], ops: list[tuple[Any, ...]]) -> None:
    codec = StateCodec(Array[int])
    live = codec.decode(codec.encode(Array(initial)))
    stored = codec.decode(codec.encode(live))
    for op in ops:
        if op[0] == "clean":
            stored = codec.apply_delta(stored, codec.encode_delta(live))
            assert stored == live
        else:
            apply_array_op(live, op)
    assert codec.apply_delta(stored, codec.delta_builtins(live)) == live


def test_delta_is_small_for_appends() -> None:
    codec = StateCodec(Tracked)
    live = Tracked(items=Map({str(i): i for i in range(1000)}), log=Array(range(1000)))
    stored = codec.decode(codec.encode(live))
    codec.mark_clean(live)
    live.items["new"] = 1
    live.log.append(5)
    delta = codec.encode_delta(live)
    assert len(delta) < 60 < len(codec.encode(live)) // 100
    assert codec.delta_builtins(live)[1]["items"] == [1, [], []]  # nothing since the last delta
    assert codec.apply_delta(stored, delta) == live


def test_a_fresh_container_is_sent_whole() -> None:
    codec = StateCodec(Tracked)
    live = Tracked(items=Map({"a": 1}))
    stored = codec.decode(codec.encode(live))
    codec.mark_clean(live)
    live.items = Map({"b": 2})  # replaced: the receiver's base is not this map's base
    assert codec.delta_builtins(live)[1]["items"] == [0, {"b": 2}]
    assert codec.apply_delta(stored, codec.encode_delta(live)) == live


def test_delta_of_a_frozen_struct_and_of_private_fields() -> None:
    codec = StateCodec(FrozenTracked)
    live = FrozenTracked("x", Map({"a": [1]}))
    stored = codec.decode(codec.encode(live))
    codec.mark_clean(live)
    live.items["a"].append(2)
    live.items["b"] = []
    new = codec.apply_delta(stored, codec.encode_delta(live))
    assert new == live and new.items is stored.items
    private = StateCodec(Private)
    p = Private(1, Map({"a": 1}))
    stored_p = private.decode(private.encode(p))
    private.mark_clean(p)
    p.shown["b"] = 2
    assert private.apply_delta(stored_p, private.encode_delta(p)) == p


def test_delta_without_tracked_containers_is_the_whole_value() -> None:
    codec = StateCodec(Route)
    route = Route(flights=3)
    assert codec.delta_builtins(route) == [0, codec.to_builtins(route)]
    assert codec.apply_delta(Route(), codec.encode_delta(route)) == route


def test_delta_checks_what_it_encodes() -> None:
    codec = StateCodec(Tracked)
    live = codec.decode(codec.encode(Tracked()))
    live.items["a"] = "x"  # type: ignore[assignment]
    with pytest.raises(StateTypeError, match=r"^Tracked\.items\{'a'\}: expected int, got str 'x'"):
        codec.encode_delta(live)
    del live.items["a"]
    live.log.append(None)  # type: ignore[arg-type]
    with pytest.raises(StateTypeError, match=r"^Tracked\.log\[0\]: expected int, got NoneType"):
        codec.encode_delta(live)
    live.log.pop()
    live.count = "1"  # type: ignore[assignment]
    with pytest.raises(StateTypeError, match=r"^Tracked\.count: expected int"):
        codec.encode_delta(live)
    with pytest.raises(StateTypeError, match=r"^Tracked: expected Tracked, got int"):
        codec.encode_delta(3)


def test_applying_a_delta_to_the_wrong_base() -> None:
    codec = StateCodec(Map[str, int])
    live = codec.decode(codec.encode(Map({"a": 1})))
    live["b"] = 2
    with pytest.raises(StateTypeError, match="cannot apply this delta to a dict"):
        codec.apply_delta({"a": 1}, codec.encode_delta(live))
    struct = StateCodec(Tracked)
    with pytest.raises(StateTypeError, match="a struct delta does not fit"):
        struct.apply_delta(Route(), struct.encode_delta(Tracked()))


def test_mark_clean_reaches_nested_tracked_containers() -> None:
    codec = StateCodec(dict[str, list[Optional[Map[str, Array[int]]]]])
    inner = Array([1])
    outer = Map({"x": inner})
    codec.mark_clean({"k": [None, outer]})
    assert outer.has_base and inner.has_base and not outer.dirty
    StateCodec(int).mark_clean(3)  # nothing to clean: a no-op
