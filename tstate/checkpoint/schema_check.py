"""Checking that stored state can be read with the state type declared now.

A checkpoint stores each operator's state schema (``Schema.to_builtins()``).  Before
restoring, the engine calls :func:`check_compatible` for every operator: it raises
:class:`~tstate.errors.SchemaMismatchError` naming the operator and the field path
that differs, unless :meth:`Schema.compatible_with <tstate.types.schema.Schema.compatible_with>`
accepts the change (a field added *with a default*, ``T`` becoming ``Optional[T]``,
union or enum members added, ``list`` read as ``Array``...).

>>> from attrs import make_class, field
>>> from tstate.types.schema import analyse
>>> Old = make_class("Route", {"flights": field(type=int)})
>>> New = make_class("Route", {"flights": field(type=int), "late": field(type=int, default=0)})
>>> check_compatible("track", analyse(Old).to_builtins(), analyse(New))   # accepted
>>> check_compatible("track", analyse(New).to_builtins(), Old)
Traceback (most recent call last):
...
tstate.errors.SchemaMismatchError: operator 'track': the checkpoint's state cannot be read as Route: Route.late: field removed (state written with it cannot be read without it)
"""

from __future__ import annotations

from typing import Any, Mapping

from tstate.errors import CheckpointError, SchemaMismatchError, StateTypeError
from tstate.types.schema import Schema, analyse

__all__ = ["check_compatible"]


def check_compatible(operator: str, stored_schema_builtins: Mapping[str, Any], current_schema: Any) -> None:
    """Return if state stored with ``stored_schema_builtins`` (from a manifest) can be
    read as ``current_schema`` (a :class:`~tstate.types.schema.Schema`, or a declared
    state type, which is analysed); else raise
    :class:`~tstate.errors.SchemaMismatchError` whose message names ``operator``, the
    current type and the first field path that differs with the reason.  A stored
    schema that cannot be parsed raises :class:`~tstate.errors.CheckpointError`."""
    current = current_schema if isinstance(current_schema, Schema) else analyse(current_schema)
    try:
        stored = Schema.from_builtins(stored_schema_builtins)
    except StateTypeError as exc:
        raise CheckpointError(f"operator {operator!r}: the checkpoint's state schema is unreadable ({exc})") from None
    reason = current.compatible_with(stored)
    if reason is not None:
        raise SchemaMismatchError(
            f"operator {operator!r}: the checkpoint's state cannot be read as {current.name}: {reason}"
        )
