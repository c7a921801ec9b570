"""Where a key's state lives in the store: the key layout and the value framing.

Each operator has a column family of its own; inside it a key's state is stored
under ::

    bin (2 bytes, big-endian) + the key's canonical encoding (tstate.keys.key_bytes)

so the keys of one bin are one contiguous range (:func:`bin_range`): a bin is
iterated, exported to a file or dropped as a range, and equal keys (``1``, ``True``,
``1.0``) find the same state, as in a ``dict``.  A bin's own records (its timers) sit
in the same range under ``bin + 0xC1 + name`` (:func:`meta_key`): ``0xC1`` is the one
byte MessagePack never uses, so no key's encoding starts with it.

The store key is what equality needs (:func:`key_identity`); it is not always the key given back
(``True`` encodes as ``1``, a ``datetime`` as a tagged list).  The stored value is the
state's bytes (:meth:`~tstate.types.StateCodec.encode`, checked) when the key comes
back exactly from its canonical encoding (``str``, ``bytes``, ``None``, ``int``
within 64 bits, a float that is not integral, and tuples of these:
:func:`plain_key`), else ``0xC1`` + the key's length (2 bytes) + the key as
:func:`tstate.keys.encode_key` writes it + the state's bytes (a state's bytes never
start with ``0xC1``).

>>> k = store_key(7, ("ATL", 3))
>>> k[:2], key_of(k, b"\\x93\\x01\\x02\\x03")
(b'\\x00\\x07', ('ATL', 3))
>>> lo, hi = bin_range(7)
>>> lo <= k < hi
True
>>> import datetime
>>> d = datetime.date(2024, 5, 1)
>>> value = frame_value(d, b"\\x01")
>>> key_of(store_key(0, d), value), state_bytes(value)
(datetime.date(2024, 5, 1), b'\\x01')
"""

from __future__ import annotations

import datetime as _dt
import enum
from typing import Any

import msgspec

from tstate.errors import StateStoreError
from tstate.keys import canonical_key, decode_key, encode_key, ext_hook, pack_plain

__all__ = [
    "BIN_BYTES",
    "META",
    "bin_prefix",
    "bin_range",
    "store_key",
    "key_suffix",
    "pack_plain",
    "key_identity",
    "meta_key",
    "is_meta",
    "bin_of_store_key",
    "plain_key",
    "frame_value",
    "state_bytes",
    "key_of",
]

#: bytes of the bin prefix (bins per operator are at most 65536)
BIN_BYTES = 2
#: the byte no MessagePack value starts with: a bin's own records, a framed value
META = 0xC1
_META = bytes((META,))
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_decode = msgspec.msgpack.Decoder().decode
_pack = pack_plain  # the canonical encoding of a str, bytes or 64-bit int key (tstate.keys.key_bytes)
_encode = msgspec.msgpack.Encoder().encode
_Ext = msgspec.msgpack.Ext


def bin_prefix(index: int) -> bytes:
    """The 2-byte prefix of bin ``index``'s range."""
    return index.to_bytes(BIN_BYTES, "big")


def bin_range(index: int) -> tuple[bytes, bytes]:
    """``(lower, upper)``: every store key of bin ``index`` is ``lower <= k < upper``."""
    lo = bin_prefix(index)
    if index + 1 < 1 << (8 * BIN_BYTES):
        return lo, bin_prefix(index + 1)
    # the last bin: its greatest key is b"\xff\xff\xff" (key -1: a canonical encoding
    # starting with 0xFF is that one byte), so this bound is above every key of it
    return lo, lo + b"\xff\x00"


def store_key(index: int, key: Any) -> bytes:
    """The store key of ``key``'s state in bin ``index``: the bin, then the key's
    canonical encoding -- :func:`tstate.keys.key_bytes` for a ``str``, ``bytes`` or
    ``int`` (most keys), else :func:`key_identity`."""
    return index.to_bytes(BIN_BYTES, "big") + key_suffix(key)


def key_suffix(key: Any) -> bytes:
    """The store key of ``key`` after its bin prefix: ``store_key(i, key) ==
    bin_prefix(i) + key_suffix(key)``."""
    t = type(key)
    if t is str or t is bytes or (t is int and _INT_MIN <= key <= _INT_MAX):
        return _pack(key)
    return _encode(key_identity(key))


