"""Copying a state value so that later changes to it do not show in the copy.

:func:`compile_copier` turns a :class:`~tstate.types.schema.Schema` into a function
returning a copy of a value of that type that shares nothing *mutable* with it: a
``list[int]`` is copied with ``list.copy`` (its ints are immutable: shared), a struct
field by field, an immutable value (an ``int``, a tuple of strs, a frozen attrs class
of immutable fields -- :func:`immutable`) is its own copy.  It is what an asynchronous
checkpoint's copy-on-write takes before the processing path changes a state the
checkpoint has not read yet (:mod:`tstate.engine.checkpointing.freeze`): a copy costs about what
reading the value does, a tenth of encoding and checking it, and the copy is encoded
and checked later with the other states of its bin, in one call.

A copy equals the value and encodes to the same bytes -- except that a copied ``set``
may iterate (so encode) its items in another order.

The copy is *not* checked: a value that does not match its declaration is copied as
it is (anything unexpected by :func:`copy.deepcopy`), so that the check which follows
names the same mistake.  Structs are copied without calling ``__init__`` (no
validators, converters or ``__attrs_post_init__`` run): the copy has exactly the
original's field values.

>>> from attrs import define, field
>>> from tstate.types.schema import analyse
>>> @define
... class Route:
...     flights: int = 0
...     delays: list[int] = field(factory=list)
>>> r = Route(2, [5, 7])
>>> c = compile_copier(analyse(Route))(r)
>>> r.delays.append(9); r.flights += 1
>>> c, c.delays is r.delays
(Route(flights=2, delays=[5, 7]), False)
>>> compile_copier(analyse(tuple[int, str]))((1, "a")) is not None
True
"""

from __future__ import annotations

import copy as _copy
import importlib
from typing import Any, Callable

from tstate.types.schema import SCALAR_KINDS, Kind, Schema, by_type
from tstate.types.tracked import Array, Map

__all__ = ["Copier", "compile_copier", "immutable"]

Copier = Callable[[Any], Any]


def immutable(schema: Schema) -> bool:
    """Whether no value of ``schema`` can be changed in place: scalars, datetimes,
    dates, enums, unions (of scalars), and tuples, frozensets, ``Optional`` and frozen
    attrs classes made only of such values."""
    k = schema.kind
    if k in SCALAR_KINDS or k in (Kind.DATETIME, Kind.DATE, Kind.ENUM, Kind.UNION):
        return True
    if k in (Kind.TUPLE, Kind.FIXED_TUPLE, Kind.FROZENSET, Kind.OPTIONAL):
        return all(immutable(a) for a in schema.args)
    if k is Kind.STRUCT:
        # attrs has no public "is frozen": frozen classes share this __setattr__ (if it is
        # ever renamed, frozen classes count as mutable: copied, which is only slower)
        frozen_setattr = getattr(importlib.import_module("attr._make"), "_frozen_setattrs", ())
        frozen = getattr(schema.py_type, "__setattr__", None) is frozen_setattr
        return frozen and all(immutable(f.schema) for f in schema.fields)
    return False


def _same(v: Any) -> Any:
    return v


def _deep(v: Any) -> Any:
    """A value of an unexpected type: a deep copy if it can be made, else the value."""
    try:
        return _copy.deepcopy(v)
    except Exception:  # an uncopyable object: it fails the check anyway
        return v


_CACHE: dict[Any, Copier] = {}


def compile_copier(schema: Schema) -> Copier:
    """The copier of ``schema`` (cached by declared type; see the module docstring)."""
    return by_type(_CACHE, schema.tp, lambda: _compile(schema))


def _compile(schema: Schema) -> Copier:
    if immutable(schema):
        return _same
    k = schema.kind
    if k is Kind.OPTIONAL:
        inner = compile_copier(schema.args[0])

        def copy_optional(v: Any) -> Any:
            return None if v is None else inner(v)

        return copy_optional
    if k in (Kind.LIST, Kind.SET, Kind.ARRAY, Kind.TUPLE, Kind.FROZENSET):
        return _sequence(schema)
    if k is Kind.FIXED_TUPLE:
        parts = [compile_copier(a) for a in schema.args]

        def copy_fixed_tuple(v: Any) -> Any:
            if type(v) is not tuple or len(v) != len(parts):
                return _deep(v)
            return tuple(p(x) for p, x in zip(parts, v))

        return copy_fixed_tuple
    if k in (Kind.DICT, Kind.MAP):
        return _mapping(schema)
    if k is Kind.RECORD:
        fields = {f.name: compile_copier(f.schema) for f in schema.fields}

        def copy_record(v: Any) -> Any:
            if type(v) is not dict:
                return _deep(v)
            return {name: (fields[name](x) if name in fields else _deep(x)) for name, x in v.items()}

        return copy_record
    if k is Kind.STRUCT:
        return _struct(schema)
    return _deep  # pragma: no cover - every mutable kind is above


def _sequence(schema: Schema) -> Copier:
    """list, set, Array, and tuple / frozenset of mutable items."""
    k = schema.kind
    container = schema.py_type
    item = compile_copier(schema.args[0])
    flat = item is _same  # items immutable: a shallow copy shares nothing mutable
    if k is Kind.ARRAY:
        clean = Array._clean

        def copy_array(v: Any) -> Any:
            if type(v) is not Array:
                return _deep(v)
            return clean(v._data.copy() if flat else [item(x) for x in v._data])

        return copy_array
    if flat:  # list or set (an immutable tuple / frozenset is its own copy)
        def copy_flat(v: Any) -> Any:
            return v.copy() if type(v) is container else _deep(v)

        return copy_flat

    def copy_items(v: Any) -> Any:
        if type(v) is not container:
            return _deep(v)
        return container(item(x) for x in v)

    return copy_items


def _mapping(schema: Schema) -> Copier:
    k = schema.kind
    value = compile_copier(schema.args[1])  # (keys are hashable: immutable)
    flat = value is _same
    if k is Kind.MAP:
        clean = Map._clean

        def copy_map(v: Any) -> Any:
            if type(v) is not Map:
                return _deep(v)
            d = v._data
            return clean(d.copy() if flat else {key: value(x) for key, x in d.items()})

        return copy_map

    def copy_dict(v: Any) -> Any:
        if type(v) is not dict:
            return _deep(v)
        return v.copy() if flat else {key: value(x) for key, x in v.items()}

    return copy_dict


def _struct(schema: Schema) -> Copier:
    """A generated function: a new instance (no ``__init__``), each field copied."""
    cls = schema.py_type
    ns: dict[str, Any] = {"cls": cls, "new": object.__new__, "setattr": object.__setattr__, "deep": _deep}
    lines = ["def copy_struct(v):", "    if type(v) is not cls:", "        return deep(v)", "    n = new(cls)"]
    for i, f in enumerate(schema.fields):
        part = compile_copier(f.schema)
        if part is _same:
            lines.append(f"    setattr(n, {f.name!r}, v.{f.name})")
        else:
            ns[f"c{i}"] = part
            lines.append(f"    setattr(n, {f.name!r}, c{i}(v.{f.name}))")
    lines.append("    return n")
    exec(compile("\n".join(lines), f"<tstate copy {schema.name}>", "exec"), ns)
    fn: Copier = ns["copy_struct"]
    return fn
