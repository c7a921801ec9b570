"""State as Arrow tables, for queries: one row per key.

:func:`to_arrow` turns ``(key, value)`` rows of one declared state type into a
``pyarrow.Table``; :func:`arrow_schema` gives its schema.  Columns:

* **The key**: a column ``key``; a tuple key becomes the columns ``key_0``, ``key_1``,
  ... (flat, so they can be filtered and joined directly).  With ``key_type`` given,
  the key columns are typed from it; otherwise their types are inferred from the keys
  (``key`` is of type null when there are no rows).  ``key_name`` renames the prefix.
* **The value**: a struct state's fields (or a ``TypedDict`` record's keys) become
  top-level columns; any other state type is one column named ``value``.

Types: ``int`` int64, ``float`` float64, ``str`` string, ``bytes`` binary, ``bool``,
``None`` null, ``datetime`` timestamp[us] (aware ones converted to UTC), ``date``
date32, enums by value (int64 or string), nested structs as Arrow structs, ``list`` /
``tuple[T, ...]`` / ``set`` / ``frozenset`` / ``Array`` as lists, ``dict`` / ``Map`` as
maps, a ``TypedDict`` record as a struct (a key it may lack nullable), a fixed tuple as a struct with fields ``_1``, ``_2``, ... (as Spark names tuple
fields), a union of scalars as the string of the value.  Only ``Optional`` types (and
``None``) are nullable.  Values are checked against the declaration first, so the
table always agrees with its schema.  Reading state for a query never marks tracked
containers changed.  pyarrow is imported on first use.

>>> from attrs import define, field
>>> @define
... class Route:
...     flights: int = 0
...     delays: list[int] = field(factory=list)
>>> t = to_arrow([(("ATL", "JFK"), Route(2, [5, 7]))], Route)
>>> t.column_names
['key_0', 'key_1', 'flights', 'delays']
>>> t.to_pylist()
[{'key_0': 'ATL', 'key_1': 'JFK', 'flights': 2, 'delays': [5, 7]}]
"""

from __future__ import annotations

import datetime as _dt
import enum
import typing
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from tstate.errors import StateTypeError
from tstate.types.check import Mismatch, compile_checker
from tstate.types.schema import Kind, Schema, analyse, root_label

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_type", "arrow_schema", "python_type", "record_type", "to_arrow"]

Convert = Callable[[Any], Any]


def _as_schema(tp_or_schema: Any) -> Schema:
    return tp_or_schema if isinstance(tp_or_schema, Schema) else analyse(tp_or_schema)


def arrow_type(schema: Schema | Any) -> pa.DataType:
    """The Arrow type of a state type (a :class:`Schema` or a declared type)."""
    import pyarrow as pa

    s = _as_schema(schema)
    k = s.kind
    simple = {
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.STR: pa.string(),
        Kind.BYTES: pa.binary(),
        Kind.BOOL: pa.bool_(),
        Kind.NONE: pa.null(),
        Kind.DATETIME: pa.timestamp("us"),
        Kind.DATE: pa.date32(),
        Kind.UNION: pa.string(),
    }
    if k in simple:
        return simple[k]
    if k is Kind.ENUM:
        return pa.int64() if isinstance(s.members[0][1], int) else pa.string()
    if k is Kind.OPTIONAL:
        return arrow_type(s.args[0])
    if k in (Kind.LIST, Kind.TUPLE, Kind.SET, Kind.FROZENSET, Kind.ARRAY):
        return pa.list_(_field("item", s.args[0]))
    if k in (Kind.DICT, Kind.MAP):
        return pa.map_(arrow_type(s.args[0]), _field("value", s.args[1]))
    if k is Kind.FIXED_TUPLE:
        return pa.struct([_field(f"_{i + 1}", a) for i, a in enumerate(s.args)])
    if k is Kind.STRUCT or k is Kind.RECORD:
        return pa.struct([_field(f.name, f.schema) for f in s.fields])
    raise AssertionError(f"no Arrow type for {k}")  # pragma: no cover


def _nullable(s: Schema) -> bool:
    return s.kind is Kind.OPTIONAL or s.kind is Kind.NONE


def _nullable_field(parent: Schema, f: Any) -> bool:
    """A field's column is nullable when its type is, or when a record may lack the key."""
    return _nullable(f.schema) or (parent.kind is Kind.RECORD and f.has_default)


def _field(name: str, s: Schema) -> pa.Field:
    import pyarrow as pa

    return pa.field(name, arrow_type(s), nullable=_nullable(s))


