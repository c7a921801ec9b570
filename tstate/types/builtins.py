"""The builtins form of state values: cattrs (un)structuring hooks.

The *builtins form* of a value is made of dicts, lists, strs, ints, floats, bytes,
bools and ``None`` only: structs as dicts of field name to value, sets and tuples as
lists, datetimes and dates as ISO-8601 strings, enums by value, and -- in
:data:`converter`, the form of checkpoint format 1 and of
:meth:`~tstate.types.codec.StateCodec.to_builtins` -- dicts with non-``str`` keys as
``[key, value]`` pairs (JSON- and msgpack-python-friendly); in :data:`wire_converter`,
format 2's, every dict stays a dict.

The fast path of :class:`~tstate.types.codec.StateCodec` does not use these (msgspec
encodes and decodes typed values directly, see :mod:`tstate.types.wire`).  They are
the reference path: reading format 1, values msgspec cannot handle natively, and
:meth:`~tstate.types.codec.StateCodec.to_builtins` / ``from_builtins``.  Structuring
accepts both forms of a dict (a map or pairs), and lists wherever tuples or sets are
declared.

>>> converter.unstructure({(1, "a"): 2.5}, dict[tuple[int, str], float])
[[(1, 'a'), 2.5]]
>>> wire_converter.unstructure({(1, "a"): 2.5}, dict[tuple[int, str], float])
{(1, 'a'): 2.5}
>>> converter.structure([[[1, "a"], 2.5]], dict[tuple[int, str], float])
{(1, 'a'): 2.5}
"""

from __future__ import annotations

import datetime as _dt
import types
import typing
from collections.abc import Set as AbstractSet
from typing import Any, Callable

import cattrs
from cattrs.fns import identity

from tstate.errors import StateTypeError
from tstate.types.schema import Kind, Schema, analyse
from tstate.types.tracked import Array, Map
from tstate.types.wire import encodes_natively, has_struct

__all__ = ["converter", "wire_converter", "plain_for_decode"]

_UNIONS = (typing.Union, types.UnionType)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in _UNIONS


def _is_mapping(tp: Any) -> bool:
    return typing.get_origin(tp) in (dict, Map)


def _is_record(tp: Any) -> bool:
    return typing.is_typeddict(tp)


def _is_array(tp: Any) -> bool:
    return typing.get_origin(tp) is Array


# the hook factories of _make_converter's converter (per type, made when first needed)
def _unstructure_union(c: cattrs.Converter, tp: Any) -> Callable[[Any], Any]:
    """A ``Union``/``Optional`` value to builtins (a union of scalars as it is)."""
    rest = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(rest) == len(typing.get_args(tp)):
        return identity  # a union of scalars
    inner = c.get_unstructure_hook(rest[0] if len(rest) == 1 else typing.Union[tuple(rest)])
    if inner is identity:
        return identity

    def unstructure_optional(v: Any) -> Any:
        return None if v is None else inner(v)

    return unstructure_optional


def _structure_union(c: cattrs.Converter, tp: Any) -> Callable[[Any, Any], Any]:
    """A ``Union``/``Optional`` value from builtins (an ``int`` as ``float`` where only ``float`` is declared)."""
    args = typing.get_args(tp)
    rest = [a for a in args if a is not type(None)]
    if len(rest) < len(args):
        inner_tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
        inner = c.get_structure_hook(inner_tp)

        def structure_optional(v: Any, _: Any) -> Any:
            return None if v is None else inner(v, inner_tp)

        return structure_optional
    to_float = float in rest and int not in rest

    def structure_scalar_union(v: Any, _: Any) -> Any:
        return float(v) if to_float and type(v) is int else v

    return structure_scalar_union


def _unstructure_mapping(c: cattrs.Converter, pairs: bool, tp: Any) -> Callable[[Any], Any]:
    """A ``dict`` / ``Map`` to builtins: a dict, or ``[key, value]`` pairs (``pairs``, or keys that need them)."""
    key_tp, value_tp = typing.get_args(tp)
    ku, vu = c.get_unstructure_hook(key_tp), c.get_unstructure_hook(value_tp)
    tracked = typing.get_origin(tp) is Map
    pairs_here = False
    if not pairs:
        key_schema = analyse(key_tp)
        if has_struct(key_schema) or (_unhashable_form(key_schema) and not encodes_natively(key_schema)):
            pairs_here = True  # keyed by structs (or sets of datetimes...): pairs, as in format 1
        elif encodes_natively(key_schema):
            ku = identity  # msgspec encodes the key itself
    if key_tp is str or not (pairs or pairs_here):
        if vu is identity and key_tp is str:
            return (lambda m: dict(m._data)) if tracked else dict
        if key_tp is str:
            if tracked:
                return lambda m: {k: vu(v) for k, v in m._data.items()}
            return lambda d: {k: vu(v) for k, v in d.items()}
        if tracked:
            return lambda m: {ku(k): vu(v) for k, v in m._data.items()}
        return lambda d: {ku(k): vu(v) for k, v in d.items()}
    if tracked:
        return lambda m: [[ku(k), vu(v)] for k, v in m._data.items()]
    return lambda d: [[ku(k), vu(v)] for k, v in d.items()]


