"""The binary form of state (checkpoint format 2): MessagePack written and read by msgspec.

msgspec encodes attrs classes, lists, tuples, sets, dicts, enums and dates in C, and
decodes them *typed*: it builds the declared attrs classes, enums, tuples and sets
directly from the bytes and checks every value against the annotation on the way.
That is ~10x less work than unstructuring to builtins and packing them (what format 1
did with cattrs and msgpack-python); see ``benchmarks/state_types.py``.

**What msgspec does natively, and what not** (decided per declared type, once):

- :func:`encodes_natively`: the value itself can be handed to the encoder -- every kind
  except ``datetime`` (msgspec writes an aware datetime as a UTC timestamp, losing its
  offset: tstate writes ISO-8601 text), attrs classes with private (``_x``) fields
  (msgspec skips them) and dicts keyed by structs (written as pairs, below).  Tracked
  :class:`~tstate.types.tracked.Map` / ``Array`` go through :func:`enc_hook` (their
  dict / list).  Other values are first turned into builtins
  (:class:`~tstate.types.codec.StateCodec` does that with cattrs).
- :func:`decodes_natively`: a typed decoder of the declared type gives the value --
  every kind except unions of ``str`` and ``bytes`` (msgspec cannot tell them apart by
  type) and dicts keyed by structs.  Other values are decoded untyped and structured by
  cattrs, and so is anything a typed decoder refuses (format 1's ``[key, value]``
  pairs, a datetime offset with seconds): the slow path is also the reference, which
  either reads the value or raises the error naming the field path.

**The format.**  Like format 1, with one difference: every dict and ``Map`` is a
MessagePack map, whatever its key type (format 1 wrote dicts with non-``str`` keys as
arrays of ``[key, value]`` pairs) -- except dicts keyed by structs (a key that is itself
a map is beyond what most MessagePack readers take), which stay arrays of pairs.
Structs are maps of field name to value (the order of the fields may differ),
datetimes ISO-8601 text (an aware one with its offset), dates ISO text, enums their
value, sets and tuples arrays, bytes bin.  Keys and times of a
bin's payload are encoded by :func:`tstate.keys.encode_key` (extension types for
datetimes, dates, frozensets and ints beyond 64 bits).

**Order is kept, not canonicalised.**  Dicts, ``Map``s, sets and frozensets are written
in their iteration order, and dicts come back in it (a state's insertion order
survives a checkpoint, a migration and a restore, as user code iterating it expects).
So the bytes of a state are a function of its value *and* its iteration order: two
equal sets built in different orders may encode differently (each decodes to the
equal value).  Sorting would make the bytes canonical only by giving up a dict's
order, and would cost a sort per container on every checkpoint.  A key's *bin* never
depends on order: it is the hash of the key's canonical encoding
(:func:`tstate.keys.key_bytes`, a frozenset's items sorted).

>>> encode([1, "a", b"b"]) == bytes([0x93, 0x01, 0xa1, 0x61, 0xc4, 0x01, 0x62])
True
>>> decode_any(encode({(1, 2): "x"}))
{(1, 2): 'x'}
"""

from __future__ import annotations

import gc
import typing
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import msgspec

from tstate.errors import StateTypeError
from tstate.keys import ext_hook
from tstate.types.schema import Kind, Schema
from tstate.types.tracked import Array, Map

__all__ = [
    "FORMAT",
    "encode",
    "decode_any",
    "typed_decoder",
    "enc_hook",
    "dec_hook",
    "encodes_natively",
    "decodes_natively",
    "has_struct",
    "no_gc",
    "Raw",
    "ValidationError",
    "DecodeError",
]

#: The checkpoint format this module writes (format 1: cattrs builtins + msgpack-python).
FORMAT = 2

Raw = msgspec.Raw
ValidationError = msgspec.ValidationError
DecodeError = msgspec.DecodeError


def enc_hook(obj: Any) -> Any:
    """What msgspec encodes for a type it does not know: a tracked container's data."""
    t = type(obj)
    if t is Map or t is Array:
        return obj._data
    raise NotImplementedError(f"{t.__qualname__} is not a state type")


