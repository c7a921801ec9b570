"""One commit path for both engines' checkpoints.

Whichever engine wrote a checkpoint's data files (the embedded engine's driver,
:mod:`tstate.engine.checkpointing`, or the Spark backend's tasks,
:mod:`tstate.spark.batch`), committing it is the same: every stateful operator's schema
and bin count (:func:`operator_schemas`, from the plan's nodes), every changed bin's file
adopted -- or the bin's chain dropped when it emptied (:class:`BinFile`,
:func:`adopt`) -- the metadata, the files attached to the checkpoint, then the manifest
committed atomically; on any failure the checkpoint is aborted and nothing of it is
visible (:func:`commit`).

>>> import tempfile
>>> from tstate.checkpoint.store import CheckpointStore, write_data_file
>>> from tstate.hash_kind import HashKind
>>> store = CheckpointStore(tempfile.mkdtemp(), fsync=False)
>>> w = store.begin(5)
>>> ref = write_data_file(store.fs, "count", 1, w.id, w.token, "snap", b"state")
>>> m = commit(w, {"count": ({"kind": "int", "name": "int"}, 4, HashKind.KEY_HASH)}, [BinFile("count", 1, ref, snapshot=True)],
...            {"workers": 2})
>>> m.time, m.meta["workers"], [r.size for r in m.chain("count", 1)]
(5, 2, [5])
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from attrs import frozen

from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.checkpoint.store import CheckpointWriter
from tstate.hash_kind import HashKind, hash_kind_of
from tstate.plan.stateful import Stateful

__all__ = ["BinFile", "operator_schemas", "adopt", "commit"]

#: operator name -> (its state schema as builtins, its bin count)
#: operator name -> (its schema as builtins, its bin count, the hash its keys are binned with)
Schemas = Mapping[str, tuple[Any, int, HashKind]]


@frozen
class BinFile:
    """One bin's change in a checkpoint: a data file written for it (``ref``; with
    ``snapshot`` it replaces the bin's chain, else it extends it), or ``ref`` None: the
    bin is empty now and the checkpoint has no chain for it."""

    operator: str
    bin: int
    ref: Optional[FileRef]
    snapshot: bool = False


def operator_schemas(nodes: Iterable[Stateful]) -> dict[str, tuple[Any, int, HashKind]]:
    """The schema, bin count and key hash kind of each stateful operator node, as a
    checkpoint records them (e.g. ``operator_schemas(n for _, n in graph.of_type(Stateful))``)."""
    return {n.name: (n.schema.to_builtins(), n.bins, hash_kind_of(n.key)) for n in nodes}


def adopt(writer: CheckpointWriter, f: BinFile, *, reported: bool = False) -> None:
    """Put bin ``f`` into the checkpoint ``writer`` is writing (``reported``: its
    file's size was sent by the process that wrote it, after the write:
    :meth:`CheckpointWriter.adopt` does not check it again)."""
    if f.ref is None:
        writer.drop_bin(f.operator, f.bin)
    else:
        writer.adopt(f.operator, f.bin, [f.ref], replace=f.snapshot, reported=reported)


def commit(
    writer: CheckpointWriter,
    schemas: Schemas,
    files: Iterable[BinFile] = (),
    meta: Optional[Mapping[str, Any]] = None,
    attached: Iterable[FileRef] = (),
) -> Manifest:
    """Commit the checkpoint ``writer`` is writing (see the module docstring) and return
    its manifest; on any failure it is aborted and the error raised."""
    try:
        for name, (schema, bins, hash) in schemas.items():
            writer.put_operator_schema(name, schema, bins, hash)
        for f in files:
            adopt(writer, f)
        for key, value in (meta or {}).items():
            writer.put_meta(key, value)
        for ref in attached:
            writer.attach(ref)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
