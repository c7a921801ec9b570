"""Stable key hashing: the canonical encoding of a key, its 64-bit hash, and its bin.

Python's ``hash()`` of a ``str`` changes from one process to the next, so it cannot
decide where state lives.  tstate hashes the key's *canonical encoding* with xxHash64
(seed 0) instead: the same key gives the same hash in every process, on every machine.

The canonical encoding is msgpack with keys normalised so that keys Python considers
equal encode equally: ``True``/``1``/``1.0`` all encode as the integer 1, tuples and
lists both encode as arrays.  Supported key types: ``None``, ``bool``, ``int``,
``float``, ``str``, ``bytes``, ``datetime``/``date``, enums, and tuples/lists/frozensets
of these.  NaN is refused (:class:`~tstate.errors.KeyFunctionError`): it is not equal to
itself, so its state could never be found again.

>>> key_hash(("ATL", 2001))
13757360166169118470
>>> bin_of(key_hash("ATL"), 256)
182
"""

from __future__ import annotations

import datetime as _dt
import enum
from typing import Any, Callable, Hashable, Iterable, Optional

import msgpack
import msgspec
import xxhash

from tstate.errors import KeyFunctionError

__all__ = ["hasher_of", "canonical_key", "key_bytes", "pack_plain", "key_hash", "bin_of", "check_bins", "encode_key", "encode_keys", "decode_key", "ext_hook"]

_MAX_BINS = 1 << 16
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # what msgpack encodes natively


def canonical_key(key: Any) -> Any:
    """The msgpack-ready canonical form of ``key`` (see the module docstring).

    Raises :class:`KeyFunctionError` for a key that has no canonical form."""
    t = type(key)
    if t is int:
        return key if _INT_MIN <= key <= _INT_MAX else ["~int", str(key)]
    if t is str or t is bytes or key is None:
        return key
    if t is bool:
        return int(key)
    if t is float:
        if key.is_integer():
            return canonical_key(int(key))
        if key != key:
            raise KeyFunctionError(_NAN)
        return key
    if t is tuple or t is list:
        return [canonical_key(k) for k in key]
    if isinstance(key, enum.Enum):
        if isinstance(key, (int, str)):  # IntEnum / StrEnum compare equal to their values
            return canonical_key(key.value)
        raise KeyFunctionError(
            f"key {key!r}: a plain Enum member cannot be a key (it would not equal itself after a restore); "
            "use its .value, or an IntEnum/StrEnum"
        )
    if isinstance(key, (str, int, bytes, float)):  # subclasses of the scalar types
        return canonical_key(_base_value(key))
    if isinstance(key, (_dt.datetime, _dt.date)):
        return ["~dt", key.isoformat()]
    if isinstance(key, frozenset):
        items = sorted((key_bytes(k) for k in key))
        return ["~fs", *items]
    raise KeyFunctionError(
        f"key {key!r} of type {t.__qualname__} cannot be used as a key: "
        "use None, bool, int, float, str, bytes, datetime, an enum, or a tuple of these"
    )


_NAN = (
    "key nan: NaN is not equal to itself, so every record would get a state of its own "
    "and none could be found again; map NaN to a real key (e.g. None) in the key function"
)


def _base_value(key: Any) -> Any:
    for base in (bool, int, float, str, bytes):
        if isinstance(key, base):
            return base(key)  # type: ignore[arg-type]
    return key  # pragma: no cover


# One packer, reused: building a Packer per call costs more than packing.  ``pack`` is a
# single C call made under the GIL, so sharing it between threads is safe.
#: plain msgpack (bin type; tuples as arrays): the canonical encoding of a ``str``,
#: ``bytes`` or 64-bit ``int`` key (:func:`key_bytes`), shared by every plain packing
pack_plain = _pack = msgpack.Packer(use_bin_type=True).pack
_xxh64 = xxhash.xxh64_intdigest


