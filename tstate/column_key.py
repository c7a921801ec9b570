"""Column keys: a key that is one field of the record, or a tuple of fields, hashed by a
function Spark computes too (``ts.col("origin")``, ``ts.col("origin", "dest")``).

A key function (``key=lambda r: r["origin"]``) is opaque: only Python can compute it,
so on Spark every record is routed by a Python task and crosses a Python-to-Python
shuffle before its stateful operator.  A :class:`Col` says what the key *is*: the
named fields of the record (a dict's items or an object's attributes).  Where those
fields are columns of the input DataFrame, the Spark backend computes each row's bin
in the JVM and runs the input's fused chain and the stateful operator in one task
(:mod:`tstate.spark.colocated`).

For that, both engines put a column key's value in the bin given by
:func:`column_hash`, a hash Spark SQL computes as ``xxhash64(c1, c2, ...)`` (seed 42,
each column's hash seeding the next, nulls skipped; integers as 64-bit longs, strings
and bytes as their bytes): the embedded engine and Spark assign every key the same bin,
so either engine resumes from the other's checkpoints.  (Other keys keep
:func:`tstate.keys.key_hash`; an operator's key must not change kind between a
checkpoint and its resume.)

Column values may be ``str``, ``bytes``, ``int`` (``bool`` as 0/1, within 64 bits) or
``None``; anything else raises :class:`~tstate.errors.KeyFunctionError` naming the
value (use a key function for float or datetime keys).

>>> import tstate as ts
>>> key = ts.col("origin")
>>> key({"origin": "ATL", "delay": 3})
'ATL'
>>> ts.col("a", "b")({"a": 1, "b": "x"})
(1, 'x')
>>> column_hash("ATL") == column_hash(("ATL",))
True
>>> key.sql_hash()
'xxhash64(`origin`)'
"""

from __future__ import annotations

import struct
from operator import attrgetter, itemgetter
from typing import Any

import xxhash
from attrs import field, frozen

from tstate.errors import ConfigurationError, KeyFunctionError

__all__ = ["Col", "col", "column_hash", "SPARK_SEED"]

#: the seed of Spark SQL's ``xxhash64``
SPARK_SEED = 42
_MASK = (1 << 64) - 1
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_xxh64 = xxhash.xxh64_intdigest
_long = struct.Struct("<q").pack


def _one(value: Any, seed: int) -> int:
    """Spark's ``xxhash64`` of one column value, seeded with ``seed`` (unsigned)."""
    t = type(value)
    if t is str:
        return _xxh64(value.encode("utf-8"), seed)
    if value is None:
        return seed
    if t is int or t is bool:
        if not _INT_MIN <= value <= _INT_MAX:
            raise KeyFunctionError(f"column key value {value!r}: integers in a column key must fit in 64 bits")
        return _xxh64(_long(value), seed)
    if t is bytes:
        return _xxh64(value, seed)
    if isinstance(value, str):  # subclasses (StrEnum, IntEnum)
        return _one(str(value), seed)
    if isinstance(value, int):
        return _one(int(value), seed)
    if isinstance(value, bytes):
        return _one(bytes(value), seed)
    raise KeyFunctionError(
        f"column key value {value!r} of type {t.__qualname__}: a column key holds str, bytes, int, bool or None "
        "values; use a key function (key=lambda r: ...) for other keys"
    )


def column_hash(key: Any) -> int:
    """The unsigned 64-bit hash of a column key's value: Spark SQL's
    ``xxhash64(c1, ...)`` of its columns (a tuple: one value per column).  A one-column
    key hashes as its value."""
    h = SPARK_SEED
    if type(key) is tuple:
        for v in key:
            h = _one(v, h)
        return h
    return _one(key, h)


def _names(instance: Any, attribute: Any, value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(n, str) and n for n in value):
        raise ConfigurationError(f"ts.col: give one or more field names, got {value!r}")


@frozen
class Col:
    """A column key (module docstring): ``names`` of the record's fields; the key is
    the field's value, or the tuple of the fields' values."""

    names: tuple[str, ...] = field(validator=_names)
    #: the C getters of the fields (``operator.itemgetter`` / ``attrgetter``)
    _item: Any = field(init=False, eq=False, repr=False)
    _attr: Any = field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_item", itemgetter(*self.names))
        object.__setattr__(self, "_attr", attrgetter(*self.names))

    def __call__(self, record: Any) -> Any:
        return self._item(record) if record.__class__ is dict else self._attr(record)

    def getter(self, record: Any) -> Any:
        """The C function reading this key from records shaped like ``record`` (dicts
        or objects): for loops over many records of one shape."""
        return self._item if record.__class__ is dict else self._attr

    def __getstate__(self) -> tuple[str, ...]:
        return self.names

    def __setstate__(self, names: tuple[str, ...]) -> None:
        object.__setattr__(self, "names", names)
        self.__attrs_post_init__()

    def __repr__(self) -> str:
        return f"ts.col({', '.join(map(repr, self.names))})"

    def sql_hash(self) -> str:
        """The Spark SQL expression of the key's hash over string columns (a signed
        64-bit long whose bits are :func:`column_hash`'s; integral and boolean columns
        are cast to ``bigint`` first: :func:`tstate.spark.colocated.dest_column`)."""
        return f"xxhash64({', '.join(_quote(n) for n in self.names)})"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def col(*names: str) -> Col:
    """A key that is the record's field ``names[0]`` (or the tuple of several fields):
    see :mod:`tstate.column_key`.  ``@flow.stateful(stream, key=ts.col("origin"), ...)``."""
    return Col(tuple(names))
