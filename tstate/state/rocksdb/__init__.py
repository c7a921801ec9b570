"""Keyed state larger than memory: an embedded RocksDB per worker (issue 28).

The heap keeps every key's state as a Python object; this package keeps it *encoded*
(the operator's :class:`~tstate.types.StateCodec`: the same checks and schema
fingerprint as checkpoints) in an embedded RocksDB, with a bounded cache of decoded
states in front.  One concept per module:

- :mod:`~tstate.state.rocksdb.settings`: ``RocksDB(path, cache_bytes=...)``, the setting;
- :mod:`~tstate.state.rocksdb.layout`: a key's place -- a column family per operator,
  ``bin + key`` so that a bin is one contiguous range -- and the value framing;
- :mod:`~tstate.state.rocksdb.db`: ``LocalDB``, the database as files: open, restore
  from a checkpoint's files, write batches, checkpoint (flush + hard links), ingest a
  bin's SST file; errors naming the path;
- :mod:`~tstate.state.rocksdb.sst_export`: a bin exported to an SST file, as stored,
  and the check of one before it is ingested;
- :mod:`~tstate.state.rocksdb.files`: what a checkpoint or an export consists of;
- :mod:`~tstate.state.rocksdb.cache`: ``StateCache``, the decoded states, written back
  in one batch per epoch, bounded by ``cache_bytes``;
- :mod:`~tstate.state.rocksdb.store`: ``KeyedStore``, one operator's keyed state as the
  runtime uses it (get / put / delete, a bin's items, its timers, export / ingest);
- :mod:`~tstate.state.rocksdb.worker`: ``WorkerStore``, a worker's database, cache and
  stores;
- :mod:`~tstate.state.rocksdb.keyed_bin`: ``RocksBin``, one bin of a ``KeyedStore``
  behind the runtime's storage seam (:class:`tstate.state.storage.KeyedBin`), and
  ``adopt``, a delivered heap bin turned into one;
- :mod:`~tstate.state.rocksdb.run_stores`: ``RunStores``, one execution's worker
  stores, opened on first use, closed (files removed) with the execution;
- :mod:`~tstate.state.rocksdb.moving`: a bin moved between two stores as files (an SST
  export ingested), and pre-copy's ``preload`` / ``hand_over`` (only what changed).

Checkpoints of files are :mod:`tstate.checkpoint.sst_files`.

**The binding** is rocksdict (``pip install 'tstate[rocksdb]'``), chosen for having
every piece above -- column families, write batches, snapshots, ``Checkpoint``,
``SstFileWriter`` and ``ingest_external_file`` -- in a maintained manylinux wheel that
pip 23 installs (RocksDB 10.4 inside).  Measured beside it: lmdb reads a point faster
(a B+tree in a memory map: about 3x rocksdict's get in one run here) but a checkpoint
of it is a copy of the whole map (no incremental upload), it cannot export or ingest a
key range as a file, and its mapped pages count in the RSS the issue bounds; aimrocks
has neither ``Checkpoint`` nor ``SstFileWriter``; rocksdb-ng ships no wheel.
``benchmarks/large_state.py`` measures the store against the heap dict.

Selected with ``flow.run(workers, state=ts.RocksDB(path, cache_bytes=...))`` (or
``start``, or ``Embedded(..., state=...)``) on the embedded engine, and with
``tstate.spark.Backend(..., state=...)`` on Spark (:mod:`tstate.spark.rocks_bins`: a
database per executor process, each changed bin's SST export its file per batch).  A migration between two
RocksDB workers moves SST files; the engine's checkpoints and restores are the
databases' files (:mod:`tstate.engine.checkpointing.file_capture` over
:mod:`tstate.checkpoint.sst_files`); a pre-copy move falls back to moving the whole bin.  ``import
tstate`` loads only the setting; rocksdict is imported only when a run uses it.
"""
