"""Encoding typed state: msgspec (typed MessagePack), checked, with deltas.

A :class:`StateCodec` is built once per declared state type (``StateCodec(Route)``
returns the same codec every time) and turns values into bytes and back.  Every encode
first checks the value against the declaration, so a wrongly typed value raises
:class:`~tstate.errors.StateTypeError` with its field path instead of being stored.

**Bytes** (:meth:`~StateCodec.encode` / :meth:`~StateCodec.decode`) are checkpoint
format 2 (:mod:`tstate.types.wire`): msgspec encodes the checked value as it is and
decodes it typed -- the declared attrs classes, tuples, sets, enums, dates and tracked
containers come straight out of the decoder, which checks every value on the way.
Where msgspec cannot do that for a kind of state (:func:`~tstate.types.wire.encodes_natively`,
:func:`~tstate.types.wire.decodes_natively`), the value goes through its builtins form
(cattrs, :mod:`tstate.types.builtins`) instead; so does anything a typed decoder
refuses, which is how format 1's bytes are read.

**Builtins** (:meth:`~StateCodec.to_builtins` / :meth:`~StateCodec.from_builtins`):
structs as maps of field name to value (so a field added with a default can be read
from older state); lists, tuples, sets, frozensets and ``Array`` as lists; dicts and
``Map`` with ``str`` keys as dicts, with other keys as lists of ``[key, value]`` pairs;
``datetime`` / ``date`` as ISO-8601 strings (an aware datetime keeps its UTC offset);
enums by value; ``bytes`` as bytes.  ``to_builtins`` returns fresh containers sharing
nothing mutable with the value.  That is format 1's form of a value; format 2 differs
only in writing every dict as a map.

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

import typing
from typing import Any, Callable, Iterable

import attrs
import msgspec

from tstate.errors import SchemaMismatchError, StateTypeError
from tstate.types import wire
from tstate.types.builtins import converter, plain_for_decode, wire_converter
from tstate.types.copier import compile_copier
from tstate.types.check import Checker, Mismatch, VectorChecker, compile_checker, compile_vector_checker
from tstate.types.schema import Kind, Schema, analyse, root_label
from tstate.types.tracked import Array, Map

__all__ = ["StateCodec", "encode_envelope", "decode_envelope", "open_envelope", "converter", "MAGIC", "MAGIC_FORMAT_1"]


def _tp(schema: Schema) -> Any:
    """The annotation to ask cattrs and msgspec about (``NoneType`` for ``None``)."""
    return type(None) if schema.kind is Kind.NONE else schema.tp


def _msgspec_decoder(schema: Schema) -> tuple[Any, Any, Callable[[Any], Any] | None]:
    """``(decoder, annotation, wrap)`` decoding a value of ``schema`` typed, or
    ``(None, None, None)`` when msgspec cannot.  A top-level ``Map`` / ``Array`` is
    decoded as a dict / list and wrapped (cheaper than the decode hook)."""
    if not wire.decodes_natively(schema):
        return None, None, None
    tp: Any = _tp(schema)
    wrap: Callable[[Any], Any] | None = None
    if schema.kind is Kind.MAP:
        tp, wrap = dict[_tp(schema.args[0]), _tp(schema.args[1])], Map._clean  # type: ignore[misc]
    elif schema.kind is Kind.ARRAY:
        tp, wrap = list[_tp(schema.args[0])], Array._clean  # type: ignore[misc]
    try:
        return wire.typed_decoder(tp), tp, wrap
    except (TypeError, ValueError):  # a type msgspec refuses (e.g. an exotic attrs default)
        return None, None, None


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
    """How one (un)structures, checks and delta-encodes a part of the state.

    ``unstructure`` / ``structure`` are the builtins form (cattrs; what
    :meth:`StateCodec.delta_builtins` holds); ``wire`` / ``unwire`` the fast form of
    :meth:`StateCodec.encode_delta`'s bytes (the value itself where msgspec encodes it
    natively, built back by ``msgspec.convert``)."""

    __slots__ = ("schema", "tp", "check", "type_check", "unstructure", "structure", "kind", "key", "item", "wire", "native_in")

    def __init__(self, schema: Schema, native_in: bool) -> None:
        self.schema = schema
        self.tp = _tp(schema)
        self.check: Checker = compile_checker(schema)
        self.type_check: Checker = compile_checker(schema, ranges=False)
        self.unstructure: Callable[[Any], Any] = converter.get_unstructure_hook(self.tp)
        self.structure: Callable[[Any, Any], Any] = converter.get_structure_hook(self.tp)
        self.native_in = native_in and wire.decodes_natively(schema)
        self.wire: Callable[[Any], Any] = (
            _identity if wire.encodes_natively(schema) else wire_converter.get_unstructure_hook(self.tp)
        )
        self.kind = schema.kind
        self.key: _Part | None = None
        self.item: _Part | None = None
        if schema.kind is Kind.MAP:
            self.key, self.item = _Part(schema.args[0], native_in), _Part(schema.args[1], native_in)
        elif schema.kind is Kind.ARRAY:
            self.item = _Part(schema.args[0], native_in)

    def unwire(self, obj: Any) -> Any:
        """The value of a decoded (untyped) wire form or builtins form."""
        if self.native_in:
            try:
                return msgspec.convert(obj, self.tp, dec_hook=wire.dec_hook)
            except msgspec.ValidationError:
                pass  # e.g. format 1 / builtins pairs: the reference path
        return self.structure(obj, self.tp)

    def full(self, value: Any, fast: bool) -> list[Any]:
        if fast:
            self.type_check(value)
            return [_REPLACE, self.wire(value)]
        self.check(value)
        return [_REPLACE, self.unstructure(value)]

    def delta(self, value: Any, fast: bool) -> list[Any]:
        """The delta of a value of this part (checking what it encodes)."""
        if self.kind is Kind.MAP and type(value) is Map and value.has_base:
            return self._map_delta(value, fast)
        if self.kind is Kind.ARRAY and type(value) is Array and value.has_base:
            return self._array_delta(value, fast)
        return self.full(value, fast)

    def _map_delta(self, m: Map[Any, Any], fast: bool) -> list[Any]:
        key, item = self.key, self.item
        assert key is not None and item is not None
        kchk, vchk = (key.type_check, item.type_check) if fast else (key.check, item.check)
        kform, vform = (key.wire, item.wire) if fast else (key.unstructure, item.unstructure)
        data = m._data
        changed, deleted = [], []
        for k in m._changed:
            try:
                kchk(k)
            except Mismatch as e:
                raise e.at("{key}") from None
            v = data[k]
            try:
                vchk(v)
            except Mismatch as e:
                raise e.at(f"{{{k!r}}}") from None
            changed.append([kform(k), vform(v)])
        for k in m._deleted:
            try:
                kchk(k)
            except Mismatch as e:
                raise e.at("{key}") from None
            deleted.append(kform(k))
        return [_MAP, changed, deleted]

    def _array_delta(self, a: Array[Any], fast: bool) -> list[Any]:
        item = self.item
        assert item is not None
        chk = item.type_check if fast else item.check
        form = item.wire if fast else item.unstructure
        data, keep = a._data, a._keep
        overwritten, appended = [], []
        for i in sorted(a._overwritten):
            try:
                chk(data[i])
            except Mismatch as e:
                raise e.at(f"[{i}]") from None
            overwritten.append([i, form(data[i])])
        for i in range(keep, len(data)):
            try:
                chk(data[i])
            except Mismatch as e:
                raise e.at(f"[{i}]") from None
            appended.append(form(data[i]))
        return [_ARRAY, keep, overwritten, appended]

    def apply(self, base: Any, delta: Any, path: str) -> Any:
        """``base`` with ``delta`` applied (tracked containers are updated in place)."""
        tag = delta[0]
        if tag == _REPLACE:
            return self.unwire(delta[1])
        if tag == _MAP and self.kind is Kind.MAP and type(base) is Map:
            key, item = self.key, self.item
            assert key is not None and item is not None
            base._apply(
                ((_hashable(key.unwire(k)), item.unwire(v)) for k, v in delta[1]),
                (_hashable(key.unwire(k)) for k in delta[2]),
            )
            return base
        if tag == _ARRAY and self.kind is Kind.ARRAY and type(base) is Array:
            item = self.item
            assert item is not None
            base._apply(delta[1], ((i, item.unwire(v)) for i, v in delta[2]), [item.unwire(v) for v in delta[3]])
            return base
        raise StateTypeError(
            f"{path}: cannot apply this delta to a {type(base).__qualname__} (declared {self.schema.name})"
        )


def _identity(v: Any) -> Any:
    return v


def _hashable(k: Any) -> Any:
    return k


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
        "encodes_natively",
        "wire_type",
        "_label",
        "_root",
        "_scalar",
        "_plain_decode",
        "_fields",
        "_clean",
        "_valid",
        "_to_wire",
        "_decoder",
        "_wrap",
        "copier",
        "__weakref__",
    )

    tp: Any
    schema: Schema
    fingerprint: str
    encodes_natively: bool
    wire_type: Any
    _label: str
    _root: _Part
    _scalar: bool
    _plain_decode: bool
    _fields: list[tuple[str, str, _Part]] | None
    _clean: Callable[[Any], None] | None
    _valid: VectorChecker
    _to_wire: Callable[[Any], Any]
    _decoder: Any
    _wrap: Callable[[Any], Any] | None
    #: a copy of a value sharing nothing mutable with it, not checked
    #: (:func:`tstate.types.copier.compile_copier`)
    copier: Callable[[Any], Any]

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
        native_in = wire.decodes_natively(schema)
        self._root = _Part(schema, native_in)
        self._scalar = schema.is_scalar
        self._plain_decode = plain_for_decode(schema)
        self._fields = None
        if schema.kind is Kind.STRUCT and any(f.schema.kind in (Kind.MAP, Kind.ARRAY) for f in schema.fields):
            self._fields = [(f.name, f.alias, _Part(f.schema, native_in)) for f in schema.fields]
        self._clean = _cleaner(schema)
        self._valid = compile_vector_checker(schema)
        self.encodes_natively = wire.encodes_natively(schema)
        self._to_wire = self._root.wire
        self._decoder, self.wire_type, self._wrap = _msgspec_decoder(schema)
        self.copier = compile_copier(schema)
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

    def all_encodable(self, values: Iterable[Any]) -> bool:
        """Whether every one of ``values`` passes the check an encode makes (ints are
        not range-checked: the encoder refuses those beyond 64 bits with
        ``OverflowError``).  Fast: see :func:`~tstate.types.check.compile_vector_checker`;
        :meth:`check` then says which value is wrong and where."""
        return self._valid(values)

    # ---------------------------------------------------------------- the wire form

    def to_wire(self, value: Any) -> Any:
        """What the msgspec encoder is given for a (checked) ``value``: the value itself
        when :attr:`encodes_natively`, else its format-2 builtins.  Shares mutable
        parts with ``value``: encode it before ``value`` changes."""
        return self._to_wire(value)

    def from_wire(self, obj: Any) -> Any:
        """The value of ``obj`` as a typed decoder of :attr:`wire_type` returned it (a
        top-level ``Map`` / ``Array`` is wrapped), or -- with ``wire_type`` ``None`` --
        as an untyped decoder returned it."""
        if self._decoder is None:
            return self.from_builtins(obj)
        wrap = self._wrap
        return obj if wrap is None else wrap(obj)

    def wrapper(self) -> Callable[[Any], Any] | None:
        """What :meth:`from_wire` applies to a typed-decoded value, ``None`` for nothing."""
        return self._wrap

    # ---------------------------------------------------------------- whole values

    def to_builtins(self, value: Any) -> Any:
        """The checked builtins form of ``value`` (see the module docstring)."""
        root = self._root
        try:
            root.check(value)
        except Mismatch as m:
            raise m.error(self._label) from None
        return value if self._scalar else root.unstructure(value)

    def from_builtins(self, obj: Any) -> Any:
        """The value of a :meth:`to_builtins` form, or of an untyped decoding of format 2
        (tracked containers come back clean)."""
        root = self._root
        try:
            return root.structure(obj, root.tp)
        except StateTypeError:
            raise
        except Exception as exc:
            raise StateTypeError(f"{self._label}: cannot decode the stored value as {self.schema.name}: {exc!r}") from None

    def encode(self, value: Any) -> bytes:
        """``value`` checked and encoded (MessagePack, checkpoint format 2)."""
        root = self._root
        try:
            root.type_check(value)  # the encoder itself refuses ints out of range
            return wire.encode(value if self.encodes_natively else self._to_wire(value))
        except Mismatch as m:
            raise m.error(self._label) from None
        except (OverflowError, TypeError):
            self.check(value)  # finds the int out of range (or str subclass...) and raises with its path
            raise  # pragma: no cover

    def decode(self, data: bytes) -> Any:
        """The value encoded in ``data`` by :meth:`encode` (also reads the msgpack of a
        format-1 builtins form)."""
        decoder = self._decoder
        if decoder is not None:
            try:
                value = decoder.decode(data)
            except msgspec.ValidationError:
                pass  # the reference path reads it, or says why not
            except msgspec.DecodeError as exc:
                raise StateTypeError(f"cannot decode state: not valid msgpack ({exc})") from None
            else:
                wrap = self._wrap
                return value if wrap is None else wrap(value)
        obj = wire.decode_any(data)
        if self._plain_decode:
            return obj
        return self.from_builtins(obj)

    def copy(self, value: Any) -> Any:
        """A deep copy of ``value`` through the codec (checked)."""
        return self.decode(self.encode(value))

    # ---------------------------------------------------------------- deltas

    def delta_builtins(self, value: Any) -> list[Any]:
        """The builtins form of the delta of ``value`` since its tracked containers
        were last marked clean (the whole value when it has none; see the module
        docstring).  Does not mark anything clean."""
        return self._delta(value, fast=False)

    def _delta(self, value: Any, fast: bool) -> list[Any]:
        try:
            fields = self._fields
            if fields is None:
                return self._root.delta(value, fast)
            if type(value) is not self.schema.py_type:
                raise Mismatch(self.schema.name, value)
            out: dict[str, Any] = {}
            for name, _, part in fields:
                try:
                    out[name] = part.delta(getattr(value, name), fast)
                except Mismatch as m:
                    raise m.at("." + name) from None
            return [_STRUCT, out]
        except Mismatch as m:
            raise m.error(self._label) from None

    def encode_delta(self, value: Any, *, clean: bool = True) -> bytes:
        """The delta of :meth:`delta_builtins` as bytes (format 2: item values encoded
        by msgspec as they are, where it can); then, with ``clean``, :meth:`mark_clean`."""
        delta = self._delta(value, fast=True)
        try:
            data = wire.encode(delta)
        except (OverflowError, TypeError):
            self.delta_builtins(value)  # checks ranges and exact types: raises with the path
            raise  # pragma: no cover
        if clean:
            self.mark_clean(value)
        return data

    def apply_delta(self, base: Any, delta: bytes | list[Any]) -> Any:
        """``base`` (the previously decoded value) with ``delta`` (from
        :meth:`encode_delta` or :meth:`delta_builtins`) applied.  Tracked containers of
        ``base`` are updated in place and come back clean; a mutable struct is updated
        in place, a frozen one replaced.  Use the returned value."""
        obj = wire.decode_any(delta) if isinstance(delta, (bytes, bytearray, memoryview)) else delta
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

#: The first item of a format-2 envelope (and of format 1's).
MAGIC = "tstate.state/2"
MAGIC_FORMAT_1 = "tstate.state/1"
_FORMATS = {MAGIC: 2, MAGIC_FORMAT_1: 1}
_envelope = msgspec.msgpack.Decoder(tuple[str, str, msgspec.Raw])


def encode_envelope(fingerprint: str, payload: Any) -> bytes:
    """A stored bin: ``payload`` (msgspec-encodable: builtins, checked state values
    in their :meth:`StateCodec.to_wire` form, ``msgspec.Raw`` of encoded ones) with the
    schema ``fingerprint`` it was written with.

    >>> codec = StateCodec(int)
    >>> data = encode_envelope(codec.fingerprint, {"k": codec.to_builtins(3)})
    >>> decode_envelope(data, codec.fingerprint)
    {'k': 3}
    >>> decode_envelope(data, StateCodec(str).fingerprint)
    Traceback (most recent call last):
    ...
    tstate.errors.SchemaMismatchError: state written with schema fingerprint 60f24396f77057c3, but the state type now has fingerprint 78b3543307abce43: the declared state type changed since it was written
    """
    return wire.encode([MAGIC, fingerprint, payload])


def open_envelope(data: bytes, expected_fingerprint: str | None) -> tuple[int, str, msgspec.Raw]:
    """``(format, fingerprint, payload bytes)`` of an envelope (format 1 or 2), after
    checking its fingerprint against ``expected_fingerprint`` (unless ``None``):
    raises :class:`~tstate.errors.SchemaMismatchError` if it differs,
    :class:`~tstate.errors.StateTypeError` if ``data`` is not an envelope."""
    try:
        magic, fingerprint, raw = _envelope.decode(data)
    except msgspec.DecodeError:
        raise StateTypeError("cannot decode state: not a tstate state envelope") from None
    fmt = _FORMATS.get(magic)
    if fmt is None:
        if magic.startswith("tstate.state/"):
            raise StateTypeError(
                f"cannot decode state: written in format {magic.rsplit('/', 1)[1]!r}; this tstate reads formats 1 and 2"
            )
        raise StateTypeError("cannot decode state: not a tstate state envelope")
    if expected_fingerprint is not None and fingerprint != expected_fingerprint:
        raise SchemaMismatchError(
            f"state written with schema fingerprint {fingerprint}, but the state type now has fingerprint "
            f"{expected_fingerprint}: the declared state type changed since it was written"
        )
    return fmt, fingerprint, raw


def decode_envelope(data: bytes, expected_fingerprint: str) -> Any:
    """The payload of :func:`encode_envelope` (or of a format-1 envelope), decoded
    untyped (keys and times still encoded, states as builtins), after checking its
    fingerprint: raises :class:`~tstate.errors.SchemaMismatchError` if it differs from
    ``expected_fingerprint``, :class:`~tstate.errors.StateTypeError` if ``data`` is not an
    envelope."""
    _fmt, _fp, raw = open_envelope(data, expected_fingerprint)
    return wire.decode_any(raw)
