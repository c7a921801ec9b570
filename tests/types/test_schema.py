"""Schemas: which declarations are accepted, rejection messages with field paths,
fingerprints, describe / diff / compatible_with."""

import datetime as dt
import enum
import io
import json
import os
import subprocess
import sys
import typing
from typing import Any, Callable, Generic, NewType, Optional, TypeVar

import attr
import attrs
import pytest
from attrs import define, field, frozen
from hypothesis import given

from tests.types.type_strategies import Color, make_struct, state_types
from tstate.errors import StateTypeError
from tstate.types import Array, Kind, Map, Schema, analyse, describe

T = TypeVar("T")


@frozen
class Leg:
    origin: str
    delay: Optional[int] = None


@define
class Box(Generic[T]):
    item: T
    items: list[T] = field(factory=list)


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)
    by_hour: dict[int, int] = field(factory=dict)
    legs: Array[Leg] = field(factory=Array)
    seen: set[Leg] = field(factory=set)
    color: Color = Color.RED
    when: Optional[dt.datetime] = None
    day: dt.date = dt.date(2020, 1, 1)
    pair: tuple[int, str] = (0, "")
    box: Box[float] = field(factory=lambda: Box(1.0))
    either: int | str = 0
    by_leg: Map[tuple[str, int], list[float]] = field(factory=Map)
    tags: frozenset[str] = frozenset()
    history: tuple[int, ...] = ()
    blob: bytes = b""
    flag: bool = False
    nothing: None = None


# ---------------------------------------------------------------------- accepted


def test_everything_supported_is_accepted() -> None:
    s = analyse(Route)
    assert s.kind is Kind.STRUCT
    kinds = {f.name: f.schema.kind for f in s.fields}
    assert kinds == {
        "flights": Kind.INT,
        "delays": Kind.LIST,
        "by_hour": Kind.DICT,
        "legs": Kind.ARRAY,
        "seen": Kind.SET,
        "color": Kind.ENUM,
        "when": Kind.OPTIONAL,
        "day": Kind.DATE,
        "pair": Kind.FIXED_TUPLE,
        "box": Kind.STRUCT,
        "either": Kind.UNION,
        "by_leg": Kind.MAP,
        "tags": Kind.FROZENSET,
        "history": Kind.TUPLE,
        "blob": Kind.BYTES,
        "flag": Kind.BOOL,
        "nothing": Kind.NONE,
    }
    box = next(f for f in s.fields if f.name == "box").schema
    assert [(f.name, f.schema.name) for f in box.fields] == [("item", "float"), ("items", "list[float]")]
    assert all(f.has_default for f in s.fields)


@pytest.mark.parametrize(
    "tp, name",
    [
        (int, "int"),
        (None, "None"),
        (type(None), "None"),
        (list[int], "list[int]"),
        (typing.List[int], "list[int]"),
        (Optional[int], "Optional[int]"),
        (int | None, "Optional[int]"),
        (str | int | None, "Optional[int | str]"),
        (dict[str, list[Leg]], "dict[str, list[Leg]]"),
        (tuple[int, ...], "tuple[int, ...]"),
        (tuple[int, str], "tuple[int, str]"),
        (Map[str, int], "Map[str, int]"),
        (Array[Optional[Leg]], "Array[Optional[Leg]]"),
        (Box[int], "Box[int]"),
        (typing.Annotated[int, "meta"], "int"),
        (NewType("UserId", int), "int"),
        (frozenset[Color], "frozenset[Color]"),
    ],
)
def test_names(tp: Any, name: str) -> None:
    assert analyse(tp).name == name


def test_analyse_is_cached_and_equal_types_share_a_schema() -> None:
    assert analyse(list[int]) is analyse(list[int])
    assert analyse(Optional[int]) == analyse(int | None)
    assert analyse(int | str) == analyse(str | int)


def test_generic_struct_binds_its_type_variables() -> None:
    s = analyse(Box[list[str]])
    assert [f.schema.name for f in s.fields] == ["list[str]", "list[list[str]]"]
    assert analyse(Box[int]).fingerprint != analyse(Box[str]).fingerprint


# ---------------------------------------------------------------------- rejected


@define
class WithObject:
    delays: list[object]


@define
class WithCallable:
    callback: Callable[[int], int]


@define
class WithLambda:
    fn: lambda x: x  # type: ignore[valid-type]


@define
class WithAny:
    anything: dict[str, Any]


@attr.s
class Unannotated:
    x = attr.ib()


@define
class WithFile:
    f: io.TextIOWrapper


class Plain:
    pass


@define
class WithPlain:
    inner: Optional[Plain]


@define
class Nested:
    routes: dict[str, list[WithObject]]


@define
class WithUnhashableKey:
    d: dict[list[int], int]


@define
class WithUnhashableElement:
    s: set[Leg | None]  # Leg is frozen: fine


@define
class WithMutableElement:
    s: set[Box[int]]


@define
class Tree:
    children: list["Tree"]