def key_bytes(key: Any) -> bytes:
    """The canonical encoding of ``key`` as bytes."""
    t = type(key)
    if t is str or t is bytes or (t is int and _INT_MIN <= key <= _INT_MAX):
        return _pack(key)
    return _pack(canonical_key(key))


def key_hash(key: Any) -> int:
    """The stable unsigned 64-bit hash of ``key`` (xxHash64, seed 0, of its canonical
    encoding).  Equal keys hash equally in every process."""
    return _xxh64(key_bytes(key))


def check_bins(bins: int) -> int:
    """Validate a bin count and return ``log2(bins)``."""
    from tstate.errors import ConfigurationError

    if not isinstance(bins, int) or bins < 1 or bins > _MAX_BINS or bins & (bins - 1):
        raise ConfigurationError(f"bins must be a power of two between 1 and {_MAX_BINS}, got {bins!r}")
    return bins.bit_length() - 1


def bin_of(hash64: int, bins: int) -> int:
    """The bin of a hash: its top ``log2(bins)`` bits."""
    shift = 64 - (bins.bit_length() - 1)
    return hash64 >> shift if shift < 64 else 0


def hasher_of(key: Any) -> Callable[[Any], int]:
    """The hash that places the keys of key function ``key`` in bins: Spark's
    ``xxhash64`` for a column key (:func:`tstate.column_key.column_hash`), so that the
    Spark backend can compute bins in the JVM; :func:`key_hash` for any other key."""
    from tstate.column_key import Col, column_hash

    return column_hash if isinstance(key, Col) else key_hash


#: the default bound of a :class:`KeyRouter`'s memo (entries)
MEMO_LIMIT = 1 << 16


class KeyRouter:
    """Memoised ``key -> bin`` for one bin count: hashing is done once per distinct key
    (while it is in the memo).

    The memo is cleared when it reaches ``limit`` entries (default :data:`MEMO_LIMIT`),
    so its memory stays bounded however many distinct keys pass (a few MB: each entry
    keeps its key alive).  ``memo``: a dict to memoise in (shared with its other
    users; its owner bounds it).  ``hasher``: the key's 64-bit hash (default
    :func:`key_hash`; :func:`hasher_of` gives a key function's)."""

    __slots__ = ("bins", "_shift", "_memo", "_limit", "hasher")

    def __init__(
        self,
        bins: int,
        limit: int = 0,
        memo: Optional[dict[Hashable, int]] = None,
        hasher: Optional[Callable[[Any], int]] = None,
    ) -> None:
        limit = limit or MEMO_LIMIT
        check_bins(bins)
        self.bins = bins
        self._shift = 64 - (bins.bit_length() - 1)
        self._memo: dict[Hashable, int] = {} if memo is None else memo
        self._limit = limit
        self.hasher = key_hash if hasher is None else hasher

    @property
    def memo(self) -> dict[Hashable, int]:
        """The memo of keys hashed so far (key -> bin; cleared in place when full)."""
        return self._memo

    def bin(self, key: Any) -> int:
        """The bin of ``key`` (memoised)."""
        try:
            b = self._memo.get(key)
        except TypeError as exc:
            raise KeyFunctionError(f"key {key!r} is not hashable: {exc}") from None
        if b is None:
            b = self.bin_uncached(key)
        return b

    def __reduce__(self) -> Any:
        # shipped without its memo (a Spark task's closure would carry every key seen)
        return (KeyRouter, (self.bins, self._limit, None, self.hasher))

    def bin_list(self, keys: Iterable[Any]) -> list[int]:
        """The bins of ``keys``, in order (:meth:`bin` over many keys, without a method
        call per key when the key is memoised)."""
        get = self._memo.get
        out: list[int] = []
        append = out.append
        for k in keys:
            try:
                b = get(k)
            except TypeError as exc:
                raise KeyFunctionError(f"key {k!r} is not hashable: {exc}") from None
            append(b if b is not None else self.bin_uncached(k))
        return out

    def bin_uncached(self, key: Any) -> int:
        """Hash ``key`` and remember its bin (callers checked the memo already)."""
        h = _xxh64(key_bytes(key)) if self.hasher is key_hash else self.hasher(key)
        b = h >> self._shift if self._shift < 64 else 0
        memo = self._memo
        if len(memo) >= self._limit:
            memo.clear()
        memo[key] = b
        return b


