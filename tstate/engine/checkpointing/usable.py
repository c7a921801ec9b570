"""Whether a checkpoint's contents can be restored: the check recovery runs on each
candidate before it resumes from one.

:meth:`CheckpointStore.recover <tstate.checkpoint.store.CheckpointStore.recover>` takes a
``verify`` callable that says what is wrong with a candidate checkpoint; an unusable one
is marked, and the previous one used (with a
:class:`~tstate.errors.CheckpointSkippedWarning`) or, when none is usable, a
:class:`~tstate.errors.CheckpointError` lists each and why.  The store's own check reads
every file (size, xxh64).  :class:`RestoreCheck` adds what only the dataflow knows:

- each operator's stored state schema parses, and every file of its chains was written
  with that schema's fingerprint (:func:`~tstate.checkpoint.schema_check.fingerprint_check`:
  a stored schema altered after the files were written -- by hand, or by a bug --
  makes the files unreadable as what the manifest says);
- (``eager``) every bin restored eagerly decodes, and holds the bin it is filed under:
  the decoded bins are kept for the restore (each file is read and decoded once).

A bin whose chain is a RocksDB run's SST export (:mod:`tstate.checkpoint.chain_reader`:
what the Spark backend writes with ``state=ts.RocksDB(...)``) is read by the one chain
reader both engines use: on a run with heap state it is decoded now (its timers cannot
be read ahead without it, so its operator is not restored lazily); on a run whose
operator keeps its state in RocksDB (``in_store``) it is not decoded at all: the restore
ingests the file into the owner's store (only its checksum is checked here).

A stored schema that is consistent with its files but that the state type declared now
cannot read is not damage: the checkpoint is fine, the program changed, and the restore
raises :class:`~tstate.errors.SchemaMismatchError` naming the operator and the field
(:func:`tstate.checkpoint.schema_check.check_compatible`).
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Optional

import msgspec

from tstate.checkpoint.chain_reader import decode_chain, is_sst
from tstate.checkpoint.manifest import FORMAT, Manifest, OperatorEntry
from tstate.checkpoint.schema_check import fingerprint_check, stored_fingerprints
from tstate.errors import TstateError
from tstate.state.bin import Bin
from tstate.types.schema import Schema

__all__ = ["RestoreCheck", "lazy_eligible"]

#: what decoding damaged or altered bytes can raise (besides tstate's own errors)
_DECODE_ERRORS = (TstateError, msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, KeyError)


def lazy_eligible(
    manifest: Manifest, stored_fingerprint: str, codec: Any, lazy: bool,
    entry: Optional[OperatorEntry] = None, in_store: bool = False,
) -> bool:
    """Whether an operator's bins are restored lazily: lazy restore asked for, files in
    the current format written with the schema declared now (else each bin is decoded
    and rewritten under the new schema or format), and -- unless its state is kept in
    RocksDB on this run (``in_store``: SST exports are ingested, the rest restored
    lazily) -- none of ``entry``'s chains an SST export (decoded at once)."""
    if not (lazy and stored_fingerprint == codec.fingerprint and manifest.format >= FORMAT):
        return False
    return in_store or entry is None or not any(is_sst(c) for c in entry.chains.values())


class RestoreCheck:
    """A ``verify`` callable for :meth:`CheckpointStore.recover` (see the module docs).

    ``codecs``: operator name -> (its state codec, its bin count now) for every stateful
    operator of the dataflow; ``lazy``: whether bins whose schema did not change are
    decoded later (then only the fingerprints are checked now); ``in_store``: the
    operators whose state is kept in RocksDB on this run (their SST exports are
    ingested by the restore, not decoded here).  After a candidate passes,
    :attr:`decoded` holds its eagerly decoded bins, ``(operator, bin) -> Bin``."""

    def __init__(
        self, store: Any, codecs: Mapping[str, tuple[Any, int]], lazy: bool, in_store: Collection[str] = ()
    ) -> None:
        self.store = store
        self.codecs = dict(codecs)
        self.lazy = lazy
        self.in_store = frozenset(in_store)
        self.decoded: dict[tuple[str, int], Bin] = {}

    def eligible(self, manifest: Manifest, name: str, fingerprint: str) -> bool:
        """:func:`lazy_eligible` for operator ``name`` of ``manifest`` on this run."""
        return lazy_eligible(
            manifest, fingerprint, self.codecs[name][0], self.lazy, manifest.operators.get(name), name in self.in_store
        )

    def __call__(self, manifest: Manifest) -> list[str]:
        self.decoded = {}
        fingerprints, problems = stored_fingerprints(manifest, self.codecs)
        if problems:
            return problems
        eager = any(not self.eligible(manifest, name, fp) for name, fp in fingerprints.items())
        verified: dict[str, bytes] = {}  # (kept only when something is decoded now)
        problems = self.store.verify(manifest, keep=verified if eager else None, check=fingerprint_check(manifest, fingerprints))
        if problems:
            return problems
        for name, fp in fingerprints.items():
            problems += self._decode(manifest, name, fp, verified)
        if problems:
            self.decoded = {}
        return problems

    def _decode(self, manifest: Manifest, name: str, fp: str, verified: dict[str, bytes]) -> list[str]:
        """Decode the bins of operator ``name`` that are restored eagerly into
        :attr:`decoded`; what fails (each naming the operator, bin and files)."""
        codec, bins = self.codecs[name]
        entry: OperatorEntry = manifest.operators[name]
        if entry.bins != bins or self.eligible(manifest, name, fp):
            return []  # (a bin count that changed is refused by the restore; lazy: decoded later)
        if codec.schema.compatible_with(Schema.from_builtins(entry.schema)) is not None:
            return []  # the program changed, not the checkpoint: the restore says how
        problems: list[str] = []
        for bin_index, chain in sorted(entry.chains.items()):
            data = [verified.pop(ref.path) for ref in chain]
            if is_sst(chain) and (name in self.in_store or fp != codec.fingerprint):
                continue  # ingested by the restore (nothing decoded), or refused by it (another schema)
            where = f"operator {name!r} bin {bin_index} ({', '.join(r.path for r in chain)})"
            try:
                b = decode_chain(chain, data, codec, fp)
            except _DECODE_ERRORS as exc:
                problems.append(f"{where}: cannot be decoded ({type(exc).__name__}: {exc})")
                continue
            if b.index != bin_index:
                problems.append(f"{where}: holds bin {b.index}")
                continue
            self.decoded[(name, bin_index)] = b
        return problems

