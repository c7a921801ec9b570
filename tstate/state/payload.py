"""The bin payload: one encoding for migration messages and checkpoint files.

``encode_bin(bin, codec)`` produces bytes: an envelope (:func:`~tstate.types.codec.encode_envelope`)
carrying the state schema's fingerprint and ``{"bin", "keys": [key, ...], "states":
[state, ...], "timers": [[time, [key, ...]], ...]}`` (``states[i]`` is the state of
``keys[i]``), keys encoded by :func:`tstate.keys.encode_key`, states by the operator's
:class:`~tstate.types.StateCodec` (which checks every value against its declaration: a
wrongly typed value is reported with its key and field path, never silently written).
A whole bin's states are handed to the encoder as they are (no object per state is
built, so encoding a large bin starts no garbage collection), :data:`CHUNK` at a time,
each chunk checked (:meth:`~tstate.types.StateCodec.all_encodable`) right after it is
encoded, while its states are still in the processor's cache
(:func:`encode_states`); the keys likewise (:func:`encode_keys_raw`).  ``decode_bin`` checks the fingerprint and rebuilds the bin, its states
decoded typed in one call too (:func:`decode_payload`, which also reads the deltas of
:mod:`tstate.checkpoint.delta`).  Format 1 wrote ``"states": [[key, state], ...]``
(and no ``"keys"``): still read.  No pickle: a payload can never run code.

>>> from tstate.types import StateCodec
>>> b = Bin(3); b.states = {"a": [1], ("b", 2): [2, 3]}; b.timers = {7: {"a": None}}
>>> back = decode_bin(encode_bin(b, StateCodec(list[int])), StateCodec(list[int]))
>>> back.index, back.states, back.timers
(3, {'a': [1], ('b', 2): [2, 3]}, {7: {'a': None}})
"""

from __future__ import annotations

import gc
from typing import Any, Callable, Iterable, Optional

import msgspec

from tstate.errors import CheckpointError, StateTypeError
from tstate.keys import decode_key, encode_keys
from tstate.progress.timestamp import Product, from_vector, to_vector
from tstate.state.bin import Bin
from tstate.types import wire
from tstate.types.codec import MAGIC, encode_envelope, open_envelope

__all__ = [
    "encode_bin",
    "decode_bin",
    "encode_time",
    "decode_time",
    "bin_to_builtins",
    "bin_from_builtins",
    "wire_states",
    "encode_checked",
    "encode_states",
    "encode_keys_raw",
    "wire_timers",
    "raise_bad_state",
    "Payload",
    "decode_payload",
    "state_pairs",
]


def encode_time(t: Any) -> Any:
    """A time as msgpack-ready data (``Product`` as its coordinate list)."""
    return list(to_vector(t)) if type(t) is Product else t


def decode_time(obj: Any) -> Any:
    return from_vector(obj) if type(obj) is list else obj


def raise_bad_state(items: Iterable[tuple[Any, Any]], codec: Any, operator: Optional[str]) -> None:
    """Raise the :class:`~tstate.errors.StateTypeError` of the first wrongly typed state
    among ``(key, state)`` pairs, naming the operator, the key and the field path."""
    check = codec.check
    for k, v in items:
        try:
            check(v)
        except StateTypeError as exc:
            where = f"operator {operator!r}, " if operator else ""
            raise StateTypeError(f"{where}key {k!r}: {exc}") from None


def wire_states(keys: list[Any], values: list[Any], codec: Any, operator: Optional[str] = None) -> tuple[list[Any], list[Any]]:
    """``(encoded keys, states)`` ready for the encoder, every state checked first
    (raises like :func:`raise_bad_state`).  :func:`encode_checked` is the faster way
    (it checks after encoding, while the states are still in the processor's cache)."""
    with wire.no_gc():  # checking builds a few temporary containers per state
        ok = codec.all_encodable(values)
    if not ok:
        raise_bad_state(zip(keys, values), codec, operator)
        raise StateTypeError(f"operator {operator!r}: a state does not match its declaration")  # pragma: no cover
    if not codec.encodes_natively:
        to_wire = codec.to_wire
        values = [to_wire(v) for v in values]
    return encode_keys(keys), values


#: what msgspec raises for a value it cannot encode as it is (an int beyond 64 bits, an
#: object of another type, a cycle)
_UNENCODABLE = (OverflowError, TypeError, ValueError, RecursionError)


