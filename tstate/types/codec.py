"""Encoding typed state: cattrs (un)structuring + msgpack, checked, with deltas.

A :class:`StateCodec` is built once per declared state type (``StateCodec(Route)``
returns the same codec every time) and turns values into bytes and back.  Every encode
first :meth:`~StateCodec.check`\\ s the value against the declaration, so a wrongly typed
value raises :class:`~tstate.errors.StateTypeError` with its field path instead of being
stored.

**Encoded form** (msgpack, ``use_bin_type=True``): structs as maps of field name to
value (so a field added with a default can be read from older state); lists, tuples,
sets, frozensets and ``Array`` as arrays; dicts, ``TypedDict`` records and ``Map`` with ``str`` keys as maps,
with other keys as arrays of ``[key, value]`` pairs (so keys of any type round-trip);
``datetime`` / ``date`` as ISO-8601 strings (an aware datetime keeps its UTC offset);
enums by value; ``bytes`` as bin.  :meth:`~StateCodec.to_builtins` returns that form as
fresh Python containers sharing nothing mutable with the value -- a safe snapshot to
encode later on another thread.

**Deltas.**  When the state *is* a tracked container (``Map`` / ``Array``), or is a
struct with tracked containers as direct fields, :meth:`~StateCodec.encode_delta`
encodes only what changed since the containers were last marked clean (other fields
of the struct are encoded whole, and a container that was never marked clean is sent
whole); :meth:`~StateCodec.apply_delta` applies it to the previously decoded value.
Tracked containers deeper inside the state are encoded whole.  The property:
``apply_delta(decode(encode(v0)), encode_delta(v1)) == v1`` when ``v1`` is ``v0``
changed in place after ``mark_clean``.

**Envelopes.**  :func:`encode_envelope` stores a schema fingerprint beside a payload;
:func:`decode_envelope` refuses a payload written with another fingerprint
(:class:`~tstate.errors.SchemaMismatchError`).

>>> from attrs import define, field
>>> @define
... class Route:
...     flights: int = 0
...     delays: list[int] = field(factory=list)
>>> codec = StateCodec(Route)
>>> codec.decode(codec.encode(Route(2, [5, 7])))
Route(flights=2, delays=[5, 7])
>>> codec.encode(Route(2, [5, "7"]))
Traceback (most recent call last):
...
tstate.errors.StateTypeError: Route.delays[1]: expected int, got str '7'
"""

from __future__ import annotations

import datetime as _dt
import threading
import types
import typing
from collections.abc import Set as AbstractSet
from typing import Any, Callable

import attrs
import cattrs
import msgpack
from cattrs.fns import identity

from tstate.errors import SchemaMismatchError, StateTypeError
from tstate.types.check import Checker, Mismatch, compile_checker
from tstate.types.schema import Kind, Schema, analyse, root_label
from tstate.types.tracked import Array, Map

__all__ = ["StateCodec", "encode_envelope", "decode_envelope", "converter"]

# ---------------------------------------------------------------------- msgpack

_local = threading.local()


def _pack(obj: Any) -> bytes:
    """msgpack-encode with this thread's reusable Packer (much faster than packb)."""
    try:
        packer = _local.packer
    except AttributeError:
        packer = _local.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(obj)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StateTypeError(f"cannot decode state: not valid msgpack ({exc})") from None


# ---------------------------------------------------------------------- cattrs

_UNIONS = (typing.Union, types.UnionType)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in _UNIONS


def _is_mapping(tp: Any) -> bool:
    return typing.get_origin(tp) in (dict, Map)


def _is_array(tp: Any) -> bool:
    return typing.get_origin(tp) is Array


def _is_record(tp: Any) -> bool:
    return typing.is_typeddict(tp)


