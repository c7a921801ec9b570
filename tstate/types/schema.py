"""State schemas: what a declared state type is made of, checked once, fingerprinted.

:func:`analyse` walks a declared state type recursively and returns its
:class:`Schema`, an immutable tree.  A type that cannot be encoded is rejected here,
when the dataflow is built, with :class:`~tstate.errors.StateTypeError` naming the
**field path**: ``Struct.field`` for a struct field, ``[]`` for a list / tuple / set /
``Array`` element, ``{}`` for a dict / ``Map`` value and ``{key}`` for its key, ``[0]``
for the first item of a fixed tuple.  The root is the struct's name, or ``state``.

Supported: attrs classes (structs, also generic ones: ``Box[int]``), ``TypedDict``
classes (records: plain ``dict`` values with known keys, e.g. rows of a table;
``NotRequired`` keys may be absent), ``list[T]``,
``tuple[T, ...]``, ``tuple[A, B]``, ``dict[K, V]``, ``set[T]``, ``frozenset[T]``,
``int``, ``float``, ``str``, ``bytes``, ``bool``, ``None``, ``Optional[T]`` / ``T | None``,
unions of distinct scalars (``int | str``), ``datetime.datetime``, ``datetime.date``,
``enum.Enum`` subclasses with all-``int`` or all-``str`` values, the tracked containers
``Map[K, V]`` and ``Array[T]``, plus ``Annotated[T, ...]`` and ``NewType`` (read as
``T``).  Set elements and dict keys must be hashable types.  Recursive types and attrs
fields with ``init=False`` are rejected.

The :attr:`Schema.fingerprint` is xxHash64 (seed 0) of a canonical description of the
tree -- module-qualified struct and enum names, field names, field types, enum values --
so it is the same in every process and on every machine.  It does not cover defaults.

>>> from attrs import define, field
>>> @define
... class Route:
...     flights: int = 0
...     delays: list[int] = field(factory=list)
>>> s = analyse(Route)
>>> print(s.describe())
Route
  flights: int = ...
  delays: list[int] = ...
>>> s.fingerprint == analyse(Route).fingerprint, len(s.fingerprint)
(True, 16)
>>> analyse(list[object])
Traceback (most recent call last):
...
tstate.errors.StateTypeError: state[]: type object is not encodable (a state type is built from attrs classes, list, tuple, dict, set, frozenset, int, float, str, bytes, bool, None, Optional, datetime, date, Enum, Map, Array and TypedDict)
"""

from __future__ import annotations

import datetime as _dt
import enum
import types
import typing
from typing import Any, Callable, Mapping, Optional, TypeVar

T = TypeVar("T")

import attrs
import xxhash
from attrs import field, frozen

from tstate.errors import StateTypeError
from tstate.types.tracked import Array, Map

__all__ = ["Kind", "Schema", "FieldSchema", "analyse", "describe", "root_label"]

_SUPPORTED = (
    "a state type is built from attrs classes, list, tuple, dict, set, frozenset, int, "
    "float, str, bytes, bool, None, Optional, datetime, date, Enum, Map, Array and TypedDict"
)


class Kind(enum.Enum):
    """What a schema node is.  The value is the node's name in :meth:`Schema.to_builtins`."""

    INT = "int"
    FLOAT = "float"
    STR = "str"
    BYTES = "bytes"
    BOOL = "bool"
    NONE = "none"
    DATETIME = "datetime"
    DATE = "date"
    ENUM = "enum"
    LIST = "list"
    TUPLE = "tuple"  # tuple[T, ...]
    FIXED_TUPLE = "fixed_tuple"  # tuple[A, B]
    DICT = "dict"
    SET = "set"
    FROZENSET = "frozenset"
    OPTIONAL = "optional"
    UNION = "union"  # of distinct scalars
    STRUCT = "struct"
    RECORD = "record"  # a TypedDict: a dict with known keys
    MAP = "map"  # tracked Map[K, V]
    ARRAY = "array"  # tracked Array[T]


