"""Restoring an execution from its newest usable checkpoint (before the first step).

:func:`restore` verifies and installs the checkpoint's bins on their owners -- the
configurations' initial maps, so onto any number of workers -- and says what it
resumed from (:class:`Restored`).  ``restore="eager"`` decodes every bin now, each
from the bytes the verification read (read once, not twice);  ``restore="lazy"`` (the
default) hands each bin to its owner undecoded and leaves decoding to
:class:`~tstate.engine.checkpointing.lazy.LazyRestore`, when first needed or between
steps.  A bin whose stored schema differs from the declared one (a compatible change,
e.g. a field added with a default), or stored in an older format, is decoded now and
marked to be written whole at the next checkpoint.

A bin stored as a RocksDB run's SST export (the Spark backend's ``state=ts.RocksDB(...)``)
is read by the chain reader both engines share (:mod:`tstate.checkpoint.chain_reader`):
an operator whose state is in RocksDB here ingests it into the owner's store, nothing
decoded; with heap state it is decoded now (``usable``).  An operator whose state is in
RocksDB here and whose bins the checkpoint's database files hold
(:mod:`~tstate.engine.checkpointing.file_capture`) takes those bins from the files
only: a chain the manifest still lists for such a bin is the one it was restored from
before, older than the files.

:class:`Driven` is the execution as the checkpoint driver reads it (the embedded
engine's :class:`~tstate.engine.execution.Execution`).

>>> Restored(3, 7, {"nums": 4}, 0.01, 2).lazy
0
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Optional, Protocol

from attrs import frozen

from tstate.checkpoint.chain_reader import check_sst_schema, is_sst, load_chain
from tstate.checkpoint.manifest import FileRef, Manifest, OperatorEntry, check_format
from tstate.checkpoint.schema_check import check_compatible
from tstate.checkpoint.settings import Checkpoints
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.file_capture import BINS_KEY, FileCapture, restore_files
from tstate.engine.checkpointing.usable import RestoreCheck
from tstate.errors import ConfigurationError
from tstate.hash_kind import check_hash_kind, hash_kind_of
from tstate.migration.configuration import ConfigHistory
from tstate.plan.graph import Graph
from tstate.plan.stateful import Stateful
from tstate.types.schema import Schema
from tstate.types.wire import FORMAT

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.checkpointing.lazy import LazyRestore

__all__ = ["Driven", "Restored", "Resumed", "restore"]


class Driven(Protocol):
    """The execution a checkpoint driver drives, as it reads it (the embedded
    engine's :class:`~tstate.engine.execution.Execution`)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def workers(self) -> int: ...

    @property
    def configs(self) -> dict[int, ConfigHistory]: ...

    @property
    def operators(self) -> list[list[Any]]: ...

    @property
    def activations(self) -> int: ...


@frozen
class Restored:
    """What an execution resumed from: checkpoint ``id`` at ``time``; ``seconds`` until
    processing could resume; ``lazy``: how many bins were left to decode when it did
    (``restore="lazy"``: see ``Coordinator.lazy``)."""

    id: int
    time: Any
    positions: dict[str, Any]
    seconds: float
    workers_before: int
    lazy: int = 0


@frozen
class Resumed:
    """:func:`restore`'s answer: what the run resumed from (``restored``), the manifest
    its checkpoints build on, and the bins left to decode (None: none, or eager)."""

    restored: Restored
    manifest: Manifest
    lazy: "Optional[LazyRestore]"


def restore(exe: Driven, store: CheckpointStore, cfg: Checkpoints) -> Optional[Resumed]:
    """Install the newest usable checkpoint of ``store`` in ``exe``'s stateful
    operators (see the module docstring); None: nothing to resume from (``cfg.resume``
    off, or no checkpoint).  A :class:`~tstate.errors.CheckpointError` if checkpoints
    exist and none is usable (unless ``fresh_if_unusable``), or a bin file holds
    another bin; a :class:`~tstate.errors.ConfigurationError` if an operator's bin
    count or its key's hash kind (:mod:`tstate.hash_kind`) changed."""
    if not cfg.resume:
        return None
    start = _time.perf_counter()
    stateful = list(exe.graph.of_type(Stateful))
    lazy_mode = cfg.restore == "lazy"
    codecs = {node.name: (exe.operators[0][index].codec, node.bins) for index, node in stateful}
    in_store = {node.name for index, node in stateful if FileCapture.owns(exe.operators[0][index])}
    # each candidate's files verified, its stored schemas checked against its files,
    # and (eager) its bins decoded -- each file read once, its bytes dropped once its
    # bin is decoded: a checkpoint failing any of it is unusable
    check = RestoreCheck(store, codecs, lazy_mode, in_store)
    manifest = store.recover(fresh_if_unusable=cfg.fresh_if_unusable, verify=check)
    if manifest is None:
        return None
    check_format(manifest, cfg.directory)

    lazy: "Optional[LazyRestore]" = None
    for index, node in stateful:
        lazy = _install(exe, store, manifest, check, index, node, codecs[node.name][0], lazy)
    # RocksDB operators: their databases opened from the checkpoint's files, nothing decoded
    restore_files(exe, store, manifest)
    left = 0
    if lazy is not None:
        lazy.resumed()
        left = lazy.left
    meta = manifest.meta
    restored = Restored(
        manifest.id, manifest.time, dict(meta.get("sources", {})), _time.perf_counter() - start,
        int(meta.get("workers", 0)), left,
    )
    return Resumed(restored, manifest, lazy)


def _install(
    exe: Driven, store: CheckpointStore, manifest: Manifest, check: RestoreCheck, index: int, node: Stateful,
    codec: Any, lazy: "Optional[LazyRestore]",
) -> "Optional[LazyRestore]":
    """Install stateful ``node``'s bins of ``manifest`` on their owners: undecoded
    (added to ``lazy``, made if None), decoded by ``check``, or (SST exports, state in
    RocksDB here) ingested by the owner's store; the lazy restore."""
    entry = manifest.operators.get(node.name)
    if entry is None:
        return lazy  # an operator added since: starts empty
    check_compatible(node.name, entry.schema, node.schema)
    if entry.bins != node.bins:
        raise ConfigurationError(
            f"operator {node.name!r}: checkpoint {manifest.id} has {entry.bins} bins, the dataflow {node.bins}"
        )
    check_hash_kind(node.name, manifest.id, entry.hash, hash_kind_of(node.key))
    owners = exe.configs[index].initial
    # a compatible older schema (e.g. a field added with a default) decodes too
    stored = Schema.from_builtins(entry.schema).fingerprint
    chains = _chains_to_install(exe, manifest, entry, index, node)
    for chain in chains.values():
        check_sst_schema(chain, stored, codec)  # (an SST export is not converted)
    if node.name in check.in_store:  # SST exports ingested by their owners' stores, nothing decoded
        for bin_index, chain in sorted(chains.items()):
            if is_sst(chain):
                op = exe.operators[owners[bin_index]][index]
                op.install_bin(load_chain(store, chain, op.store, stored, bin_index))
                del chains[bin_index]
    if check.eligible(manifest, node.name, stored):
        # decoded when first needed (files as they are: no rewrite due)
        if lazy is None:
            from tstate.engine.checkpointing.lazy import LazyRestore

            lazy = LazyRestore(store, manifest.id)
        by_owner: dict[int, dict[int, Any]] = {}
        for bin_index, chain in chains.items():
            by_owner.setdefault(owners[bin_index], {})[bin_index] = chain
        for w, held in sorted(by_owner.items()):
            lazy.add(exe.operators[w][index], codec, stored, held)
        return lazy
    for bin_index in sorted(chains):
        b = check.decoded.pop((node.name, bin_index))  # (decoded by the check)
        # rewrite it under the new schema, or in the current format (an SST export: whole)
        b.full = b.full or stored != codec.fingerprint or manifest.format < FORMAT
        exe.operators[owners[bin_index]][index].install_bin(b)
    return lazy


def _chains_to_install(
    exe: Driven, manifest: Manifest, entry: OperatorEntry, index: int, node: Stateful
) -> dict[int, tuple[FileRef, ...]]:
    """The chains of ``entry`` the restore installs: all of them, but for an operator
    whose state is in RocksDB here, not those of the bins the checkpoint's database
    files hold (:func:`restore_files` installs those; such a chain is older)."""
    chains = dict(entry.chains)
    if FileCapture.owns(exe.operators[0][index]):
        for key in manifest.meta.get(BINS_KEY, {}).get(node.name, {}):
            chains.pop(int(key), None)
    return chains