def dec_hook(tp: Any, obj: Any) -> Any:
    """Build a tracked container of the declared type ``tp`` from its untyped decoding."""
    origin = typing.get_origin(tp)
    if origin is Map:
        return Map._clean(msgspec.convert(obj, dict[typing.get_args(tp)], dec_hook=dec_hook))  # type: ignore[misc]
    if origin is Array:
        return Array._clean(msgspec.convert(obj, list[typing.get_args(tp)], dec_hook=dec_hook))  # type: ignore[misc]
    raise NotImplementedError(f"{tp!r} is not a state type")


_encoder = msgspec.msgpack.Encoder(enc_hook=enc_hook)
#: msgspec-encode ``obj`` (MessagePack bytes).  Raises ``OverflowError`` for ints beyond
#: 64 bits and ``TypeError`` for objects it cannot encode.
encode: Callable[[Any], bytes] = _encoder.encode
_untyped = msgspec.msgpack.Decoder(ext_hook=ext_hook)


def decode_any(data: Any) -> Any:
    """Untyped decoding (maps keyed by arrays come back keyed by tuples; extension
    types as the keys they stand for); :class:`~tstate.errors.StateTypeError` for bytes
    that are not MessagePack."""
    try:
        return _untyped.decode(data)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise StateTypeError(f"cannot decode state: not valid msgpack ({exc})") from None


_DECODERS: dict[Any, Any] = {}


def typed_decoder(tp: Any) -> Any:
    """A (cached) msgspec decoder of the annotation ``tp``."""
    try:
        return _DECODERS[tp]
    except KeyError:
        dec = _DECODERS[tp] = msgspec.msgpack.Decoder(tp, dec_hook=dec_hook, ext_hook=ext_hook)
        return dec


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while decoding many objects at once: every
    few hundred containers created would start a collection walking everything alive
    (most of a bin's decoding time otherwise).  The values are acyclic: reference
    counting frees them."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------- what is native

_SCALARS = {Kind.INT, Kind.FLOAT, Kind.STR, Kind.BYTES, Kind.BOOL, Kind.NONE, Kind.DATE, Kind.ENUM}


def encodes_natively(schema: Schema) -> bool:
    """Whether msgspec encodes values of ``schema`` as they are into format 2 (see the
    module docstring)."""
    k = schema.kind
    if k in _SCALARS or k is Kind.UNION:
        return True
    if k is Kind.DATETIME:
        return False
    if k is Kind.STRUCT:
        if any(f.name.startswith("_") for f in schema.fields):
            return False
        return all(encodes_natively(f.schema) for f in schema.fields)
    if k is Kind.RECORD:  # a TypedDict: a dict, its values encoded as they are
        return all(encodes_natively(f.schema) for f in schema.fields)
    if k in (Kind.DICT, Kind.MAP) and has_struct(schema.args[0]):
        return False
    return all(encodes_natively(a) for a in schema.args)


def decodes_natively(schema: Schema) -> bool:
    """Whether a typed msgspec decoder of the declared type reads format 2 values of
    ``schema`` (see the module docstring)."""
    k = schema.kind
    if k is Kind.UNION:
        kinds = {a.kind for a in schema.args}
        return not {Kind.STR, Kind.BYTES} <= kinds
    if k in _SCALARS or k is Kind.DATETIME:
        return True
    if k is Kind.STRUCT or k is Kind.RECORD:  # msgspec decodes TypedDicts typed too
        return all(decodes_natively(f.schema) for f in schema.fields)
    if k in (Kind.DICT, Kind.MAP) and has_struct(schema.args[0]):
        return False  # pairs
    return all(decodes_natively(a) for a in schema.args)


def has_struct(schema: Schema) -> bool:
    """Whether ``schema`` is or holds a struct (then, as a dict key: pairs)."""
    if schema.kind is Kind.STRUCT:
        return True
    return any(has_struct(a) for a in schema.args) or any(has_struct(f.schema) for f in schema.fields)