@define
class WithInitFalse:
    x: int
    cache: dict[str, int] = field(init=False, factory=dict)


@define
class WithUnresolved:
    x: "Missing"  # type: ignore[name-defined]  # noqa: F821


@define
class WithUnion:
    u: int | list[int]


@define
class WithMixedEnum:
    e: "MixedEnum"


class MixedEnum(enum.Enum):
    A = 1
    B = "b"


@pytest.mark.parametrize(
    "tp, message",
    [
        (WithObject, "WithObject.delays[]: type object is not encodable"),
        (WithCallable, "WithCallable.callback: type Callable[[int], int] is not encodable"),
        (WithLambda, "WithLambda.fn: type WithLambda.<lambda> is not encodable"),
        (WithAny, "WithAny.anything{}: type Any is not encodable"),
        (Unannotated, "Unannotated.x: field has no type annotation"),
        (WithFile, "WithFile.f: type TextIOWrapper is not encodable (not an attrs class"),
        (WithPlain, "WithPlain.inner: type Plain is not encodable (not an attrs class"),
        (Plain, "state: type Plain is not encodable"),
        (object, "state: type object is not encodable"),
        (Any, "state: type Any is not encodable"),
        (Nested, "Nested.routes{}[].delays[]: type object is not encodable"),
        (WithUnhashableKey, "WithUnhashableKey.d{key}: type list[int] is not hashable"),
        (WithMutableElement, "WithMutableElement.s[]: type Box[int] is not hashable"),
        (Tree, "Tree.children[]: type Tree is recursive"),
        (WithInitFalse, "WithInitFalse.cache: field has init=False"),
        (WithUnresolved, "WithUnresolved: cannot resolve the annotations of WithUnresolved"),
        (WithUnion, "WithUnion.u: type int | list[int] is not encodable (a union may only combine"),
        (WithMixedEnum, "WithMixedEnum.e: type MixedEnum is not encodable (an enum's values must be"),
        (list, "state: type list is not encodable (give the item types"),
        (dict[str, typing.Sequence[int]], "state{}: type Sequence[int] is not encodable"),
        (Box, "Box.item: type variable ~T is not bound"),
        (tuple[int, Callable[[], None]], "state[1]: type Callable[[], None] is not encodable"),
        (Map[str, object], "state{}: type object is not encodable"),
        (Array[Any], "state[]: type Any is not encodable"),
    ],
)
def test_rejections_name_the_field_path(tp: Any, message: str) -> None:
    with pytest.raises(StateTypeError) as info:
        analyse(tp)
    assert str(info.value).startswith(message), str(info.value)


def test_set_of_optional_frozen_struct_is_fine() -> None:
    assert analyse(WithUnhashableElement).fields[0].schema.name == "set[Optional[Leg]]"


# ---------------------------------------------------------------------- fingerprints

FINGERPRINTED = [int, str, list[int], dict[str, list[int]], Optional[Leg], Route, Box[int], Map[str, Color]]


