"""The bin payload: one encoding for migration messages and checkpoint files.

``encode_bin(bin, codec)`` produces bytes: a msgpack envelope carrying the state
schema's fingerprint and ``{"bin", "states": [[key, state], ...], "timers": [[time,
[key, ...]], ...]}``, keys encoded by :func:`tstate.keys.encode_key`, states by the
operator's :class:`~tstate.types.StateCodec` (which checks every value against its
declaration: a wrongly typed value is reported with its key and field path, never
silently written).  ``decode_bin`` checks the fingerprint and rebuilds the bin.
No pickle: a payload can never run code.
"""

from __future__ import annotations

from typing import Any, Optional

from tstate.errors import StateTypeError
from tstate.keys import decode_key, encode_key
from tstate.progress.timestamp import Product, from_vector, to_vector
from tstate.state.bin import Bin

__all__ = ["encode_bin", "decode_bin", "encode_time", "decode_time", "bin_to_builtins", "bin_from_builtins"]


def encode_time(t: Any) -> Any:
    """A time as msgpack-ready data (``Product`` as its coordinate list)."""
    return list(to_vector(t)) if type(t) is Product else t


def decode_time(obj: Any) -> Any:
    return from_vector(obj) if type(obj) is list else obj


def bin_to_builtins(b: Bin, codec: Any, operator: Optional[str] = None) -> dict[str, Any]:
    """The msgpack-ready payload of a bin (see the module docstring)."""
    to_b = codec.to_builtins
    states = []
    for k, v in b.states.items():
        try:
            states.append([encode_key(k), to_b(v)])
        except StateTypeError as exc:
            where = f"operator {operator!r}, " if operator else ""
            raise StateTypeError(f"{where}key {k!r}: {exc}") from None
    return {
        "bin": b.index,
        "states": states,
        "timers": [[encode_time(t), [encode_key(k) for k in keys]] for t, keys in b.timers.items()],
    }


def bin_from_builtins(payload: dict[str, Any], codec: Any) -> Bin:
    b = Bin(payload["bin"])
    from_b = codec.from_builtins
    b.states = {decode_key(k): from_b(v) for k, v in payload["states"]}
    b.timers = {decode_time(t): {decode_key(k): None for k in keys} for t, keys in payload["timers"]}
    return b


def encode_bin(b: Bin, codec: Any, operator: Optional[str] = None) -> bytes:
    """Encode a whole bin (states and timers) with its schema fingerprint."""
    from tstate.types.codec import encode_envelope

    return encode_envelope(codec.fingerprint, bin_to_builtins(b, codec, operator))


def decode_bin(data: bytes, codec: Any) -> Bin:
    """Decode :func:`encode_bin` bytes; a different schema fingerprint raises
    :class:`~tstate.errors.SchemaMismatchError`."""
    from tstate.types.codec import decode_envelope

    return bin_from_builtins(decode_envelope(data, codec.fingerprint), codec)