def _make_converter() -> cattrs.Converter:
    """The one converter for all state types (hooks are generated per type, lazily)."""
    c = cattrs.Converter(detailed_validation=False, unstruct_collection_overrides={AbstractSet: list})
    c.register_unstructure_hook(_dt.datetime, _dt.datetime.isoformat)
    c.register_structure_hook(_dt.datetime, lambda v, _: _dt.datetime.fromisoformat(v))
    c.register_unstructure_hook(_dt.date, _dt.date.isoformat)
    c.register_structure_hook(_dt.date, lambda v, _: _dt.date.fromisoformat(v))
    c.register_structure_hook(type(None), lambda v, _: None)

    def unstructure_union(tp: Any) -> Callable[[Any], Any]:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == len(typing.get_args(tp)):
            return identity  # a union of scalars
        inner = c.get_unstructure_hook(rest[0] if len(rest) == 1 else typing.Union[tuple(rest)])
        if inner is identity:
            return identity

        def unstructure_optional(v: Any) -> Any:
            return None if v is None else inner(v)

        return unstructure_optional

    def structure_union(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            inner_tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
            inner = c.get_structure_hook(inner_tp)

            def structure_optional(v: Any, _: Any) -> Any:
                return None if v is None else inner(v, inner_tp)

            return structure_optional
        to_float = float in rest and int not in rest

        def structure_scalar_union(v: Any, _: Any) -> Any:
            return float(v) if to_float and type(v) is int else v

        return structure_scalar_union

    def unstructure_mapping(tp: Any) -> Callable[[Any], Any]:
        key_tp, value_tp = typing.get_args(tp)
        ku, vu = c.get_unstructure_hook(key_tp), c.get_unstructure_hook(value_tp)
        tracked = typing.get_origin(tp) is Map
        if key_tp is str:
            if vu is identity:
                return (lambda m: dict(m._data)) if tracked else dict
            if tracked:
                return lambda m: {k: vu(v) for k, v in m._data.items()}
            return lambda d: {k: vu(v) for k, v in d.items()}
        if tracked:
            return lambda m: [[ku(k), vu(v)] for k, v in m._data.items()]
        return lambda d: [[ku(k), vu(v)] for k, v in d.items()]

    def structure_mapping(tp: Any) -> Callable[[Any, Any], Any]:
        key_tp, value_tp = typing.get_args(tp)
        ks, vs = c.get_structure_hook(key_tp), c.get_structure_hook(value_tp)
        wrap: Callable[[dict[Any, Any]], Any] = Map._clean if typing.get_origin(tp) is Map else identity

        def structure(obj: Any, _: Any) -> Any:
            pairs = obj.items() if isinstance(obj, dict) else obj
            return wrap({ks(k, key_tp): vs(v, value_tp) for k, v in pairs})

        return structure

    def unstructure_array(tp: Any) -> Callable[[Any], Any]:
        (item_tp,) = typing.get_args(tp)
        iu = c.get_unstructure_hook(item_tp)
        if iu is identity:
            return lambda a: list(a._data)
        return lambda a: [iu(x) for x in a._data]

    def structure_array(tp: Any) -> Callable[[Any, Any], Any]:
        (item_tp,) = typing.get_args(tp)
        as_list = c.get_structure_hook(list[item_tp])  # type: ignore[valid-type]
        return lambda obj, _: Array._clean(as_list(obj, list[item_tp]))  # type: ignore[valid-type]

    def unstructure_record(tp: Any) -> Callable[[Any], Any]:
        hooks = {k: c.get_unstructure_hook(h) for k, h in typing.get_type_hints(tp).items()}
        if all(h is identity for h in hooks.values()):
            return dict
        return lambda d: {k: hooks[k](v) for k, v in d.items()}

    def structure_record(tp: Any) -> Callable[[Any, Any], Any]:
        hints = typing.get_type_hints(tp)
        hooks = {k: (c.get_structure_hook(h), h) for k, h in hints.items()}

        def structure(obj: Any, _: Any) -> Any:
            return {k: hooks[k][0](v, hooks[k][1]) for k, v in obj.items()}

        return structure

    c.register_unstructure_hook_factory(_is_record, unstructure_record)
    c.register_structure_hook_factory(_is_record, structure_record)
    c.register_unstructure_hook_factory(_is_union, unstructure_union)
    c.register_structure_hook_factory(_is_union, structure_union)
    c.register_unstructure_hook_factory(_is_mapping, unstructure_mapping)
    c.register_structure_hook_factory(_is_mapping, structure_mapping)
    c.register_unstructure_hook_factory(_is_array, unstructure_array)
    c.register_structure_hook_factory(_is_array, structure_array)
    # Registered last, so asked first: msgpack already decodes list[int] right.
    c.register_structure_hook_factory(_decodes_as_is, lambda tp: _as_is)
    return c


def _decodes_as_is(tp: Any) -> bool:
    """Whether decoded msgpack is already a value of the list / dict type ``tp``."""
    if typing.get_origin(tp) not in (list, dict):
        return False
    try:
        return _plain_for_decode(analyse(tp))
    except StateTypeError:
        return False


def _as_is(obj: Any, _: Any) -> Any:
    return obj


#: The cattrs converter configured for state types (see the module docstring).
converter = _make_converter()


def _tp(schema: Schema) -> Any:
    """The annotation to ask cattrs about (``NoneType`` for ``None``)."""
    return type(None) if schema.kind is Kind.NONE else schema.tp


def _plain_for_decode(schema: Schema) -> bool:
    """Whether the msgpack-decoded form of ``schema`` already is the value."""
    k = schema.kind
    if k in (Kind.INT, Kind.STR, Kind.BYTES, Kind.BOOL, Kind.NONE):
        return True
    if k is Kind.LIST or k is Kind.OPTIONAL:
        return _plain_for_decode(schema.args[0])
    if k is Kind.DICT:
        return schema.args[0].kind is Kind.STR and _plain_for_decode(schema.args[1])
    if k is Kind.UNION:
        return all(a.kind is not Kind.FLOAT for a in schema.args)
    if k is Kind.RECORD:
        return all(_plain_for_decode(f.schema) for f in schema.fields)
    return False


def _cleaner(schema: Schema) -> Callable[[Any], None] | None:
    """A function marking every tracked container inside a value clean, or ``None``
    when the type holds no tracked container."""
    k = schema.kind
    if k is Kind.STRUCT or k is Kind.RECORD:
        parts = [(f.name, _cleaner(f.schema)) for f in schema.fields]
        fields = [(name, fn) for name, fn in parts if fn is not None]
        if not fields:
            return None
        if k is Kind.RECORD:

            def clean_record(v: Any) -> None:
                for name, fn in fields:
                    if name in v:
                        fn(v[name])

            return clean_record

        def clean_struct(v: Any) -> None:
            for name, fn in fields:
                fn(getattr(v, name))

        return clean_struct
    subs = [_cleaner(a) for a in schema.args]
    if k is Kind.MAP or k is Kind.ARRAY:
        inner = subs[-1]

        def clean_tracked(v: Any) -> None:
            v.mark_clean()
            if inner is not None:
                for x in v._data.values() if k is Kind.MAP else v._data:
                    inner(x)

        return clean_tracked
    if not any(subs):
        return None
    if k is Kind.OPTIONAL:
        inner_fn = subs[0]
        assert inner_fn is not None

        def clean_optional(v: Any) -> None:
            if v is not None:
                inner_fn(v)

        return clean_optional
    if k is Kind.FIXED_TUPLE:
        pairs = [(i, fn) for i, fn in enumerate(subs) if fn is not None]

        def clean_tuple(v: Any) -> None:
            for i, fn in pairs:
                fn(v[i])

        return clean_tuple
    item_fn = subs[-1]  # of a list, tuple[T, ...] or dict value (set items are hashable: untracked)
    assert item_fn is not None
    values = k is Kind.DICT

    def clean_items(v: Any) -> None:
        for x in v.values() if values else v:
            item_fn(x)

    return clean_items


# ---------------------------------------------------------------------- deltas

_REPLACE, _MAP, _ARRAY, _STRUCT = 0, 1, 2, 3


class _Part:
    """How one (un)structures, checks and delta-encodes a part of the state."""

    __slots__ = ("schema", "tp", "check", "type_check", "unstructure", "structure", "kind", "key", "item")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.tp = _tp(schema)
        self.check: Checker = compile_checker(schema)
        self.type_check: Checker = compile_checker(schema, ranges=False)
        self.unstructure: Callable[[Any], Any] = converter.get_unstructure_hook(self.tp)
        self.structure: Callable[[Any, Any], Any] = converter.get_structure_hook(self.tp)
        self.kind = schema.kind
        self.key: _Part | None = None
        self.item: _Part | None = None
        if schema.kind is Kind.MAP:
            self.key, self.item = _Part(schema.args[0]), _Part(schema.args[1])
        elif schema.kind is Kind.ARRAY:
            self.item = _Part(schema.args[0])

    def full(self, value: Any) -> list[Any]:
        self.check(value)
        return [_REPLACE, self.unstructure(value)]

    def delta(self, value: Any) -> list[Any]:
        """The delta of a value of this part (checking what it encodes)."""
        if self.kind is Kind.MAP and type(value) is Map and value.has_base:
            return self._map_delta(value)
        if self.kind is Kind.ARRAY and type(value) is Array and value.has_base:
            return self._array_delta(value)
        return self.full(value)

    def _map_delta(self, m: Map[Any, Any]) -> list[Any]:
        key, item = self.key, self.item
        assert key is not None and item is not None
        data = m._data
        changed, deleted = [], []
        for k in m._changed:
            try:
                key.check(k)
            except Mismatch as e:
                raise e.at("{key}") from None
            v = data[k]
            try:
                item.check(v)
            except Mismatch as e:
                raise e.at(f"{{{k!r}}}") from None
            changed.append([key.unstructure(k), item.unstructure(v)])
        for k in m._deleted:
            try:
                key.check(k)
            except Mismatch as e:
                raise e.at("{key}") from None
            deleted.append(key.unstructure(k))
        return [_MAP, changed, deleted]

    def _array_delta(self, a: Array[Any]) -> list[Any]:
        item = self.item
        assert item is not None
        data, keep = a._data, a._keep
        overwritten, appended = [], []
        for i in sorted(a._overwritten):
            try:
                item.check(data[i])
            except Mismatch as e:
                raise e.at(f"[{i}]") from None
            overwritten.append([i, item.unstructure(data[i])])
        for i in range(keep, len(data)):
            try:
                item.check(data[i])
            except Mismatch as e:
                raise e.at(f"[{i}]") from None
            appended.append(item.unstructure(data[i]))
        return [_ARRAY, keep, overwritten, appended]

    def apply(self, base: Any, delta: Any, path: str) -> Any:
        """``base`` with ``delta`` applied (tracked containers are updated in place)."""
        tag = delta[0]
        if tag == _REPLACE:
            return self.structure(delta[1], self.tp)
        if tag == _MAP and self.kind is Kind.MAP and type(base) is Map:
            key, item = self.key, self.item
            assert key is not None and item is not None
            base._apply(
                ((key.structure(k, key.tp), item.structure(v, item.tp)) for k, v in delta[1]),
                (key.structure(k, key.tp) for k in delta[2]),
            )
            return base
        if tag == _ARRAY and self.kind is Kind.ARRAY and type(base) is Array:
            item = self.item
            assert item is not None
            base._apply(
                delta[1],
                ((i, item.structure(v, item.tp)) for i, v in delta[2]),
                [item.structure(v, item.tp) for v in delta[3]],
            )
            return base
        raise StateTypeError(
            f"{path}: cannot apply this delta to a {type(base).__qualname__} (declared {self.schema.name})"
        )


# ---------------------------------------------------------------------- the codec

_CODECS: dict[Any, StateCodec] = {}


class StateCodec:
    """Encoder / decoder of one declared state type.  ``StateCodec(tp)`` analyses ``tp``
    (raising :class:`~tstate.errors.StateTypeError` if it cannot be encoded) and
    returns the same codec for the same type every time.  Thread-safe.

    >>> codec = StateCodec(dict[tuple[str, int], float])
    >>> codec.to_builtins({("ATL", 1): 2.5})
    [[('ATL', 1), 2.5]]
    >>> codec.decode(codec.encode({("ATL", 1): 2.5}))
    {('ATL', 1): 2.5}
    """

    __slots__ = (
        "tp",
        "schema",
        "fingerprint",
        "_label",
        "_root",
        "_scalar",
        "_plain_decode",
        "_fields",
        "_clean",
        "__weakref__",
    )

    tp: Any
    schema: Schema
    fingerprint: str
    _label: str
    _root: _Part
    _scalar: bool
    _plain_decode: bool
    _fields: list[tuple[str, str, _Part]] | None
    _clean: Callable[[Any], None] | None

    def __new__(cls, tp: Any) -> StateCodec:
        try:
            return _CODECS[tp]
        except KeyError:
            pass
        except TypeError:  # an unhashable annotation: no caching
            return cls._build(tp)
        codec = _CODECS[tp] = cls._build(tp)
        return codec

    @classmethod
    def _build(cls, tp: Any) -> StateCodec:
        self = object.__new__(cls)
        schema = analyse(tp)
        self.tp = tp
        self.schema = schema
        self.fingerprint = schema.fingerprint
        self._label = root_label(schema)
        self._root = _Part(schema)
        self._scalar = schema.is_scalar
        self._plain_decode = _plain_for_decode(schema)
        self._fields = None
        if schema.kind is Kind.STRUCT and any(f.schema.kind in (Kind.MAP, Kind.ARRAY) for f in schema.fields):
            self._fields = [(f.name, f.alias, _Part(f.schema)) for f in schema.fields]
        self._clean = _cleaner(schema)
        return self

    def __repr__(self) -> str:
        return f"StateCodec({self.schema.name}, fingerprint={self.fingerprint})"

    # ---------------------------------------------------------------- checking

    def check(self, value: Any, path_prefix: str | None = None) -> None:
        """Raise :class:`~tstate.errors.StateTypeError` unless ``value`` matches the
        declaration.  The field path starts with ``path_prefix`` (default: the struct's
        name, or ``state``), e.g. ``Route.delays[3]: expected int, got str 'x'``."""
        try:
            self._root.check(value)
        except Mismatch as m:
            raise m.error(self._label if path_prefix is None else path_prefix) from None

    # ---------------------------------------------------------------- whole values

    def to_builtins(self, value: Any) -> Any:
        """The checked, msgpack-ready form of ``value`` (see the module docstring)."""
        root = self._root
        try:
            root.check(value)
        except Mismatch as m:
            raise m.error(self._label) from None
        return value if self._scalar else root.unstructure(value)

    def from_builtins(self, obj: Any) -> Any:
        """The value of a :meth:`to_builtins` form (tracked containers come back clean)."""
        root = self._root
        try:
            return root.structure(obj, root.tp)
        except StateTypeError:
            raise
        except Exception as exc:
            raise StateTypeError(f"{self._label}: cannot decode the stored value as {self.schema.name}: {exc!r}") from None

    def encode(self, value: Any) -> bytes:
        """``value`` checked and encoded as msgpack bytes."""
        root = self._root
        try:
            root.type_check(value)  # msgpack itself refuses ints out of range
            return _pack(value if self._scalar else root.unstructure(value))
        except Mismatch as m:
            raise m.error(self._label) from None
        except OverflowError:
            self.check(value)  # finds the int out of range and raises with its path
            raise  # pragma: no cover

    def decode(self, data: bytes) -> Any:
        """The value encoded in ``data`` by :meth:`encode`."""
        obj = _unpack(data)
        if self._plain_decode:
            return obj
        return self.from_builtins(obj)

    # ---------------------------------------------------------------- deltas

    def delta_builtins(self, value: Any) -> list[Any]:
        """The msgpack-ready delta of ``value`` since its tracked containers were last
        marked clean (the whole value when it has none; see the module docstring).
        Does not mark anything clean."""
        try:
            fields = self._fields
            if fields is None:
                return self._root.delta(value)
            if type(value) is not self.schema.py_type:
                raise Mismatch(self.schema.name, value)
            out: dict[str, Any] = {}
            for name, _, part in fields:
                try:
                    out[name] = part.delta(getattr(value, name))
                except Mismatch as m:
                    raise m.at("." + name) from None
            return [_STRUCT, out]
        except Mismatch as m:
            raise m.error(self._label) from None

    def encode_delta(self, value: Any, *, clean: bool = True) -> bytes:
        """:meth:`delta_builtins` as bytes; then, with ``clean``, :meth:`mark_clean`."""
        data = _pack(self.delta_builtins(value))
        if clean:
            self.mark_clean(value)
        return data

    def apply_delta(self, base: Any, delta: bytes | list[Any]) -> Any:
        """``base`` (the previously decoded value) with ``delta`` (from
        :meth:`encode_delta` or :meth:`delta_builtins`) applied.  Tracked containers of
        ``base`` are updated in place and come back clean; a mutable struct is updated
        in place, a frozen one replaced.  Use the returned value."""
        obj = _unpack(delta) if isinstance(delta, (bytes, bytearray, memoryview)) else delta
        try:
            if obj[0] != _STRUCT:
                return self._root.apply(base, obj, self._label)
            if self._fields is None or type(base) is not self.schema.py_type:
                raise StateTypeError(f"{self._label}: a struct delta does not fit a {type(base).__qualname__}")
            changes: list[tuple[str, str, Any]] = []
            for name, alias, part in self._fields:
                sub = obj[1].get(name)
                if sub is None:
                    raise StateTypeError(f"{self._label}.{name}: missing from the delta")
                old = getattr(base, name)
                new = part.apply(old, sub, f"{self._label}.{name}")
                if new is not old:
                    changes.append((name, alias, new))
            try:
                for name, _, new in changes:
                    setattr(base, name, new)
            except attrs.exceptions.FrozenInstanceError:
                return attrs.evolve(base, **{alias: new for _, alias, new in changes})
            return base
        except StateTypeError:
            raise
        except Exception as exc:
            raise StateTypeError(f"{self._label}: cannot apply the delta: {exc!r}") from None

    def mark_clean(self, value: Any) -> None:
        """Mark every tracked container inside ``value`` clean (after a checkpoint
        stored it whole or as a delta)."""
        if self._clean is not None:
            self._clean(value)


# ---------------------------------------------------------------------- envelopes

_MAGIC = "tstate.state/1"


def encode_envelope(fingerprint: str, payload: Any) -> bytes:
    """A stored bin: ``payload`` (msgpack-ready builtins, e.g. from
    :meth:`StateCodec.to_builtins`) with the schema ``fingerprint`` it was written with.

    >>> codec = StateCodec(int)
    >>> data = encode_envelope(codec.fingerprint, {"k": codec.to_builtins(3)})
    >>> decode_envelope(data, codec.fingerprint)
    {'k': 3}
    >>> decode_envelope(data, StateCodec(str).fingerprint)
    Traceback (most recent call last):
    ...
    tstate.errors.SchemaMismatchError: state written with schema fingerprint 60f24396f77057c3, but the state type now has fingerprint 78b3543307abce43: the declared state type changed since it was written
    """
    return _pack([_MAGIC, fingerprint, payload])


def decode_envelope(data: bytes, expected_fingerprint: str) -> Any:
    """The payload of :func:`encode_envelope`, after checking its fingerprint: raises
    :class:`~tstate.errors.SchemaMismatchError` if it differs from
    ``expected_fingerprint``, :class:`~tstate.errors.StateTypeError` if ``data`` is not an
    envelope."""
    obj = _unpack(data)
    if type(obj) is not list or len(obj) != 3 or obj[0] != _MAGIC:
        raise StateTypeError("cannot decode state: not a tstate state envelope")
    if obj[1] != expected_fingerprint:
        raise SchemaMismatchError(
            f"state written with schema fingerprint {obj[1]}, but the state type now has fingerprint "
            f"{expected_fingerprint}: the declared state type changed since it was written"
        )
    return obj[2]