def _value_fields(s: Schema) -> list[pa.Field]:
    if s.kind is Kind.STRUCT:
        return [_field(f.name, f.schema) for f in s.fields]
    if s.kind is Kind.RECORD:
        import pyarrow as pa

        return [pa.field(f.name, arrow_type(f.schema), nullable=_nullable_field(s, f)) for f in s.fields]
    return [_field("value", s)]


def _key_fields(key_type: Any, key_name: str) -> list[pa.Field]:
    ks = _as_schema(key_type)
    if ks.kind is Kind.FIXED_TUPLE:
        return [_field(f"{key_name}_{i}", a) for i, a in enumerate(ks.args)]
    return [_field(key_name, ks)]


def arrow_schema(schema: Schema | Any, key_type: Any = None, *, key_name: str = "key") -> pa.Schema:
    """The schema of :func:`to_arrow`'s table for a state type (a :class:`Schema` or a
    declared type).  Without ``key_type`` it has only the value columns."""
    import pyarrow as pa

    s = _as_schema(schema)
    fields = _key_fields(key_type, key_name) if key_type is not None else []
    fields += _value_fields(s)
    _check_unique([f.name for f in fields], key_name)
    return pa.schema(fields)


def _check_unique(names: list[str], key_name: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise StateTypeError(
                f"column {name!r} would appear twice: a state field has the name of a key column; "
                f"pass another key_name than {key_name!r}"
            )
        seen.add(name)


def _identity(v: Any) -> Any:
    return v


def _converter(s: Schema) -> Convert:
    """Python value -> what ``pyarrow.array`` takes for :func:`arrow_type` (``_identity``
    when the value already is).  Tracked containers are read without marking them."""
    k = s.kind
    if k in (Kind.INT, Kind.FLOAT, Kind.STR, Kind.BYTES, Kind.BOOL, Kind.NONE, Kind.DATETIME, Kind.DATE):
        return _identity
    if k is Kind.ENUM:
        return lambda v: v.value
    if k is Kind.UNION:
        return str
    if k is Kind.OPTIONAL:
        inner = _converter(s.args[0])
        if inner is _identity:
            return _identity
        return lambda v: None if v is None else inner(v)
    if k in (Kind.LIST, Kind.TUPLE, Kind.SET, Kind.FROZENSET, Kind.ARRAY):
        item = _converter(s.args[0])
        data: Convert = (lambda v: v._data) if k is Kind.ARRAY else _identity
        if item is _identity:
            return lambda v: list(data(v))
        return lambda v: [item(x) for x in data(v)]
    if k in (Kind.DICT, Kind.MAP):
        kc, vc = _converter(s.args[0]), _converter(s.args[1])
        entries: Convert = (lambda v: v._data) if k is Kind.MAP else _identity
        return lambda v: [(kc(a), vc(b)) for a, b in entries(v).items()]
    if k is Kind.FIXED_TUPLE:
        items = [(f"_{i + 1}", _converter(a)) for i, a in enumerate(s.args)]
        return lambda v: {name: fn(x) for (name, fn), x in zip(items, v)}
    if k is Kind.STRUCT:
        fields = [(f.name, _converter(f.schema)) for f in s.fields]
        return lambda v: {name: fn(getattr(v, name)) for name, fn in fields}
    if k is Kind.RECORD:
        rfields = [(f.name, _converter(f.schema)) for f in s.fields]
        return lambda v: {name: None if (x := v.get(name)) is None else fn(x) for name, fn in rfields}
    raise AssertionError(f"no converter for {k}")  # pragma: no cover


def _infer_key(key: Any) -> Any:
    """A key of unknown type as pyarrow can infer it."""
    if isinstance(key, enum.Enum):
        return key.value
    if isinstance(key, frozenset):
        return sorted(key)
    return key


def to_arrow(
    rows: Iterable[tuple[Any, Any]], tp: Any, *, key_type: Any = None, key_name: str = "key"
) -> pa.Table:
    """A table with one row per ``(key, value)`` of the state type ``tp`` (see the module
    docstring for the columns).  Raises :class:`~tstate.errors.StateTypeError` with the
    key and field path for a value that does not match ``tp``."""
    import pyarrow as pa

    s = analyse(tp)
    check = compile_checker(s)
    label = root_label(s)
    rows = list(rows)
    for key, value in rows:
        try:
            check(value)
        except Mismatch as m:
            raise StateTypeError(f"{m.error(label)} (at key {key!r})") from None

    if key_type is not None:
        key_fields = _key_fields(key_type, key_name)
        ks = _as_schema(key_type)
        key_conv = _converter(ks)
        if ks.kind is Kind.FIXED_TUPLE:
            convs = [_converter(a) for a in ks.args]
            key_cols = [[fn(key[i]) for key, _ in rows] for i, fn in enumerate(convs)]
        else:
            key_cols = [[key_conv(key) for key, _ in rows]]
        key_arrays = [_array(col, f.type, f.name) for col, f in zip(key_cols, key_fields)]
    else:
        key_fields, key_arrays = _infer_keys([key for key, _ in rows], key_name)

    value_fields = _value_fields(s)
    if s.kind is Kind.STRUCT:
        convs = [_converter(f.schema) for f in s.fields]
        names = [f.name for f in s.fields]
        value_cols = [[fn(getattr(v, name)) for _, v in rows] for name, fn in zip(names, convs)]
    elif s.kind is Kind.RECORD:
        convs = [_converter(f.schema) for f in s.fields]
        names = [f.name for f in s.fields]
        value_cols = [[None if (x := v.get(name)) is None else fn(x) for _, v in rows] for name, fn in zip(names, convs)]
    else:
        conv = _converter(s)
        value_cols = [[conv(v) for _, v in rows]]
    value_arrays = [_array(col, f.type, f.name) for col, f in zip(value_cols, value_fields)]
    fields = key_fields + value_fields
    _check_unique([f.name for f in fields], key_name)
    return pa.Table.from_arrays(key_arrays + value_arrays, schema=pa.schema(fields))


def _array(values: list[Any], type_: pa.DataType | None, column: str) -> pa.Array:
    import pyarrow as pa

    try:
        return pa.array(values, type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise StateTypeError(f"column {column!r}: cannot be stored as Arrow {type_}: {exc}") from None


def _infer_keys(keys: list[Any], key_name: str) -> tuple[list[pa.Field], list[pa.Array]]:
    import pyarrow as pa

    if keys and all(type(k) is tuple for k in keys):
        width = len(keys[0])
        if any(len(k) != width for k in keys):
            raise StateTypeError("tuple keys of different lengths: pass key_type to to_arrow")
        names = [f"{key_name}_{i}" for i in range(width)]
        arrays = [_array([_infer_key(k[i]) for k in keys], None, names[i]) for i in range(width)]
    else:
        names = [key_name]
        arrays = [_array([_infer_key(k) for k in keys], None, key_name)]
    fields = [pa.field(n, a.type, nullable=a.null_count > 0 or a.type == pa.null()) for n, a in zip(names, arrays)]
    return fields, arrays


# ---------------------------------------------------------------------- Arrow -> Python


def python_type(tp: pa.DataType, *, timestamps: str = "datetime") -> Any:
    """The Python type of the values ``to_pylist()`` gives for Arrow type ``tp`` (a
    state type), or ``None`` when there is none: ``int64`` ``int``, ``double``
    ``float``, ``string`` ``str``, ``timestamp`` ``datetime`` (``int`` with
    ``timestamps="int"``), ``date32`` ``date``, ``list<T>`` ``list[T]``, a struct a
    ``TypedDict``, dictionary-encoded as its values (decimals, durations, ...: None)."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(tp):
        return python_type(tp.value_type, timestamps=timestamps)
    if t.is_boolean(tp):
        return bool
    if t.is_integer(tp):
        return int
    if t.is_floating(tp):
        return float
    if t.is_string(tp) or t.is_large_string(tp):
        return str
    if t.is_binary(tp) or t.is_large_binary(tp) or t.is_fixed_size_binary(tp):
        return bytes
    if t.is_timestamp(tp):
        return int if timestamps == "int" else _dt.datetime
    if t.is_date(tp):
        return _dt.date
    if t.is_null(tp):
        return type(None)
    if t.is_list(tp) or t.is_large_list(tp):
        item = python_type(tp.value_type, timestamps=timestamps)
        if item is None:
            return None
        inner = Optional[item] if tp.value_field.nullable and item is not type(None) else item
        return list[inner]  # type: ignore[valid-type]
    if t.is_struct(tp):
        fields = [tp.field(i) for i in range(tp.num_fields)]
        return record_type(pa.schema(fields), "Struct", timestamps=timestamps)
    return None


def record_type(schema: pa.Schema, name: str = "Row", *, timestamps: str = "datetime") -> Any:
    """A ``TypedDict`` of the rows ``to_pylist()`` gives for an Arrow ``schema``: one key
    per column, ``Optional`` when the column is nullable; ``None`` when a column has
    no Python state type (see :func:`python_type`).  The class is named ``name`` in
    module ``tstate.types.arrow``, so equal schemas give equal state fingerprints."""
    fields: dict[str, Any] = {}
    for f in schema:
        py = python_type(f.type, timestamps=timestamps)
        if py is None:
            return None
        fields[f.name] = Optional[py] if f.nullable and py is not type(None) else py
    td = typing.TypedDict(name, fields)  # type: ignore[misc]
    td.__module__ = __name__
    return td