def test_fingerprints_are_stable_across_processes() -> None:
    here = {repr(tp): analyse(tp).fingerprint for tp in FINGERPRINTED}
    code = (
        "import json, tests.types.test_schema as m\n"
        "from tstate.types import analyse\n"
        "print(json.dumps({repr(t): analyse(t).fingerprint for t in m.FINGERPRINTED}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env, check=True)
        assert json.loads(out.stdout) == here


def test_golden_fingerprints() -> None:
    # Changing these breaks every stored checkpoint: the canonical description is a format.
    assert analyse(int).canonical == "int"
    assert analyse(dict[str, list[int]]).canonical == "dict[str,list[int]]"
    assert analyse(dict[str, list[int]]).fingerprint == "67efb6bf6f3d732a"
    assert analyse(Leg).canonical == "struct tests.types.test_schema.Leg{origin:str;delay:optional[int]}"
    assert analyse(Color).canonical == "enum tests.types.type_strategies.Color(RED=1,GREEN=2,BLUE=30000)"


def test_fingerprints_differ_for_different_types() -> None:
    types_ = [
        int, float, str, bytes, bool, None, dt.datetime, dt.date, list[int], tuple[int, ...], set[int],
        frozenset[int], Array[int], dict[str, int], Map[str, int], dict[int, str], tuple[int, str],
        tuple[str, int], Optional[int], int | str, Leg, Route, Box[int], Box[str], Color, list[list[int]],
    ]
    fps = [analyse(t).fingerprint for t in types_]
    assert len(set(fps)) == len(fps)


def test_equal_declarations_have_equal_fingerprints() -> None:
    a = attrs.make_class("S", {"f0": attrs.field(type=int), "f1": attrs.field(type=list[str])})
    b = attrs.make_class("S", {"f0": attrs.field(type=int), "f1": attrs.field(type=list[str])})
    assert a is not b
    assert analyse(a).fingerprint == analyse(b).fingerprint
    assert analyse(a) == analyse(b)
    c = attrs.make_class(a.__name__, {"f0": attrs.field(type=int), "g1": attrs.field(type=list[str])})
    d = attrs.make_class(a.__name__, {"f0": attrs.field(type=int), "f1": attrs.field(type=list[bytes])})
    e = make_struct([int, list[str]])  # another module: another qualified name
    e.__name__ = e.__qualname__ = "S"
    assert len({analyse(x).fingerprint for x in (a, c, d, e)}) == 4


def test_defaults_do_not_change_the_fingerprint() -> None:
    a = attrs.make_class("A", {"x": attrs.field(type=int)})
    b = attrs.make_class("A", {"x": attrs.field(type=int, default=3)})
    assert analyse(a).fingerprint == analyse(b).fingerprint


@given(state_types())
def test_to_builtins_round_trips_and_keeps_the_fingerprint(tp: Any) -> None:
    s = analyse(tp)
    back = Schema.from_builtins(json.loads(json.dumps(s.to_builtins())))
    assert back == s
    assert back.fingerprint == s.fingerprint
    assert back.describe() == s.describe()
    assert s.diff(back) is None and s.compatible_with(back) is None


def test_from_builtins_rejects_garbage() -> None:
    with pytest.raises(StateTypeError, match="not a stored schema"):
        Schema.from_builtins({"kind": "nonsense", "name": "x"})


# ---------------------------------------------------------------------- describe / diff / compatible


def test_describe() -> None:
    text = describe(Box[Leg])
    assert text == (
        "Box[Leg]\n"
        "  item: Leg\n"
        "  item.origin: str\n"
        "  item.delay: Optional[int] = ...\n"
        "  items: list[Leg] = ...\n"
        "  items[].origin: str\n"
        "  items[].delay: Optional[int] = ..."
    )
    assert analyse(Box[Leg]).describe() == text
    assert describe(dict[str, Leg]).splitlines()[1:] == ["  {}.origin: str", "  {}.delay: Optional[int] = ..."]


def _struct(name: str, **fields: Any) -> type:
    return attrs.make_class(name, {k: (v if isinstance(v, attrs.Attribute) or hasattr(v, "default") else attrs.field(type=v)) for k, v in fields.items()})


def test_diff_gives_the_first_differing_path() -> None:
    inner_a = _struct("Inner", x=int, y=list[int])
    inner_b = _struct("Inner", x=int, y=list[str])
    a = _struct("Outer", n=int, inner=dict[str, inner_a])
    b = _struct("Outer", n=int, inner=dict[str, inner_b])
    assert analyse(a).diff(analyse(b)) == "Outer.inner{}.y[]"
    assert analyse(a).diff(analyse(a)) is None
    c = _struct("Outer", n=int)
    assert analyse(a).diff(analyse(c)) == "Outer.inner"
    assert analyse(c).diff(analyse(a)) == "Outer.inner"
    assert analyse(list[int]).diff(analyse(list[str])) == "state[]"
    assert analyse(dict[int, str]).diff(analyse(dict[str, str])) == "state{key}"
    assert analyse(int).diff(analyse(str)) == "state"


class Fewer(enum.Enum):
    RED = 1


class More(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 30000
    PINK = 4


def test_compatible_with() -> None:
    old = _struct("Route", flights=int, delays=list[int], color=Color)
    added = _struct(
        "Route", flights=int, delays=list[int], color=Color, extra=attrs.field(type=list[int], factory=list)
    )
    assert analyse(added).compatible_with(analyse(old)) is None
    no_default = _struct("Route", flights=int, delays=list[int], color=Color, extra=int)
    assert analyse(no_default).compatible_with(analyse(old)) == (
        "Route.extra: field added without a default (state written before has no value for it)"
    )
    removed = _struct("Route", flights=int, color=Color)
    assert analyse(removed).compatible_with(analyse(old)).startswith("Route.delays: field removed")
    retyped = _struct("Route", flights=int, delays=list[str], color=Color)
    assert analyse(retyped).compatible_with(analyse(old)) == "Route.delays[]: type changed from int to str"
    widened = _struct("Route", flights=Optional[int], delays=Array[int], color=Color)
    assert analyse(widened).compatible_with(analyse(old)) is None
    assert analyse(old).compatible_with(analyse(widened)) == "Route.flights: type changed from Optional[int] to int"

    assert analyse(More).compatible_with(analyse(Color)) is None
    assert analyse(Fewer).compatible_with(analyse(Color)) == "state: enum value 2 of Color no longer exists in Fewer"
    assert analyse(Map[str, frozenset[int]]).compatible_with(analyse(dict[str, set[int]])) is None
    assert analyse(int | str | None).compatible_with(analyse(int)) is None
    assert analyse(int | bytes).compatible_with(analyse(int | str)) == "state: int | str has str, bytes | int does not"
    renamed = _struct("Journey", flights=int, delays=list[int], color=Color)
    assert analyse(renamed).compatible_with(analyse(old)) is None
    assert analyse(renamed).diff(analyse(old)) == "Journey"