#: Kinds whose values are Python scalars that msgpack encodes natively.
SCALAR_KINDS = frozenset({Kind.INT, Kind.FLOAT, Kind.STR, Kind.BYTES, Kind.BOOL, Kind.NONE})
_SCALAR_TYPES: dict[Any, Kind] = {
    int: Kind.INT,
    float: Kind.FLOAT,
    str: Kind.STR,
    bytes: Kind.BYTES,
    bool: Kind.BOOL,
    None: Kind.NONE,
    type(None): Kind.NONE,
    _dt.datetime: Kind.DATETIME,
    _dt.date: Kind.DATE,
}
_HASHABLE_LEAVES = SCALAR_KINDS | {Kind.DATETIME, Kind.DATE, Kind.ENUM, Kind.FROZENSET}
# Kinds whose encoded form is the same, for compatible_with: a list reads as an Array...
_ENCODING_CLASS = {
    Kind.LIST: "seq",
    Kind.TUPLE: "seq",
    Kind.ARRAY: "seq",
    Kind.SET: "set",
    Kind.FROZENSET: "set",
    Kind.DICT: "map",
    Kind.MAP: "map",
}


@frozen(repr=False)
class FieldSchema:
    """One field of a struct: its attribute ``name``, its ``__init__`` argument name
    (``alias``, e.g. ``x`` for a private ``_x``), its schema, and whether it has a default
    (which makes adding it compatible with state written before it existed)."""

    name: str
    schema: Schema
    has_default: bool = False
    alias: str = ""

    def __repr__(self) -> str:
        return f"FieldSchema({self.name}: {self.schema.name}{' = ...' if self.has_default else ''})"