def encode_checked(
    encode: Callable[[Any], bytes], keys: list[Any], values: list[Any], codec: Any, operator: Optional[str] = None
) -> bytes:
    """``encode(states)``: the bytes of a payload holding ``values`` (the states of
    ``keys``, in order) in their wire form, every state checked against the
    declaration -- a wrongly typed one raises :class:`~tstate.errors.StateTypeError`
    naming the operator, its key and the field path (:func:`raise_bad_state`), and no
    bytes are returned.

    Where the codec encodes natively (:attr:`StateCodec.encodes_natively`) ``states``
    is a ``msgspec.Raw`` of the encoded array of states (:func:`encode_states`:
    encoded *first* and checked right after, :data:`CHUNK` states at a time, while they
    are still in the processor's cache -- reading a state from memory is most of what
    encoding a large bin costs, and the check then costs a fraction of it).  Otherwise
    the states are checked and turned into their builtins form first (a list)."""
    if codec.encodes_natively:
        raw = encode_states(values, codec)
        if raw is None:
            raise_bad_state(zip(keys, values), codec, operator)
            raise StateTypeError(f"operator {operator!r}: a state does not match its declaration")  # pragma: no cover
        return encode(raw)
    if not _all_encodable(codec, values):
        raise_bad_state(zip(keys, values), codec, operator)
        raise StateTypeError(f"operator {operator!r}: a state does not match its declaration")  # pragma: no cover
    to_wire = codec.to_wire
    wired = [to_wire(v) for v in values]
    try:
        return encode(wired)
    except _UNENCODABLE:
        raise_bad_state(zip(keys, values), codec, operator)
        raise


#: how many states :func:`encode_states` encodes, then checks, at a time: a few hundred
#: states stay in the processor's cache between the two (a whole bin of thousands,
#: scattered over the heap, does not: checking it after encoding read it all again)
CHUNK = 256


def _array_header(n: int) -> bytes:
    """The MessagePack header of an array of ``n`` items."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_states(values: list[Any], codec: Any) -> Optional[msgspec.Raw]:
    """The MessagePack array of ``values`` (states of a codec that
    :attr:`~tstate.types.StateCodec.encodes_natively`) as a ``msgspec.Raw``, every
    state checked (:meth:`~tstate.types.StateCodec.all_encodable`) right after it is
    encoded, :data:`CHUNK` at a time; ``None`` if one does not match its declaration or
    cannot be encoded (:func:`raise_bad_state` then says which and where).  The bytes
    are those of ``wire.encode(values)``; the garbage collector is paused meanwhile
    (checking builds a few temporary containers per state)."""
    encode, ok = wire.encode, codec.all_encodable
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        n = len(values)
        if n <= CHUNK:
            data = encode(values)
            return msgspec.Raw(data) if ok(values) else None
        parts: list[Any] = [_array_header(n)]
        append = parts.append
        for i in range(0, n, CHUNK):
            chunk = values[i : i + CHUNK]
            data = encode(chunk)
            if not ok(chunk):
                return None
            append(memoryview(data)[len(_array_header(len(chunk))) :])
        return msgspec.Raw(b"".join(parts))
    except _UNENCODABLE:
        return None
    finally:
        if enabled:
            gc.enable()


def _all_encodable(codec: Any, values: list[Any]) -> bool:
    """``codec.all_encodable(values)`` with the cyclic garbage collector paused (checking
    builds a few temporary containers per state: no collection should start meanwhile)."""
    if not gc.isenabled():
        return bool(codec.all_encodable(values))
    gc.disable()
    try:
        return bool(codec.all_encodable(values))
    finally:
        gc.enable()


def encode_keys_raw(keys: list[Any]) -> msgspec.Raw:
    """The MessagePack array of ``keys`` encoded (:func:`tstate.keys.encode_keys`) as a
    ``msgspec.Raw``: encoded right after their types are checked, while the keys (spread
    over the heap) are still in the processor's cache -- a payload then does not read
    them a second time."""
    return msgspec.Raw(wire.encode(encode_keys(keys)))


def wire_timers(timers: Any) -> list[Any]:
    """A bin's timers (``{time: keys}`` or ``[(time, keys), ...]``) ready for the encoder."""
    items = timers.items() if isinstance(timers, dict) else timers
    return [[encode_time(t), encode_keys(keys)] for t, keys in items]