def key_identity(key: Any) -> Any:
    """``key`` in the form whose MessagePack encoding is the same for equal keys and
    different for different ones: :func:`tstate.keys.canonical_key` (``True``, ``1``
    and ``1.0`` alike; tuples as arrays) except that datetimes, dates, frozensets and
    integers beyond 64 bits become extension types, which no tuple encodes to (the
    canonical form writes them as tagged arrays, which a tuple key could equal: fine
    for a hash, not for an identity).

    >>> import datetime
    >>> key_identity((True, 2.0))
    [1, 2]
    >>> d = key_identity(datetime.date(2024, 5, 1)); d.code, d.data
    (2, b'2024-05-01')
    """
    t = type(key)
    if t is tuple or t is list:
        return [key_identity(k) for k in key]
    if t is str or t is bytes or key is None:
        return key
    if t is int:
        return key if _INT_MIN <= key <= _INT_MAX else _Ext(4, str(key).encode())
    if t is bool or t is float:
        return canonical_key(key)  # (an integral float as that int; NaN refused)
    if isinstance(key, enum.Enum):
        canonical_key(key)  # (a plain Enum is refused)
        return key_identity(key.value)
    if isinstance(key, _dt.datetime):
        return _Ext(1, key.isoformat().encode())
    if isinstance(key, _dt.date):
        return _Ext(2, key.isoformat().encode())
    if isinstance(key, frozenset):
        return _Ext(3, b"".join(sorted(_encode(key_identity(k)) for k in key)))
    if isinstance(key, (bool, int, float, str, bytes)):  # a subclass of a scalar type
        for base in (bool, int, float, str, bytes):
            if isinstance(key, base):
                return key_identity(base(key))  # type: ignore[arg-type]
    return canonical_key(key)  # raises KeyFunctionError naming the key


def meta_key(index: int, name: bytes) -> bytes:
    """The store key of bin ``index``'s own record ``name`` (e.g. its timers)."""
    return index.to_bytes(BIN_BYTES, "big") + _META + name


def is_meta(skey: bytes) -> bool:
    """Whether a store key is a bin's own record, not a key's state."""
    return len(skey) > BIN_BYTES and skey[BIN_BYTES] == META


def bin_of_store_key(skey: bytes) -> int:
    return int.from_bytes(skey[:BIN_BYTES], "big")


def plain_key(key: Any) -> bool:
    """Whether ``key`` comes back equal *and of the same type* from its canonical
    encoding (see the module docstring), so the value need not carry it."""
    t = type(key)
    if t is str or t is bytes or key is None:
        return True
    if t is int:
        return _INT_MIN <= key <= _INT_MAX
    if t is float:
        return not key.is_integer() and key == key
    if t is tuple:
        return all(plain_key(k) for k in key)
    return False


def frame_value(key: Any, state: bytes) -> bytes:
    """The stored value of ``key``'s encoded ``state``: the state's bytes, framed with
    the key when the canonical encoding does not give the key back."""
    if plain_key(key):
        return state
    k = _encode(encode_key(key))
    if len(k) >= 1 << 16:
        raise StateStoreError(f"key {key!r}: its encoding is {len(k)} bytes, more than the store keeps (65535)")
    return _META + len(k).to_bytes(2, "big") + k + state


def state_bytes(value: bytes) -> bytes:
    """The state's bytes of a stored value."""
    if value[:1] == _META:
        n = int.from_bytes(value[1:3], "big")
        return value[3 + n :]
    return value


def key_of(skey: bytes, value: bytes) -> Any:
    """The key a stored ``(store key, value)`` pair belongs to."""
    if value[:1] == _META:
        n = int.from_bytes(value[1:3], "big")
        return decode_key(msgspec.msgpack.decode(value[3 : 3 + n], ext_hook=ext_hook))
    return _tuples(_decode(skey[BIN_BYTES:]))


def _tuples(obj: Any) -> Any:
    return tuple(_tuples(x) for x in obj) if type(obj) is list else obj