@frozen(repr=False)
class Schema:
    """An immutable description of a state type (one node of the tree).

    ``kind`` says what it is; ``args`` are the child schemas (item of a list / set /
    Array; key and value of a dict / Map; the members of a fixed tuple or union; the
    inner type of an Optional); ``fields`` are a struct's fields; ``members`` an enum's
    ``(name, value)`` pairs; ``ref`` the module-qualified name of a struct or enum.
    ``py_type`` is the runtime class to check values against and ``tp`` the declared
    annotation; both are ``None`` for a schema read back with :meth:`from_builtins`.
    Equality compares descriptions, not the Python objects.

    >>> s = analyse(dict[str, list[int]])
    >>> s.kind, s.name, s.args[1].name
    (<Kind.DICT: 'dict'>, 'dict[str, list[int]]', 'list[int]')
    >>> Schema.from_builtins(s.to_builtins()) == s
    True
    """

    kind: Kind
    name: str
    args: tuple[Schema, ...] = ()
    fields: tuple[FieldSchema, ...] = ()
    members: tuple[tuple[str, Any], ...] = ()
    ref: str = ""
    py_type: Any = field(default=None, eq=False)
    tp: Any = field(default=None, eq=False)
    canonical: str = field(init=False, eq=False)
    fingerprint: str = field(init=False, eq=False)

    @canonical.default
    def _canonical(self) -> str:
        k = self.kind
        a = [s.canonical for s in self.args]
        if k in _SCALAR_TYPES.values():
            return k.value
        if k is Kind.ENUM:
            return f"enum {self.ref}(" + ",".join(f"{n}={v!r}" for n, v in self.members) + ")"
        if k is Kind.STRUCT or k is Kind.RECORD:
            body = ";".join(f"{f.name}:{f.schema.canonical}{'?' if k is Kind.RECORD and f.has_default else ''}" for f in self.fields)
            return f"{k.value} {self.ref}{{{body}}}"
        if k is Kind.TUPLE:
            return f"tuple[{a[0]},...]"
        if k is Kind.FIXED_TUPLE:
            return "tuple(" + ",".join(a) + ")"
        if k is Kind.UNION:
            return "union[" + "|".join(a) + "]"
        return f"{k.value}[" + ",".join(a) + "]"

    @fingerprint.default
    def _fingerprint(self) -> str:
        return xxhash.xxh64_hexdigest(self.canonical.encode("utf-8"))

    def __repr__(self) -> str:
        return f"Schema({self.name}, fingerprint={self.fingerprint})"

    # ------------------------------------------------------------------ reading it

    @property
    def is_scalar(self) -> bool:
        """``int``, ``float``, ``str``, ``bytes``, ``bool`` or ``None``."""
        return self.kind in SCALAR_KINDS

    @property
    def hashable(self) -> bool:
        """Whether values of this type can be set elements and dict keys."""
        k = self.kind
        if k in _HASHABLE_LEAVES:
            return True
        if k in (Kind.TUPLE, Kind.FIXED_TUPLE, Kind.OPTIONAL, Kind.UNION):
            return all(a.hashable for a in self.args)
        if k is Kind.STRUCT:
            cls_hashable = self.py_type is None or getattr(self.py_type, "__hash__", None) is not None
            return cls_hashable and all(f.schema.hashable for f in self.fields)
        return False

    def _segments(self) -> list[str]:
        """The path segment of each child in ``args``."""
        k = self.kind
        if k in (Kind.DICT, Kind.MAP):
            return ["{key}", "{}"]
        if k is Kind.FIXED_TUPLE:
            return [f"[{i}]" for i in range(len(self.args))]
        if k in (Kind.OPTIONAL, Kind.UNION):
            return [""] * len(self.args)
        return ["[]"] * len(self.args)

    def describe(self) -> str:
        """A readable tree: the type's name, then one line per struct field (nested
        ones by their path below the root), ``= ...`` marking fields with a default.

        >>> print(analyse(dict[str, int]).describe())
        dict[str, int]
        """
        lines = [self.name]

        def visit(node: Schema, path: str) -> None:
            if node.kind is Kind.STRUCT or node.kind is Kind.RECORD:
                for f in node.fields:
                    p = f"{path}.{f.name}" if path else f.name
                    mark = (" (may be absent)" if node.kind is Kind.RECORD else " = ...") if f.has_default else ""
                    lines.append(f"  {p}: {f.schema.name}{mark}")
                    visit(f.schema, p)
            else:
                for seg, child in zip(node._segments(), node.args):
                    visit(child, path + seg)

        visit(self, "")
        return "\n".join(lines)

    # ------------------------------------------------------------------ comparing

    def diff(self, other: Schema) -> str | None:
        """The first field path at which ``self`` and ``other`` differ (``None`` if their
        fingerprints are equal).  Paths use ``self``'s root label.

        >>> from attrs import make_class, field
        >>> A = make_class("A", {"x": field(type=int), "y": field(type=list[int])})
        >>> B = make_class("A", {"x": field(type=int), "y": field(type=list[str])})
        >>> analyse(A).diff(analyse(B))
        'A.y[]'
        """
        if self.fingerprint == other.fingerprint:
            return None
        return _diff(self, other, root_label(self))

    def compatible_with(self, old: Schema) -> str | None:
        """Whether state written with ``old`` can be read as ``self``: ``None`` if so,
        otherwise the reason, starting with the field path.

        Compatible changes: a struct field added *with a default*; ``T`` becoming
        ``Optional[T]`` or a union with ``T``; union or enum members added; a struct
        or enum renamed or moved; ``list``, ``tuple[T, ...]`` and ``Array`` read as
        each other, so do ``set`` and ``frozenset``, and ``dict`` and ``Map``.
        Anything else -- a field removed, added without a default, or changed in type
        -- is not.

        >>> from attrs import make_class, field
        >>> Old = make_class("Route", {"x": field(type=int)})
        >>> New = make_class("Route", {"x": field(type=int), "n": field(type=int, default=0)})
        >>> analyse(New).compatible_with(analyse(Old)) is None
        True
        >>> analyse(Old).compatible_with(analyse(New))
        'Route.n: field removed (state written with it cannot be read without it)'
        """
        if self.fingerprint == old.fingerprint:
            return None
        return _compatible(self, old, root_label(self))

    # ------------------------------------------------------------------ storing it

    def to_builtins(self) -> dict[str, Any]:
        """The schema as plain dicts / lists / strings (msgpack- and JSON-ready), to
        store beside a checkpoint and compare later with :meth:`compatible_with`."""
        out: dict[str, Any] = {"kind": self.kind.value, "name": self.name}
        if self.args:
            out["args"] = [a.to_builtins() for a in self.args]
        if self.fields:
            out["fields"] = [
                {"name": f.name, "alias": f.alias, "default": f.has_default, "schema": f.schema.to_builtins()}
                for f in self.fields
            ]
        if self.members:
            out["members"] = [[n, v] for n, v in self.members]
        if self.ref:
            out["ref"] = self.ref
        return out

    @classmethod
    def from_builtins(cls, obj: Mapping[str, Any]) -> Schema:
        """The inverse of :meth:`to_builtins` (without ``py_type`` / ``tp``)."""
        try:
            return cls(
                kind=Kind(obj["kind"]),
                name=obj["name"],
                args=tuple(cls.from_builtins(a) for a in obj.get("args", ())),
                fields=tuple(
                    FieldSchema(f["name"], cls.from_builtins(f["schema"]), bool(f["default"]), f["alias"])
                    for f in obj.get("fields", ())
                ),
                members=tuple((n, v) for n, v in obj.get("members", ())),
                ref=obj.get("ref", ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateTypeError(f"not a stored schema: {exc!r}") from None


def root_label(schema: Schema) -> str:
    """How field paths of ``schema`` start: the struct's (or record's) name, or ``state``."""
    if schema.kind is Kind.STRUCT or schema.kind is Kind.RECORD:
        return schema.name
    return "state"


def field_segment(schema: Schema, name: str) -> str:
    """The path segment of field ``name``: ``.name`` in a struct, ``{'name'}`` in a
    record (a dict)."""
    return f"{{{name!r}}}" if schema.kind is Kind.RECORD else f".{name}"


def describe(tp: Any) -> str:
    """:meth:`Schema.describe` of ``analyse(tp)``."""
    return analyse(tp).describe()


# ---------------------------------------------------------------------- comparing


def _diff(a: Schema, b: Schema, path: str) -> str | None:
    if a.fingerprint == b.fingerprint:
        return None
    if a.kind is not b.kind or a.ref != b.ref or a.members != b.members or len(a.args) != len(b.args):
        return path
    if a.kind is Kind.STRUCT or a.kind is Kind.RECORD:
        b_fields = {f.name: f for f in b.fields}
        for f in a.fields:
            g = b_fields.get(f.name)
            seg = path + field_segment(a, f.name)
            if g is None or g.has_default != f.has_default:
                return seg
            sub = _diff(f.schema, g.schema, seg)
            if sub is not None:
                return sub
        a_names = {f.name for f in a.fields}
        for g in b.fields:
            if g.name not in a_names:
                return path + field_segment(a, g.name)
        return path  # same fields in another order
    for seg, x, y in zip(a._segments(), a.args, b.args):
        sub = _diff(x, y, path + seg)
        if sub is not None:
            return sub
    return path


def _compatible(new: Schema, old: Schema, path: str) -> str | None:
    if new.fingerprint == old.fingerprint:
        return None
    if new.kind is Kind.OPTIONAL and old.kind is not Kind.OPTIONAL:
        if old.kind is Kind.NONE:
            return None
        return _compatible(new.args[0], old, path)
    if new.kind is Kind.UNION and old.kind in SCALAR_KINDS:
        if any(a.fingerprint == old.fingerprint for a in new.args):
            return None
    same_class = _ENCODING_CLASS.get(new.kind, new.kind) == _ENCODING_CLASS.get(old.kind, old.kind)
    if not same_class:
        return f"{path}: type changed from {old.name} to {new.name}"
    if new.kind is Kind.ENUM:
        missing = [v for _, v in old.members if v not in {nv for _, nv in new.members}]
        if missing:
            return f"{path}: enum value {missing[0]!r} of {old.name} no longer exists in {new.name}"
        return None
    if new.kind is Kind.STRUCT or new.kind is Kind.RECORD:
        new_fields = {f.name: f for f in new.fields}
        old_names = {f.name for f in old.fields}
        for f in old.fields:
            g = new_fields.get(f.name)
            seg = path + field_segment(new, f.name)
            if g is None:
                if new.kind is Kind.RECORD:  # a dict with an unknown key fails the check
                    return f"{seg}: key removed (state written with it cannot be read without it)"
                return f"{seg}: field removed (state written with it cannot be read without it)"
            if new.kind is Kind.RECORD and f.has_default and not g.has_default:
                return f"{seg}: key became required (state written before may lack it)"
            sub = _compatible(g.schema, f.schema, seg)
            if sub is not None:
                return sub
        for g in new.fields:
            if g.name not in old_names and not g.has_default:
                what = "key added as required" if new.kind is Kind.RECORD else "field added without a default"
                return f"{path}{field_segment(new, g.name)}: {what} (state written before has no value for it)"
        return None
    if new.kind is Kind.UNION:
        new_members = {a.fingerprint for a in new.args}
        for a in old.args:
            if a.fingerprint not in new_members:
                return f"{path}: {old.name} has {a.name}, {new.name} does not"
        return None
    if len(new.args) != len(old.args):
        return f"{path}: type changed from {old.name} to {new.name}"
    for seg, x, y in zip(new._segments(), new.args, old.args):
        sub = _compatible(x, y, path + seg)
        if sub is not None:
            return sub
    return None


# ---------------------------------------------------------------------- analysing

_CACHE: dict[Any, Schema] = {}



def by_type(cache: dict[Any, T], key: Any, build: Callable[[], T]) -> T:
    """``cache[key]``, built by ``build()`` the first time; an unhashable ``key`` (an
    ``Annotated`` type carrying a list...) is built each time, not cached.  What the
    compiled checkers, copiers and codecs of a declared type are kept in.

    >>> cache: dict = {}
    >>> by_type(cache, int, lambda: "built"), by_type(cache, list[int], lambda: "built"), len(cache)
    ('built', 'built', 2)
    """
    try:
        return cache[key]
    except KeyError:
        value = cache[key] = build()
        return value
    except TypeError:  # unhashable
        return build()


def analyse(tp: Any) -> Schema:
    """The :class:`Schema` of the declared state type ``tp``; the same object for equal
    types.  Raises :class:`~tstate.errors.StateTypeError` with the field path of the first
    part that cannot be encoded.

    >>> analyse(dict[int, str] | None).name
    'Optional[dict[int, str]]'
    >>> import typing
    >>> analyse(dict[str, typing.Any])
    Traceback (most recent call last):
    ...
    tstate.errors.StateTypeError: state{}: type Any is not encodable (a state type is built from attrs classes, list, tuple, dict, set, frozenset, int, float, str, bytes, bool, None, Optional, datetime, date, Enum, Map, Array and TypedDict)
    """
    try:
        return _CACHE[tp]
    except (KeyError, TypeError):
        pass
    if _struct_origin(tp) is not None:
        label = _struct_name(tp)
    elif typing.is_typeddict(tp):
        label = str(tp.__qualname__)
    else:
        label = "state"
    schema = _Analyser().node(tp, label, {})
    try:
        _CACHE[tp] = schema
    except TypeError:  # an unhashable annotation (Annotated with a list...)
        pass
    return schema


def _struct_origin(tp: Any) -> type | None:
    """The attrs class of ``tp`` (``Box`` for ``Box[int]``), or ``None``."""
    origin = typing.get_origin(tp) or tp
    if isinstance(origin, type) and attrs.has(origin):
        return origin
    return None


def _type_name(tp: Any) -> str:
    """A short readable name for an annotation: ``list[int]``, ``Route``, ``Any``."""
    if tp is None or tp is type(None):
        return "None"
    if not typing.get_args(tp) and isinstance(getattr(tp, "__qualname__", None), str):
        return str(tp.__qualname__)
    text = repr(tp).replace("NoneType", "None")
    for prefix in ("typing.", "collections.abc.", "builtins."):
        text = text.replace(prefix, "")
    return text


def _struct_name(tp: Any) -> str:
    """``Route``, or ``Box[int]`` for a generic struct."""
    cls = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    if args:
        return f"{cls.__qualname__}[{', '.join(_type_name(a) for a in args)}]"
    return str(cls.__qualname__)


def _reject(path: str, tp: Any, why: str | None = None) -> StateTypeError:
    return StateTypeError(f"{path}: type {_type_name(tp)} is not encodable ({why or _SUPPORTED})")


def _record(self: "_Analyser", tp: Any, path: str, tvars: dict[Any, Any]) -> Schema:
    if tp in self.stack:
        raise StateTypeError(f"{path}: type {tp.__qualname__} is recursive; recursive state types are not supported")
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except Exception as exc:  # NameError for a forward reference, ...
        raise StateTypeError(f"{path}: cannot resolve the annotations of {tp.__qualname__}: {exc}") from None
    # NotRequired[...] / Required[...] read from the hints too: with string annotations
    # (from __future__ import annotations) __required_keys__ cannot see them
    required = set(getattr(tp, "__required_keys__", frozenset(hints)))
    for name, hint in list(hints.items()):
        while typing.get_origin(hint) in (typing.NotRequired, typing.Required):
            (required.discard if typing.get_origin(hint) is typing.NotRequired else required.add)(name)
            hint = typing.get_args(hint)[0]
        hints[name] = hint
    self.stack.append(tp)
    try:
        fields = tuple(
            FieldSchema(name, self.node(hint, f"{path}{{{name!r}}}", tvars), name not in required, name)
            for name, hint in hints.items()
        )
    finally:
        self.stack.pop()
    return Schema(Kind.RECORD, str(tp.__qualname__), fields=fields, ref=_ref(tp), py_type=dict, tp=tp)


class _Analyser:
    """One analysis: keeps the structs on the current path to reject recursive types."""

    def __init__(self) -> None:
        self.stack: list[type] = []

    def node(self, tp: Any, path: str, tvars: dict[Any, Any]) -> Schema:
        if isinstance(tp, typing.TypeVar):
            if tp not in tvars:
                raise StateTypeError(
                    f"{path}: type variable {tp!r} is not bound (declare a generic struct with "
                    "its type arguments, e.g. Box[int], not Box)"
                )
            tp = tvars[tp]
        elif tvars and getattr(tp, "__parameters__", None):
            tp = tp[tuple(tvars.get(p, p) for p in tp.__parameters__)]
        try:
            kind = _SCALAR_TYPES.get(tp)
        except TypeError:  # unhashable annotation object
            kind = None
        if kind is not None:
            py = type(None) if kind is Kind.NONE else tp
            return Schema(kind, _type_name(tp), py_type=py, tp=tp)
        if isinstance(tp, str) or isinstance(tp, typing.ForwardRef):
            raise StateTypeError(f"{path}: annotation {tp!r} is a string that could not be resolved to a type")
        supertype = getattr(tp, "__supertype__", None)
        if supertype is not None:  # typing.NewType
            return self.node(supertype, path, tvars)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self.node(args[0], path, tvars)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return self.enum(tp, path)
        if _struct_origin(tp) is not None:
            return self.struct(tp, path, tvars)
        if typing.is_typeddict(tp):
            return self.record(tp, path, tvars)
        if origin is typing.Union or origin is types.UnionType:
            return self.union(tp, args, path, tvars)
        collection = self.collection(tp, origin, args, path, tvars)
        if collection is not None:
            return collection
        if tp in (list, tuple, dict, set, frozenset, Array, Map):
            raise _reject(path, tp, f"give the item types, e.g. {tp.__name__}[int]")
        if isinstance(tp, type) and tp.__module__ not in ("builtins", "typing"):
            raise _reject(path, tp, "not an attrs class: declare it with @attrs.define or @attrs.frozen")
        raise _reject(path, tp)

    def collection(
        self, tp: Any, origin: Any, args: tuple[Any, ...], path: str, tvars: dict[Any, Any]
    ) -> Optional[Schema]:
        """The schema of ``tp`` if it is a list, ``Array``, tuple, dict, ``Map``, set or
        frozenset with its item types (None: another kind of type)."""
        if origin is list or origin is Array:
            if len(args) != 1:
                raise _reject(path, tp, "give the item type, e.g. list[int]")
            item = self.node(args[0], path + "[]", tvars)
            kind = Kind.LIST if origin is list else Kind.ARRAY
            name = f"{'list' if origin is list else 'Array'}[{item.name}]"
            return Schema(kind, name, (item,), py_type=origin, tp=tp)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                item = self.node(args[0], path + "[]", tvars)
                return Schema(Kind.TUPLE, f"tuple[{item.name}, ...]", (item,), py_type=tuple, tp=tp)
            if args == ((),):  # tuple[()] on older Pythons
                args = ()
            items = tuple(self.node(a, f"{path}[{i}]", tvars) for i, a in enumerate(args))
            name = "tuple[" + (", ".join(i.name for i in items) or "()") + "]"
            return Schema(Kind.FIXED_TUPLE, name, items, py_type=tuple, tp=tp)
        if origin is dict or origin is Map:
            if len(args) != 2:
                raise _reject(path, tp, "give the key and value types, e.g. dict[str, int]")
            key = self.node(args[0], path + "{key}", tvars)
            if not key.hashable:
                raise StateTypeError(f"{path}{{key}}: type {key.name} is not hashable, so it cannot be a dict key")
            value = self.node(args[1], path + "{}", tvars)
            kind = Kind.DICT if origin is dict else Kind.MAP
            name = f"{'dict' if origin is dict else 'Map'}[{key.name}, {value.name}]"
            return Schema(kind, name, (key, value), py_type=origin, tp=tp)
        if origin is set or origin is frozenset:
            if len(args) != 1:
                raise _reject(path, tp, "give the element type, e.g. set[str]")
            item = self.node(args[0], path + "[]", tvars)
            if not item.hashable:
                raise StateTypeError(f"{path}[]: type {item.name} is not hashable, so it cannot be a set element")
            kind = Kind.SET if origin is set else Kind.FROZENSET
            return Schema(kind, f"{origin.__name__}[{item.name}]", (item,), py_type=origin, tp=tp)
        return None

    def enum(self, tp: type[enum.Enum], path: str) -> Schema:
        members = tuple((m.name, m.value) for m in tp)
        value_types = {type(v) for _, v in members}
        if not members or not (value_types <= {int} or value_types <= {str}):
            raise _reject(path, tp, "an enum's values must be all int or all str")
        return Schema(Kind.ENUM, tp.__qualname__, members=members, ref=_ref(tp), py_type=tp, tp=tp)

    def union(self, tp: Any, args: tuple[Any, ...], path: str, tvars: dict[Any, Any]) -> Schema:
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):  # Optional
            inner_tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
            inner = self.node(inner_tp, path, tvars)
            return Schema(Kind.OPTIONAL, f"Optional[{inner.name}]", (inner,), py_type=None, tp=tp)
        members = [self.node(a, path, tvars) for a in rest]
        kinds = [m.kind for m in members]
        scalar = SCALAR_KINDS - {Kind.NONE}
        if not all(k in scalar for k in kinds) or len(set(kinds)) != len(kinds):
            raise _reject(
                path, tp, "a union may only combine distinct scalars (int, float, str, bytes, bool) and None"
            )
        members.sort(key=lambda m: m.canonical)
        name = " | ".join(m.name for m in members)
        return Schema(Kind.UNION, name, tuple(members), py_type=None, tp=tp)

    record = _record

    def struct(self, tp: Any, path: str, tvars: dict[Any, Any]) -> Schema:
        cls = _struct_origin(tp)
        assert cls is not None
        if cls in self.stack:
            raise StateTypeError(f"{path}: type {cls.__qualname__} is recursive; recursive state types are not supported")
        try:
            attrs.resolve_types(cls)
        except Exception as exc:  # NameError for a forward reference, ...
            raise StateTypeError(f"{path}: cannot resolve the annotations of {cls.__qualname__}: {exc}") from None
        params = getattr(cls, "__parameters__", ())
        args = typing.get_args(tp)
        own_tvars = dict(zip(params, (tvars.get(a, a) for a in args))) if args else {}
        self.stack.append(cls)
        try:
            fields = []
            for a in attrs.fields(cls):
                fpath = f"{path}.{a.name}"
                if a.type is None:
                    raise StateTypeError(f"{fpath}: field has no type annotation; every state field needs one")
                if not a.init:
                    raise StateTypeError(
                        f"{fpath}: field has init=False, so it could not be restored from a checkpoint"
                    )
                child = self.node(a.type, fpath, own_tvars)
                has_default = a.default is not attrs.NOTHING
                fields.append(FieldSchema(a.name, child, has_default, a.alias or a.name))
        finally:
            self.stack.pop()
        return Schema(Kind.STRUCT, _struct_name(tp), fields=tuple(fields), ref=_ref(cls), py_type=cls, tp=tp)


def _ref(cls: type) -> str:
    """``module.Qualname`` of a struct or enum class (a generic struct's instances differ
    by their field types, which the canonical description has anyway)."""
    return f"{cls.__module__}.{cls.__qualname__}"