def bin_to_builtins(b: Bin, codec: Any, operator: Optional[str] = None) -> dict[str, Any]:
    """The payload of a bin in the builtins form (states by ``codec.to_builtins``;
    msgpack-python can pack it).  Reference and inspection: :func:`encode_bin` does
    not build it."""
    to_b = codec.to_builtins
    states = []
    for k, v in b.items():
        try:
            states.append([_builtin_key(k), to_b(v)])
        except StateTypeError as exc:
            where = f"operator {operator!r}, " if operator else ""
            raise StateTypeError(f"{where}key {k!r}: {exc}") from None
    return {
        "bin": b.index,
        "states": states,
        "timers": [[encode_time(t), [_builtin_key(k) for k in keys]] for t, keys in b.timers.items()],
    }


def _builtin_key(k: Any) -> Any:
    from tstate.keys import encode_key

    key = encode_key(k)
    if type(key) is msgspec.msgpack.Ext:
        import msgpack

        return msgpack.ExtType(key.code, key.data)
    return key


def bin_from_builtins(payload: dict[str, Any], codec: Any) -> Bin:
    """The bin of a :func:`bin_to_builtins` payload (or of any untyped decoding of one)."""
    b = Bin(payload["bin"])
    from_b = codec.from_builtins
    b.states = {decode_key(k): from_b(v) for k, v in payload["states"]}
    b.timers = {decode_time(t): {decode_key(k): None for k in keys} for t, keys in payload["timers"]}
    return b


def encode_bin(b: Bin, codec: Any, operator: Optional[str] = None) -> bytes:
    """Encode a whole bin (states and timers) with its schema fingerprint (every state
    checked: :func:`encode_checked`)."""
    whole = dict(b.items())
    keys = list(whole)
    payload = {"bin": b.index, "keys": encode_keys_raw(keys), "states": None, "timers": wire_timers(b.timers)}
    fingerprint = codec.fingerprint

    def encode(states: list[Any]) -> bytes:
        payload["states"] = states
        return encode_envelope(fingerprint, payload)

    return encode_checked(encode, keys, list(whole.values()), codec, operator)


def decode_bin(data: bytes, codec: Any) -> Bin:
    """Decode :func:`encode_bin` bytes; a different schema fingerprint raises
    :class:`~tstate.errors.SchemaMismatchError`."""
    p = decode_payload(data, codec)
    if p.states is None:
        raise CheckpointError("not a bin snapshot (a delta)")
    b = Bin(p.bin)
    b.states, b.timers = p.states, p.timers
    return b


# ---------------------------------------------------------------------- decoding


class Payload:
    """A decoded bin payload: a snapshot (``states``: key → state) or a delta
    (``upserts``: ``[(key, state), ...]``, ``deletes``: keys, ``appends``: ``[(key,
    items), ...]`` -- items appended to a ``list`` state, :mod:`tstate.state.appends`),
    and the bin's full ``timers`` (time → ``{key: None}``); keys, times and states
    decoded."""

    __slots__ = ("bin", "states", "upserts", "deletes", "timers", "appends")

    def __init__(
        self,
        bin: int,
        states: Optional[dict[Any, Any]],
        upserts: Optional[list[tuple[Any, Any]]],
        deletes: Optional[list[Any]],
        timers: dict[Any, dict[Any, None]],
        appends: Optional[list[tuple[Any, Any]]] = None,
    ) -> None:
        self.bin = bin
        self.states = states
        self.upserts = upserts
        self.deletes = deletes
        self.timers = timers
        self.appends = appends


_STRUCTS: dict[Any, Any] = {}


def _payload_decoder(codec: Any) -> Any:
    """A typed decoder of a format-2 envelope of a payload of ``codec``'s states
    (``None`` when its states cannot be decoded typed)."""
    try:
        return _STRUCTS[codec]
    except KeyError:
        pass
    dec = None
    if codec.wire_type is not None:
        values = Optional[list[codec.wire_type]]  # type: ignore[name-defined]
        struct = msgspec.defstruct(
            "BinPayload",
            [
                ("bin", int),
                ("timers", list[tuple[Any, list[Any]]]),
                ("keys", Optional[list[Any]], None),
                ("states", values, None),
                ("upserts", values, None),
                ("deletes", Optional[list[Any]], None),
                ("akeys", Optional[list[Any]], None),
                ("appends", values, None),
            ],
            gc=False,
        )
        try:
            dec = wire.typed_decoder(tuple[str, str, struct])  # type: ignore[valid-type]
        except (TypeError, ValueError):  # pragma: no cover - the codec's own decoder was built
            dec = None
    _STRUCTS[codec] = dec
    return dec


def _keyed(keys: list[Any], values: list[Any]) -> dict[Any, Any]:
    if len(keys) != len(values):
        raise CheckpointError(f"malformed bin payload ({len(keys)} keys, {len(values)} states)")
    try:
        return dict(zip(keys, values))
    except TypeError:  # a tuple key came back as a list
        return {decode_key(k): v for k, v in zip(keys, values)}


