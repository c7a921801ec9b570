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

:class:`Driven` is the execution as the checkpoint driver reads it (the embedded
engine's :class:`~tstate.engine.execution.Execution`).

>>> Restored(3, 7, {"nums": 4}, 0.01, 2).lazy
0
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Optional, Protocol

from attrs import frozen

from tstate.checkpoint.delta import restore_bin
from tstate.checkpoint.manifest import Manifest, check_format
from tstate.checkpoint.schema_check import check_compatible
from tstate.checkpoint.settings import Checkpoints
from tstate.checkpoint.store import CheckpointStore
from tstate.errors import CheckpointError, ConfigurationError
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
    count changed."""
    if not cfg.resume:
        return None
    start = _time.perf_counter()
    # an eager restore decodes every file the verification reads: it keeps their bytes
    # (read once, not twice), each dropped once its bin is decoded
    verified: dict[str, bytes] = {}
    keep = None if cfg.restore == "lazy" else (lambda m: store.verify(m, keep=verified))
    manifest = store.recover(fresh_if_unusable=cfg.fresh_if_unusable, verify=keep)
    if manifest is None:
        return None
    check_format(manifest, cfg.directory)
    read = store.read

    def data(ref: Any) -> bytes:
        got = verified.pop(ref.path, None)
        return read(ref) if got is None else got

    lazy: "Optional[LazyRestore]" = None
    for index, node in exe.graph.of_type(Stateful):
        entry = manifest.operators.get(node.name)
        if entry is None:
            continue  # an operator added since: starts empty
        check_compatible(node.name, entry.schema, node.schema)
        if entry.bins != node.bins:
            raise ConfigurationError(
                f"operator {node.name!r}: checkpoint {manifest.id} has {entry.bins} bins, the dataflow {node.bins}"
            )
        owners = exe.configs[index].initial
        codec = exe.operators[0][index].codec
        # a compatible older schema (e.g. a field added with a default) decodes too
        stored = Schema.from_builtins(entry.schema).fingerprint
        if cfg.restore == "lazy" and stored == codec.fingerprint and manifest.format >= FORMAT:
            # decoded when first needed (files as they are: no rewrite due)
            if lazy is None:
                from tstate.engine.checkpointing.lazy import LazyRestore

                lazy = LazyRestore(store, manifest.id)
            by_owner: dict[int, dict[int, Any]] = {}
            for bin_index, chain in entry.chains.items():
                by_owner.setdefault(owners[bin_index], {})[bin_index] = chain
            for w, chains in sorted(by_owner.items()):
                lazy.add(exe.operators[w][index], codec, stored, chains)
            continue
        for bin_index, chain in sorted(entry.chains.items()):
            b = restore_bin([data(ref) for ref in chain], codec, fingerprint=stored)
            # rewrite it under the new schema, or in the current format
            b.full = stored != codec.fingerprint or manifest.format < FORMAT
            if b.index != bin_index:
                raise CheckpointError(f"checkpoint {manifest.id}: operator {node.name!r} bin {bin_index} holds bin {b.index}")
            exe.operators[owners[bin_index]][index].install_bin(b)
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
