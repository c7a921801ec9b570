"""Checkpoint storage: incremental, checksummed, atomically committed bin checkpoints.

- :mod:`~tstate.checkpoint.store`: :class:`CheckpointStore` (a directory of
  checkpoints: begin / latest / recover / verify / read / garbage collection that never
  deletes evidence) and
  :class:`CheckpointWriter` (one checkpoint being written);
- :mod:`~tstate.checkpoint.manifest`: :class:`Manifest`, :class:`OperatorEntry`,
  :class:`FileRef` and the manifest file encoding;
- :mod:`~tstate.checkpoint.delta`: bin delta files and decoding a bin's chain
  (snapshot + deltas) back into state;
- :mod:`~tstate.checkpoint.schema_check`: is stored state readable with today's type;
- :mod:`~tstate.checkpoint.fs`: the tiny filesystem abstraction underneath;
- :mod:`~tstate.checkpoint.settings`: :class:`Checkpoints`, the ``checkpoint=`` both
  engines take;
- :mod:`~tstate.checkpoint.location`, :mod:`~tstate.checkpoint.objectfs`: local paths
  and object-store URLs.

This package is the format both engines share; the embedded engine's driver (when to
checkpoint, capture, commit after the sinks, restore) is
:mod:`tstate.engine.checkpointing`, the Spark backend's :mod:`tstate.spark.batch`.

The inspection CLI is ``python -m tstate checkpoints DIR`` (see :mod:`tstate.__main__`).
"""

from tstate.checkpoint.delta import apply_chain, encode_delta, restore_bin
from tstate.checkpoint.fs import FileSystem, LocalFS
from tstate.checkpoint.manifest import FileRef, Manifest, OperatorEntry
from tstate.checkpoint.schema_check import check_compatible
from tstate.checkpoint.store import CheckpointSkippedWarning, CheckpointStore, CheckpointWriter

__all__ = [
    "CheckpointSkippedWarning",
    "CheckpointStore",
    "CheckpointWriter",
    "FileRef",
    "FileSystem",
    "LocalFS",
    "Manifest",
    "OperatorEntry",
    "apply_chain",
    "check_compatible",
    "encode_delta",
    "restore_bin",
]