def _timers(items: Any) -> dict[Any, dict[Any, None]]:
    return {decode_time(t): {decode_key(k): None for k in keys} for t, keys in items}


def decode_payload(data: bytes, codec: Any, fingerprint: Optional[str] = None) -> Payload:
    """Decode a bin snapshot (:func:`encode_bin`) or delta
    (:func:`tstate.checkpoint.delta.encode_delta`), format 2 or 1, written with schema
    ``fingerprint`` (default: the codec's; a compatible older one is read with the
    codec's type).  Raises :class:`~tstate.errors.SchemaMismatchError` for another
    fingerprint, :class:`~tstate.errors.CheckpointError` for something that is not a
    bin payload.  Format 2 with a codec that decodes typed is one msgspec call (the
    garbage collector paused); anything it refuses is read untyped and built by
    ``codec.from_builtins`` (format 1 always is)."""
    expected = codec.fingerprint if fingerprint is None else fingerprint
    dec = _payload_decoder(codec)
    if dec is not None:
        enabled = gc.isenabled()
        gc.disable()
        try:
            magic, fp, p = dec.decode(data)
        except msgspec.ValidationError:
            p = None  # not what this type writes: the envelope says why below
        except msgspec.DecodeError as exc:
            raise StateTypeError(f"cannot decode state: not valid msgpack ({exc})") from None
        finally:
            if enabled:
                gc.enable()
        if p is not None and magic == MAGIC and fp == expected:
            return _from_typed(p, codec)
    fmt, _fp, raw = open_envelope(data, expected)  # raises for another fingerprint or no envelope
    with wire.no_gc():
        obj = wire.decode_any(raw)
        return _from_untyped(obj, codec)


def _from_typed(p: Any, codec: Any) -> Payload:
    wrap = codec.wrapper()
    values = p.states if p.states is not None else p.upserts
    if values is None or p.keys is None:
        raise CheckpointError("neither a snapshot nor a delta")
    if wrap is not None:
        values = list(map(wrap, values))
    timers = _timers(p.timers) if p.timers else {}
    if p.states is not None:
        return Payload(p.bin, _keyed(p.keys, values), None, None, timers)
    if p.deletes is None:
        raise CheckpointError("malformed bin payload (a delta without deletes)")
    upserts = list(_keyed(p.keys, values).items())
    appends = None
    if p.appends is not None:
        if p.akeys is None:
            raise CheckpointError("malformed bin payload (appends without their keys)")
        appends = list(_keyed(p.akeys, p.appends).items())
    return Payload(p.bin, None, upserts, [decode_key(k) for k in p.deletes], timers, appends)


def _from_untyped(obj: Any, codec: Any) -> Payload:
    if not isinstance(obj, dict) or type(obj.get("bin")) is not int:
        raise CheckpointError("not a bin payload")
    from_b = codec.from_builtins
    try:
        timers = _timers(obj["timers"])
        pairs = state_pairs(obj)
        if pairs is None:
            raise CheckpointError("neither a snapshot nor a delta")
        states = [(decode_key(k), from_b(v)) for k, v in pairs]
        if "states" in obj:
            return Payload(obj["bin"], dict(states), None, None, timers)
        appends = None
        if "appends" in obj:
            akeys, items = obj["akeys"], obj["appends"]
            if type(akeys) is not list or type(items) is not list or len(akeys) != len(items):
                raise CheckpointError("malformed bin payload (appends and their keys do not pair up)")
            appends = [(decode_key(k), from_b(v)) for k, v in zip(akeys, items)]
        return Payload(obj["bin"], None, states, [decode_key(k) for k in obj["deletes"]], timers, appends)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"malformed bin payload ({exc!r})") from None


def state_pairs(payload: dict[str, Any]) -> Optional[list[Any]]:
    """The ``[key, state]`` pairs of an untyped payload: a snapshot's states or a
    delta's upserts, of format 2 (parallel ``keys`` and states) or 1 (pairs); ``None``
    for neither.  Keys and states are as decoded (keys still encoded)."""
    values = payload.get("states", payload.get("upserts"))
    if values is None:
        return None
    if "keys" not in payload:
        return list(values)  # format 1
    keys = payload["keys"]
    if type(keys) is not list or type(values) is not list or len(keys) != len(values):
        raise TypeError("keys and states do not pair up")
    return [[k, v] for k, v in zip(keys, values)]
