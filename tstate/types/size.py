"""Cheap estimates of a state value's size: encoded (bin size accounting) and on the heap.

:func:`estimated_size` follows the codec's encoding (checkpoint format 2, see
:mod:`tstate.types.wire`) without building it:

* It is **exact** for values whose containers have at most 64 items and that hold no
  ``datetime`` (ISO strings with a UTC offset are counted as ``+HH:MM``).
* Containers with more items are estimated from about 32 evenly spaced samples (a
  set or dict is still iterated, in C, to reach them), so the Python work is bounded
  per container level; the estimate is then within ~2x of the encoded size
  for the usual shapes (items of similar size).
* It never raises: an object the codec cannot encode counts as 16 bytes.

>>> estimated_size({"a": [1, 2, 300]})
9
>>> from tstate.types.codec import StateCodec
>>> len(StateCodec(dict[str, list[int]]).encode({"a": [1, 2, 300]}))
9

:func:`heap_size` estimates the bytes the decoded value holds on the heap instead
(``sys.getsizeof`` of the value and of what it holds, large containers from a sample):
what a cache of decoded states counts against its budget.

>>> heap_size([1, 2, 300]) > heap_size([])
True
"""

from __future__ import annotations

import datetime as _dt
import enum
import sys
from itertools import islice
from typing import Any, Callable

import attrs

from tstate.types.tracked import Array, Map

__all__ = ["estimated_size", "heap_size"]

_SAMPLE_ABOVE = 64
_SAMPLES = 32
_UNKNOWN = 16


def estimated_size(value: Any) -> int:
    """The approximate number of bytes the codec encodes ``value`` into (see the
    module docstring for how approximate)."""
    fn = _BY_TYPE.get(type(value))
    if fn is not None:
        return fn(value)
    if isinstance(value, enum.Enum):
        return estimated_size(value.value)
    if attrs.has(type(value)):
        return _struct(value)
    return _UNKNOWN


def _int(v: int) -> int:
    if -32 <= v < 128:
        return 1
    if -128 <= v < 256:
        return 2
    if -32768 <= v < 65536:
        return 3
    if -(1 << 31) <= v < (1 << 32):
        return 5
    return 9


def _str(v: str) -> int:
    n = len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
    return n + (1 if n < 32 else 2 if n < 256 else 3 if n < 65536 else 5)


def _bytes(v: bytes) -> int:
    n = len(v)
    return n + (2 if n < 256 else 3 if n < 65536 else 5)


def _header(n: int) -> int:
    """An array or map header."""
    return 1 if n < 16 else 3 if n < 65536 else 5


def _items(items: Any, n: int) -> int:
    """The summed size of ``n`` items (estimated from a sample when there are many)."""
    if n <= _SAMPLE_ABOVE:
        return sum(map(estimated_size, items))
    step = n // _SAMPLES
    sample = items[::step] if isinstance(items, (list, tuple)) else list(islice(items, 0, None, step))
    return round(sum(map(estimated_size, sample)) * n / len(sample))


def _sequence(v: Any) -> int:
    n = len(v)
    return _header(n) + _items(v, n)


def _array(v: Array[Any]) -> int:
    return _sequence(v._data)


def _dict(v: dict[Any, Any]) -> int:
    n = len(v)
    if n == 0:
        return 1
    pairs: Any = v.items() if n <= _SAMPLE_ABOVE else list(islice(v.items(), 0, None, n // _SAMPLES))
    # keyed by structs: [key, value] pairs (one array header each); else a map
    per_pair = 1 if _struct_key(next(iter(v))) else 0
    total = sum(estimated_size(k) + estimated_size(x) + per_pair for k, x in pairs)
    if n > _SAMPLE_ABOVE:
        total = round(total * n / len(pairs))
    return _header(n) + total


def _struct_key(k: Any) -> bool:
    t = type(k)
    if t is tuple or t is frozenset:
        return any(_struct_key(x) for x in k)
    return attrs.has(t)


def _map(v: Map[Any, Any]) -> int:
    return _dict(v._data)


def _datetime(v: _dt.datetime) -> int:
    n = 19 + (7 if v.microsecond else 0) + (6 if v.tzinfo is not None else 0)
    return n + (1 if n < 32 else 2)


_FIELD_NAMES: dict[type, list[tuple[str, int]]] = {}


def _struct(v: Any) -> int:
    cls = type(v)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = [(a.name, _str(a.name)) for a in attrs.fields(cls)]
    return _header(len(names)) + sum(size + estimated_size(getattr(v, name)) for name, size in names)


_BY_TYPE: dict[type, Callable[[Any], int]] = {
    int: _int,
    float: lambda v: 9,
    bool: lambda v: 1,
    type(None): lambda v: 1,
    str: _str,
    bytes: _bytes,
    list: _sequence,
    tuple: _sequence,
    set: _sequence,
    frozenset: _sequence,
    dict: _dict,
    Array: _array,
    Map: _map,
    _dt.datetime: _datetime,
    _dt.date: lambda v: 11,
}


# ---------------------------------------------------------------------- on the heap

_getsizeof = sys.getsizeof
_LEAF = frozenset({int, float, bool, type(None), str, bytes, _dt.datetime, _dt.date})


def heap_size(value: Any, _depth: int = 0) -> int:
    """About the bytes ``value`` and the objects it holds take on the heap (shared
    small objects -- small ints, interned strings -- counted as if they were not; a
    container of more than 64 items estimated from about 32 of them)."""
    t = type(value)
    size = _getsizeof(value)
    if t in _LEAF or _depth > 32:
        return size
    if t is Array or t is Map:
        return size + heap_size(value._data, _depth + 1)
    if isinstance(value, dict):
        return size + _heap_items(list(value.keys()), _depth) + _heap_items(list(value.values()), _depth)
    if isinstance(value, (list, tuple, set, frozenset)):
        return size + _heap_items(value if isinstance(value, (list, tuple)) else list(value), _depth)
    if attrs.has(t):
        inner = getattr(value, "__dict__", None)
        if inner is not None:
            size += _getsizeof(inner)
        return size + sum(heap_size(getattr(value, a.name), _depth + 1) for a in attrs.fields(t))
    return size


def _heap_items(items: Any, depth: int) -> int:
    n = len(items)
    if n <= _SAMPLE_ABOVE:
        return sum(heap_size(x, depth + 1) for x in items)
    sample = items[:: n // _SAMPLES]
    return round(sum(heap_size(x, depth + 1) for x in sample) * n / len(sample))