# -- keys inside payloads (checkpoints, migration) ----------------------------------------
# Keys must come back equal to what they were: tuples as tuples, datetimes as datetimes.
# Lists never are keys (unhashable), so an encoded list always means a tuple.  Payloads
# are written by msgspec (tstate.types.wire), so the extension types are msgspec's
# ``Ext``; payloads of format 1 (msgpack-python) carried the same codes and data.
_EXT_DATETIME, _EXT_DATE, _EXT_FROZENSET, _EXT_BIGINT = 1, 2, 3, 4
_Ext = msgspec.msgpack.Ext
_wire_pack = msgspec.msgpack.Encoder().encode
#: key types that are their own encoding (ints only within msgpack's range)
_PLAIN_KEY_TYPES = frozenset({str, int, bytes, float, bool, type(None)})


def encode_key(key: Any) -> Any:
    """A key as msgspec-ready data that :func:`decode_key` turns back into an equal key."""
    t = type(key)
    if t is int and not _INT_MIN <= key <= _INT_MAX:
        return _Ext(_EXT_BIGINT, str(key).encode())
    if t is str or t is int or t is bytes or t is float or t is bool or key is None:
        return key
    if t is tuple:
        return [encode_key(k) for k in key]
    if isinstance(key, enum.Enum):
        canonical_key(key)  # rejects plain enums
        return key.value
    if isinstance(key, _dt.datetime):
        return _Ext(_EXT_DATETIME, key.isoformat().encode())
    if isinstance(key, _dt.date):
        return _Ext(_EXT_DATE, key.isoformat().encode())
    if isinstance(key, frozenset):
        return _Ext(_EXT_FROZENSET, _wire_pack([encode_key(k) for k in key]))
    if isinstance(key, (str, int, bytes, float)):
        return _base_value(key)
    raise KeyFunctionError(f"key {key!r} of type {t.__qualname__} cannot be stored")


def encode_keys(keys: Any) -> list[Any]:
    """``[encode_key(k) for k in keys]``, without a call per key when every key is a
    plain ``str`` / ``int`` / ``bytes`` / ``float`` / ``bool`` / ``None`` (the common
    case: checked in C, then the keys are their own encoding)."""
    keys = keys if type(keys) is list else list(keys)
    types = set(map(type, keys))
    if types <= _PLAIN_KEY_TYPES and (int not in types or _ints_in_range(keys, types)):
        return keys
    return [encode_key(k) for k in keys]


def _ints_in_range(keys: list[Any], types: set[type]) -> bool:
    ints = keys if len(types) == 1 else [k for k in keys if type(k) is int]
    return not ints or (_INT_MIN <= min(ints) and max(ints) <= _INT_MAX)


def decode_key(obj: Any) -> Any:
    """Inverse of :func:`encode_key` (also of format 1's ``msgpack.ExtType``s, and the
    identity on keys :func:`ext_hook` decoded already)."""
    if type(obj) is list:
        return tuple(decode_key(k) for k in obj)
    if isinstance(obj, (_Ext, msgpack.ExtType)):
        return ext_hook(obj.code, obj.data)
    return obj


def ext_hook(code: int, data: Any) -> Any:
    """The key an extension type of :func:`encode_key` stands for (msgspec's decoders
    call it while decoding a payload)."""
    data = bytes(data)
    if code == _EXT_DATETIME:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _EXT_FROZENSET:
        return frozenset(decode_key(k) for k in msgspec.msgpack.decode(data, ext_hook=ext_hook))
    if code == _EXT_BIGINT:
        return int(data.decode())
    return _Ext(code, data)