def _structure_mapping(c: cattrs.Converter, tp: Any) -> Callable[[Any, Any], Any]:
    """A ``dict`` / ``Map`` from a dict or from ``[key, value]`` pairs."""
    key_tp, value_tp = typing.get_args(tp)
    ks, vs = c.get_structure_hook(key_tp), c.get_structure_hook(value_tp)
    wrap: Callable[[dict[Any, Any]], Any] = Map._clean if typing.get_origin(tp) is Map else identity

    def structure(obj: Any, _: Any) -> Any:
        items = obj.items() if isinstance(obj, dict) else obj
        return wrap({ks(k, key_tp): vs(v, value_tp) for k, v in items})

    return structure


def _unstructure_array(c: cattrs.Converter, tp: Any) -> Callable[[Any], Any]:
    """An ``Array`` to a list."""
    (item_tp,) = typing.get_args(tp)
    iu = c.get_unstructure_hook(item_tp)
    if iu is identity:
        return lambda a: list(a._data)
    return lambda a: [iu(x) for x in a._data]


def _structure_array(c: cattrs.Converter, tp: Any) -> Callable[[Any, Any], Any]:
    """An ``Array`` from a list."""
    (item_tp,) = typing.get_args(tp)
    as_list = c.get_structure_hook(list[item_tp])  # type: ignore[valid-type]
    return lambda obj, _: Array._clean(as_list(obj, list[item_tp]))  # type: ignore[valid-type]


def _unstructure_record(c: cattrs.Converter, tp: Any) -> Callable[[Any], Any]:
    """A ``TypedDict`` record to a dict."""
    hooks = {k: c.get_unstructure_hook(h) for k, h in typing.get_type_hints(tp).items()}
    if all(h is identity for h in hooks.values()):
        return dict
    return lambda d: {k: hooks[k](v) for k, v in d.items()}


def _structure_record(c: cattrs.Converter, tp: Any) -> Callable[[Any, Any], Any]:
    """A ``TypedDict`` record from a dict."""
    hints = typing.get_type_hints(tp)
    hooks = {k: (c.get_structure_hook(h), h) for k, h in hints.items()}

    def structure(obj: Any, _: Any) -> Any:
        return {k: hooks[k][0](v, hooks[k][1]) for k, v in obj.items()}

    return structure


def _make_converter(pairs: bool) -> cattrs.Converter:
    """A converter for all state types (hooks are generated per type, lazily); with
    ``pairs``, dicts with non-``str`` keys unstructure to ``[key, value]`` pairs
    (format 1 and :meth:`StateCodec.to_builtins`), else to dicts (format 2)."""
    c = cattrs.Converter(detailed_validation=False, unstruct_collection_overrides={AbstractSet: list})
    c.register_unstructure_hook(_dt.datetime, _dt.datetime.isoformat)
    c.register_structure_hook(_dt.datetime, lambda v, _: _dt.datetime.fromisoformat(v))
    c.register_unstructure_hook(_dt.date, _dt.date.isoformat)
    c.register_structure_hook(_dt.date, lambda v, _: _dt.date.fromisoformat(v))
    c.register_structure_hook(type(None), lambda v, _: None)

    c.register_unstructure_hook_factory(_is_record, lambda tp: _unstructure_record(c, tp))
    c.register_structure_hook_factory(_is_record, lambda tp: _structure_record(c, tp))
    c.register_unstructure_hook_factory(_is_union, lambda tp: _unstructure_union(c, tp))
    c.register_structure_hook_factory(_is_union, lambda tp: _structure_union(c, tp))
    c.register_unstructure_hook_factory(_is_mapping, lambda tp: _unstructure_mapping(c, pairs, tp))
    c.register_structure_hook_factory(_is_mapping, lambda tp: _structure_mapping(c, tp))
    c.register_unstructure_hook_factory(_is_array, lambda tp: _unstructure_array(c, tp))
    c.register_structure_hook_factory(_is_array, lambda tp: _structure_array(c, tp))
    # Registered last, so asked first: msgpack already decodes list[int] right.
    c.register_structure_hook_factory(_decodes_as_is, lambda tp: _as_is)
    return c


def _decodes_as_is(tp: Any) -> bool:
    """Whether decoded msgpack is already a value of the list / dict type ``tp``."""
    if typing.get_origin(tp) not in (list, dict):
        return False
    try:
        return plain_for_decode(analyse(tp))
    except StateTypeError:
        return False


def _as_is(obj: Any, _: Any) -> Any:
    return obj


#: The cattrs converter of the builtins form (format 1: non-``str``-keyed dicts as pairs).
converter = _make_converter(pairs=True)
#: The cattrs converter of format 2's builtins (every dict a map), for values msgspec
#: cannot encode as they are (see :func:`tstate.types.wire.encodes_natively`).
wire_converter = _make_converter(pairs=False)


def _unhashable_form(schema: Schema) -> bool:
    """Whether the builtins form of a key of ``schema`` may be a dict or a list."""
    if schema.kind in (Kind.STRUCT, Kind.SET, Kind.FROZENSET):
        return True
    return any(_unhashable_form(a) for a in schema.args)


def plain_for_decode(schema: Schema) -> bool:
    """Whether the msgpack-decoded builtins form of ``schema`` already is the value."""
    k = schema.kind
    if k in (Kind.INT, Kind.STR, Kind.BYTES, Kind.BOOL, Kind.NONE):
        return True
    if k is Kind.LIST or k is Kind.OPTIONAL:
        return plain_for_decode(schema.args[0])
    if k is Kind.DICT:
        return schema.args[0].kind is Kind.STR and plain_for_decode(schema.args[1])
    if k is Kind.UNION:
        return all(a.kind is not Kind.FLOAT for a in schema.args)
    if k is Kind.RECORD:
        return all(plain_for_decode(f.schema) for f in schema.fields)
    return False
