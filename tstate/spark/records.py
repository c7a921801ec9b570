"""How records cross a Spark exchange: msgpack, never pickle.

Records between stages travel through Spark's shuffle as ``binary`` cells, one cell per
``(operator, bin, time)`` group holding a list of records.  msgpack carries ``None``,
bools, ints, floats, str, bytes, lists and dicts; these extension types keep the rest of
what Spark rows and user functions commonly produce: ``tuple``, ``set``, ``frozenset``,
``datetime``, ``date``, ``Decimal``, and instances of **attrs classes** defined at a
module's top level (sent as the class's import path and its fields' values, rebuilt with
``cls(*values)``; every field must be an ``__init__`` argument).  Anything else (a custom
class) raises :class:`~tstate.errors.SparkError` naming the operator and the record: map
it to a tuple, dict or attrs instance before the exchange.

>>> decode_records(encode_records([(1, "a"), {"k": {2, 3}}, None], "op"))
[(1, 'a'), {'k': {2, 3}}, None]
>>> from tstate.progress.timestamp import Product
>>> decode_records(encode_records([Product(1, 2)], "op"))
[Product(outer=1, inner=2)]
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Any

import msgpack

from tstate.errors import SparkError

__all__ = ["encode_records", "decode_records"]

_TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _DECIMAL, _ATTRS = 1, 2, 3, 4, 5, 6, 7
_classes: dict[str, Any] = {}


def _default(obj: Any) -> Any:
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(_TUPLE, _pack(list(obj)))
    if t is set:
        return msgpack.ExtType(_SET, _pack(list(obj)))
    if t is frozenset:
        return msgpack.ExtType(_FROZENSET, _pack(list(obj)))
    if t is _dt.datetime:
        return msgpack.ExtType(_DATETIME, obj.isoformat().encode())
    if t is _dt.date:
        return msgpack.ExtType(_DATE, obj.isoformat().encode())
    if t is Decimal:
        return msgpack.ExtType(_DECIMAL, str(obj).encode())
    fields = getattr(t, "__attrs_attrs__", None)
    if fields is not None and "<locals>" not in t.__qualname__:
        return msgpack.ExtType(_ATTRS, _pack([f"{t.__module__}:{t.__qualname__}", [getattr(obj, a.name) for a in fields]]))
    raise TypeError(f"cannot encode {t.__name__}")


def _attrs_class(path: str) -> Any:
    cls = _classes.get(path)
    if cls is None:
        import importlib

        module, _, qualname = path.partition(":")
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if getattr(cls, "__attrs_attrs__", None) is None:
            raise SparkError(f"{path} is not an attrs class")
        _classes[path] = cls
    return cls


def _ext(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(_unpack(data))
    if code == _SET:
        return set(_unpack(data))
    if code == _FROZENSET:
        return frozenset(_unpack(data))
    if code == _DATETIME:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _DECIMAL:
        return Decimal(data.decode())
    if code == _ATTRS:
        path, values = _unpack(data)
        return _attrs_class(path)(*values)
    return msgpack.ExtType(code, data)  # pragma: no cover - not written by us


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_default, use_bin_type=True, strict_types=True)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext, raw=False, strict_map_key=False)


def encode_records(records: list[Any], operator: str) -> bytes:
    """One shuffle cell: the records (see the module docstring); ``operator`` names the
    operator the records go to, for the error message."""
    try:
        return _pack(records)
    except (TypeError, ValueError, OverflowError) as exc:
        for r in records:
            try:
                _pack(r)
            except (TypeError, ValueError, OverflowError):
                raise SparkError(
                    f"record {r!r} sent to operator {operator!r} cannot cross a Spark exchange ({exc}): "
                    "records must be built from None, bool, int, float, str, bytes, list, tuple, dict, set, "
                    "datetime, date, Decimal and instances of top-level attrs classes"
                ) from None
        raise SparkError(f"records sent to operator {operator!r} cannot cross a Spark exchange: {exc}") from None


def decode_records(data: bytes) -> list[Any]:
    """The records of one shuffle cell."""
    return _unpack(data)  # type: ignore[no-any-return]
