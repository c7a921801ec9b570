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

from typing import Any, Callable, Iterable, Mapping

import msgspec

from tstate.checkpoint.delta import envelope_fingerprint
from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.errors import CheckpointError, SchemaMismatchError, StateTypeError, TstateError
from tstate.types.schema import Schema, analyse

__all__ = ["check_compatible", "fingerprint_check", "stored_fingerprints"]

#: what a damaged or altered schema or envelope can raise (besides tstate's own errors)
_BAD = (TstateError, msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, KeyError, AttributeError, IndexError)


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


def stored_fingerprints(manifest: Manifest, operators: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Each of ``operators`` that ``manifest`` holds -> the fingerprint of its stored
    state schema, and what is wrong (a stored schema that does not parse: one line per
    operator, naming the manifest).  Recovery treats a problem as the checkpoint being
    unusable, like a damaged file."""
    fingerprints: dict[str, str] = {}
    problems: list[str] = []
    for name in operators:
        entry = manifest.operators.get(name)
        if entry is None:
            continue
        try:
            fingerprints[name] = Schema.from_builtins(entry.schema).fingerprint
        except _BAD as exc:
            problems.append(f"{manifest.name}: operator {name!r}: its stored state schema is unreadable ({exc})")
    return fingerprints, problems


def fingerprint_check(manifest: Manifest, fingerprints: Mapping[str, str]) -> Callable[[FileRef, bytes], str | None]:
    """A ``check`` for :meth:`CheckpointStore.verify
    <tstate.checkpoint.store.CheckpointStore.verify>`: each chain file of an operator in
    ``fingerprints`` (from :func:`stored_fingerprints`) must carry that fingerprint in
    its envelope -- else the stored schema was altered after its files were written, and
    they cannot be read as it says (a bin's SST export, kind ``"sst"`` or ``"sstd"``,
    has no envelope: only its checksum is checked).  The check returns the problem (naming the file and
    the operator) or ``None``; it pickles (a Spark executor runs it)."""
    expected = {
        ref.path: (name, fp)
        for name, fp in fingerprints.items()
        for chain in manifest.operators[name].chains.values()
        for ref in chain
        if ref.kind not in ("sst", "sstd")  # (an SST export has no envelope: its states are the manifest schema's)
    }
    return _FingerprintCheck(expected)


class _FingerprintCheck:
    def __init__(self, expected: dict[str, tuple[str, str]]) -> None:
        self.expected = expected

    def __call__(self, ref: FileRef, data: bytes) -> str | None:
        want = self.expected.get(ref.path)
        if want is None:
            return None
        name, fp = want
        try:
            got = envelope_fingerprint(data)
        except _BAD as exc:
            return f"{ref.path}: not a state file of operator {name!r} ({exc})"
        if got != fp:
            return (
                f"{ref.path}: written with state schema fingerprint {got}, but the checkpoint's stored schema "
                f"of operator {name!r} has fingerprint {fp} (the stored schema was altered)"
            )
        return None
