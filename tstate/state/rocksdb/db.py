"""``LocalDB``: one worker's embedded RocksDB, a column family per operator.

The database holds bytes only: what a key's state is and how it is encoded is the
business of :mod:`tstate.state.rocksdb.store` (states) and
:mod:`tstate.state.rocksdb.layout` (keys).  This module does what RocksDB does with
files:

- **open** a fresh database in a directory (:meth:`LocalDB.create`: a directory that
  holds anything but a database of ours is refused, never emptied), or one **restored
  from a checkpoint's files** (:meth:`LocalDB.restore`: the SST files hard-linked,
  nothing decoded);
- **write** a batch atomically (writes skip RocksDB's write-ahead log: durability is
  tstate's checkpoints, and a database is never reopened after a crash, only restored);
- **checkpoint**: hold the writes (a cut), flush every column family, then make a
  RocksDB checkpoint of the files -- hard links to the immutable SST files plus copies
  of the small files, GIL free whether or not a compaction runs -- listed as
  :class:`~tstate.state.rocksdb.files.CheckpointFiles`
  (:mod:`tstate.state.rocksdb.checkpoint_dirs`), each SST file marked new unless
  :meth:`LocalDB.uploaded` was told an earlier upload holds it;
- **ingest** one bin's SST file (exported by :mod:`tstate.state.rocksdb.sst_export`)
  into another database, replacing the bin there (``ingest_external_file``).

Every failure of RocksDB or of the file system -- an unwritable directory, a full
disk, a missing or corrupt file -- is a :class:`~tstate.errors.StateStoreError` naming
the path; a failed write applied nothing, a failed checkpoint or export left no file.

>>> import tempfile, os
>>> root = tempfile.mkdtemp()
>>> db = LocalDB.create(os.path.join(root, "w0"))
>>> fam = db.family("count")
>>> db.write([(fam, b"\\x00\\x01k", b"\\x05")])
>>> fam.get(b"\\x00\\x01k")
b'\\x05'
>>> ck = db.checkpoint(os.path.join(root, "ck-1"))
>>> [f.new for f in ck.sst]
[True]
>>> db.close()
>>> back = LocalDB.restore(ck.dir, os.path.join(root, "w1"))
>>> back.family("count").get(b"\\x00\\x01k")
b'\\x05'
>>> back.close()
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import uuid
from typing import Any, Callable, Iterable, Iterator, Optional

import rocksdict

from tstate.errors import StateStoreError, TstateError
from tstate.state.rocksdb.checkpoint_dirs import CheckpointDirs
from tstate.state.rocksdb.files import CheckpointFiles, ExportedBin
from tstate.state.rocksdb.layout import bin_range
from tstate.state.rocksdb.settings import RocksDB

__all__ = ["LocalDB", "Family", "store_errors"]

#: the files RocksDB keeps in a database directory (a directory holding anything else
#: is not one of ours: never emptied)
_DB_FILES = ("CURRENT", "IDENTITY", "LOCK", "LOG", "MANIFEST-", "OPTIONS-", "rocksdict-config.json")
_DEFAULT = RocksDB(os.sep)
@contextlib.contextmanager
def store_errors(path: str, what: str) -> Iterator[None]:
    """Turn a RocksDB or file-system failure inside the block into a
    :class:`~tstate.errors.StateStoreError` naming ``path`` and what was being done
    (the original kept as ``__cause__``)."""
    try:
        yield
    except TstateError:
        raise
    except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
        raise StateStoreError(f"keyed-state store at {path}: {what} failed: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno is not None:
        text = f"{os.strerror(exc.errno)} ({text})"
    return text


def _is_ours(name: str) -> bool:
    return name.endswith((".sst", ".log", ".blob")) or name.startswith(_DB_FILES) or name.endswith(".tmp")


def _options(settings: RocksDB, block_cache: rocksdict.Cache) -> rocksdict.Options:
    """The options of a database and of each of its column families: ``block_cache``
    is the database's one block cache (shared, so that it bounds every family's reads
    together)."""
    o = rocksdict.Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    o.set_compression_type(rocksdict.DBCompressionType.lz4())
    # small memtables: a write inserts into a skiplist that fits in the CPU's cache (a
    # 32 MB one costs several cache misses per key); memtable_bytes bounds them all
    o.set_write_buffer_size(max(1 << 20, min(settings.write_buffer_bytes, settings.memtable_bytes // 2)))
    o.set_max_write_buffer_number(4)
    o.set_db_write_buffer_size(settings.memtable_bytes)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(block_cache)
    table.set_bloom_filter(10, False)
    # the SST files' indexes and bloom filters live in the block cache (bounded by
    # block_cache_bytes), not beside it (where they grow with the number of keys) ...
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # ... partitioned, so that a read loads one small partition of a file's index and
    # filter, not the whole of them: once the keys' filters outgrow the block cache
    # (10 bits a key: 125 MB at 100M keys), a whole-file filter block (megabytes) was
    # read from disk for every get (3M keys, a 2 MB block cache: 3 MB read per get)
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_pin_top_level_index_and_filter(True)
    o.set_block_based_table_factory(table)
    o.set_max_background_jobs(2)
    return o


class Family:
    """One column family of a :class:`LocalDB` (one operator's keyed state), as bytes."""

    __slots__ = ("db", "name", "rdict", "handle")

    def __init__(self, db: LocalDB, name: str, rdict: Any, handle: Any) -> None:
        self.db = db
        self.name = name
        self.rdict = rdict
        self.handle = handle

    def _open(self) -> Any:
        rd = self.rdict
        if rd is None:
            raise StateStoreError(f"keyed-state store at {self.db.path} is closed")
        return rd

    def get(self, skey: bytes) -> Optional[bytes]:
        try:
            v = self.rdict.get(skey)
        except Exception:  # (no context manager per read: this is the hot path)
            self._open()
            with store_errors(self.db.path, f"reading {self.name!r}"):
                raise
        return None if v is None else bytes(v)

    def get_many(self, skeys: list[bytes]) -> list[Optional[bytes]]:
        """The values of ``skeys`` (``None`` where absent), in one multi-get."""
        if not skeys:
            return []
        self._open()
        with store_errors(self.db.path, f"reading {self.name!r}"):
            return list(self.rdict.get(skeys))

    def range(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(store key, value)`` of every key in ``[lower, upper)``, in key order."""
        rd = self._open()
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(upper)
        with store_errors(self.db.path, f"iterating {self.name!r}"):
            it = rd.items(from_key=lower, read_opt=ro)
        while True:
            with store_errors(self.db.path, f"iterating {self.name!r}"):
                item = next(it, None)
            if item is None:
                return
            yield item

    def bin_items(self, index: int) -> Iterator[tuple[bytes, bytes]]:
        """Every stored ``(store key, value)`` of bin ``index`` (states and the bin's own
        records), in key order."""
        return self.range(*bin_range(index))

    def __repr__(self) -> str:
        return f"Family({self.name!r} of {self.db.path})"


class LocalDB:
    """One worker's RocksDB (see the module docstring)."""

    def __init__(self, path: str, settings: RocksDB, families: Iterable[str] = ()) -> None:
        self.path = os.path.abspath(path)
        self.settings = settings
        self._block_cache = rocksdict.Cache(settings.block_cache_bytes)
        self._options = _options(settings, self._block_cache)
        self._families: dict[str, Family] = {}
        self._closed = False
        #: this opening of the database: SST file numbers are unique within it only (a
        #: database created again in the same place, or opened from a restored
        #: checkpoint and written on, can name another file as an earlier one did)
        self.incarnation = uuid.uuid4().hex
        #: its checkpoints' directories, and which SST files the store holds already
        self.checkpoints = CheckpointDirs(self.incarnation)
        #: held while a checkpoint is made (:meth:`cut`): writes wait for it
        self._cut = threading.Lock()
        #: write batches queued while a cut holds the writes (:meth:`write_batch` with
        #: ``defer``), applied in order by the cut's thread right after its checkpoint;
        #: ``_cut_open``: a cut holds the writes and will apply them (both under
        #: ``_deferred_lock``)
        self._deferred: list[Any] = []
        self._deferred_lock = threading.Lock()
        self._cut_open = False
        #: why applying a deferred batch failed: raised by the next call of the owner
        self._deferred_error: Optional[StateStoreError] = None
        names = list(families)
        with store_errors(self.path, "opening"):
            cfs = {n: _options(settings, self._block_cache) for n in names if n != "default"}
            self._db: Any = rocksdict.Rdict(self.path, self._options, column_families=cfs or None)
        self._write_options = rocksdict.WriteOptions()
        setattr(self._write_options, "disable_wal", True)  # (a property; the stub says a method)
        for n in names:
            self.family(n)

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(cls, path: str, settings: RocksDB = _DEFAULT) -> LocalDB:
        """A new, empty database in ``path``, replacing a database of ours left there
        (e.g. by a run that crashed: never reopened, see the module docstring).  A
        directory holding other files is refused, naming them."""
        _clear_dir(path)
        return cls(path, settings)

    @classmethod
    def restore(cls, checkpoint_dir: str, path: str, settings: RocksDB = _DEFAULT,
                uploaded: Optional[Iterable[str]] = None) -> LocalDB:
        """The database of a checkpoint's files (a directory like
        :meth:`checkpoint` makes, e.g. downloaded from the checkpoint store), in
        ``path``: SST files hard-linked (copied across file systems), the small files
        copied; no state decoded.  Its SST files count as uploaded (an earlier upload
        holds them) unless ``uploaded`` names which are."""
        _clear_dir(path)
        with store_errors(checkpoint_dir, "reading the checkpoint"):
            names = sorted(os.listdir(checkpoint_dir))
        if "CURRENT" not in names:
            raise StateStoreError(f"keyed-state store checkpoint at {checkpoint_dir}: no CURRENT file (not a RocksDB checkpoint)")
        with store_errors(path, "restoring the checkpoint's files"):
            os.makedirs(path, exist_ok=True)
            for n in names:
                src, dst = os.path.join(checkpoint_dir, n), os.path.join(path, n)
                if n.endswith(".sst"):
                    _link_or_copy(src, dst)
                else:
                    shutil.copyfile(src, dst)
        with store_errors(checkpoint_dir, "listing the checkpoint's column families"):
            families = rocksdict.Rdict.list_cf(path, rocksdict.Options(raw_mode=True))
        db = cls(path, settings, families)
        db.uploaded([n for n in names if n.endswith(".sst")] if uploaded is None else uploaded)
        return db

    def family(self, name: str) -> Family:
        """The column family of operator ``name`` (created if new)."""
        fam = self._families.get(name)
        if fam is not None:
            return fam
        self._check_open()
        with store_errors(self.path, f"opening column family {name!r}"):
            if name == "default":
                rd = self._db
            else:
                try:
                    rd = self._db.get_column_family(name)
                except Exception:
                    rd = self._db.create_column_family(name, _options(self.settings, self._block_cache))
            handle = self._db.get_column_family_handle(name)
            rd.set_write_options(self._write_options)
        fam = self._families[name] = Family(self, name, rd, handle)
        return fam

    @property
    def families(self) -> list[str]:
        return list(self._families)

    # -- writing -----------------------------------------------------------------------
    def batch(self) -> rocksdict.WriteBatch:
        return rocksdict.WriteBatch(raw_mode=True)

    def write(self, puts: Iterable[tuple[Family, bytes, Optional[bytes]]]) -> None:
        """Apply ``(family, store key, value or None to delete)`` triples atomically."""
        wb = self.batch()
        for fam, k, v in puts:
            if v is None:
                wb.delete(k, fam.handle)
            else:
                wb.put(k, v, fam.handle)
        self.write_batch(wb)

    def write_batch(self, wb: rocksdict.WriteBatch, defer: bool = False) -> bool:
        """Apply a write batch atomically (all of it or, on an error, nothing).
        ``defer``: if a checkpoint's cut holds the writes now (:meth:`cut`), queue the
        batch instead of waiting: the cut's thread applies the queued batches, in
        order, right after its checkpoint and before any later write (a failure there
        is raised by the next call on this database: :meth:`settle`).  Whether the
        batch was queued."""
        if wb.is_empty():
            return False
        self._check_open()
        if defer:
            with self._deferred_lock:
                if self._cut_open:
                    self._deferred.append(wb)
                    return True
        with self._cut, store_errors(self.path, f"writing a batch of {len(wb)} changes"):
            self._raise_deferred()
            self._db.write(wb, self._write_options)
        return False

    def deferring(self) -> bool:
        """Whether batches queued by :meth:`write_batch` are not applied yet."""
        return bool(self._deferred)

    def settle(self) -> None:
        """Wait until every queued batch is applied (the cut holding them finished);
        raise if applying one failed."""
        if self._deferred:
            with self._cut:
                pass
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        err = self._deferred_error
        if err is not None:
            raise StateStoreError(str(err)) from err

    def _apply_deferred(self) -> None:
        """(The cut's thread, writes still held.)  Apply the queued batches in order --
        those queued meanwhile too: writes go on being queued until none is left, so the
        owner never waits for this (it did, up to 600 ms under load, when a cut held the
        writes for a second: benchmarks/results/large_state_ckpt_profile.txt) -- then
        writes are not queued any more.  A failure is kept for the owner's next call
        (the batches' states are lost: the run must resume from a checkpoint)."""
        try:
            while True:
                with self._deferred_lock:
                    batches = list(self._deferred)
                    if not batches:
                        self._cut_open = False
                        return
                for wb in batches:
                    with store_errors(self.path, f"writing a batch of {len(wb)} changes (deferred by a checkpoint)"):
                        self._db.write(wb, self._write_options)
                with self._deferred_lock:
                    del self._deferred[: len(batches)]  # (only now: settle() waits while any is listed)
        except BaseException as exc:
            if isinstance(exc, StateStoreError):
                self._deferred_error = self._deferred_error or exc
            with self._deferred_lock:
                self._deferred, self._cut_open = [], False
            if not isinstance(exc, StateStoreError):
                raise

    def drop_bin(self, fam: Family, index: int) -> None:
        """Delete every record of bin ``index`` in ``fam`` (one range tombstone)."""
        wb = self.batch()
        wb.delete_range(*bin_range(index), fam.handle)
        self.write_batch(wb)

    def flush(self) -> None:
        """Write every column family's memtable to SST files."""
        self._check_open()
        with store_errors(self.path, "flushing"):
            for fam in list(self._families.values()):  # (a copy: the owner may add a family meanwhile)
                fam.rdict.flush(True)
            self._db.flush(True)

    # -- checkpoints -------------------------------------------------------------------
    def checkpoint(self, dest: str) -> CheckpointFiles:
        """Flush, then make a checkpoint in ``dest`` (a new directory: hard links to the
        SST files, copies of the rest); its files, SST files not yet uploaded marked
        new.  On failure ``dest`` is removed and nothing is listed."""
        with self._cut:
            return self._checkpoint(dest)

    def cut(self) -> Callable[[str], CheckpointFiles]:
        """Hold every write back from now (they wait, or are queued:
        :meth:`write_batch` with ``defer``) until the returned function has run -- on
        any thread, e.g. an upload thread, while the processing thread goes on reading
        and computing the next epoch: it makes :meth:`checkpoint` of the database as it
        is now into ``dest``, applies the queued batches, then lets writes go on.  Run
        it exactly once, whatever happens."""
        self._check_open()
        self._cut.acquire()
        with self._deferred_lock:
            self._cut_open = True
        done: list[bool] = []

        def finish(dest: str) -> CheckpointFiles:
            if done:
                raise StateStoreError(f"keyed-state store at {self.path}: this cut was checkpointed already")
            done.append(True)
            try:
                return self._checkpoint(dest)
            finally:
                try:
                    self._apply_deferred()
                finally:
                    self._cut.release()

        return finish

    def cutting(self) -> bool:
        """Whether a checkpoint holds the writes now (:meth:`cut`)."""
        return self._cut.locked()

    def _checkpoint(self, dest: str) -> CheckpointFiles:
        dest = os.path.abspath(dest)
        if os.path.lexists(dest):
            raise StateStoreError(f"keyed-state store at {self.path}: checkpoint directory {dest} exists already")
        try:
            # flushed first (the GIL let go while RocksDB's flush thread writes), then
            # the files linked GIL free (checkpoint_dirs.py), a compaction running or not
            self.flush()
            families = [self._db, *(f.rdict for f in list(self._families.values()) if f.rdict is not self._db)]
            with store_errors(dest, f"checkpointing {self.path}"):
                return self.checkpoints.make(self._db, families, self.path, dest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(dest + ".tmp", ignore_errors=True)
            raise

    def uploaded(self, names: Iterable[str]) -> None:
        """SST files ``names`` are held by the checkpoint store now: later checkpoints
        list them as not new."""
        self.checkpoints.uploaded(names)

    # -- moving bins as files (the exports: :mod:`tstate.state.rocksdb.sst_export`) ----
    def ingest_bin(self, fam: Family, exported: ExportedBin, replace: bool = True) -> None:
        """Replace bin ``exported.bin`` of ``fam`` by the exported file's records, moved
        into the database (hard-linked: nothing decoded, nothing rewritten).  The file
        must have been checked (:func:`~tstate.state.rocksdb.sst_export.verify_export`:
        :meth:`KeyedStore.ingest_bin <tstate.state.rocksdb.store.KeyedStore.ingest_bin>`
        does) before anything changes here."""
        self._check_open()
        path = exported.path
        if replace:  # (else the file's records and deletes apply over the bin: a pre-copy's changes)
            self.drop_bin(fam, exported.bin)
        opts = rocksdict.IngestExternalFileOptions()
        opts.set_move_files(True)
        with self._cut, store_errors(path, f"ingesting bin {exported.bin} into {fam.name!r} of {self.path}"):
            fam.rdict.ingest_external_file([path], opts)

    # -- closing -----------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        with self._cut:  # (a checkpoint under way finishes first)
            self._closed = True
        with store_errors(self.path, "closing"):
            for fam in self._families.values():  # a column family's objects keep the database open
                if fam.rdict is not self._db:
                    fam.rdict.close()
                fam.rdict = fam.handle = None
            self._families.clear()
            self._db.close()
            self._db = None

    def destroy(self) -> None:
        """Close and delete the database directory."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise StateStoreError(f"keyed-state store at {self.path} is closed")
        self._raise_deferred()

    def __enter__(self) -> LocalDB:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalDB({self.path!r}, families={self.families})"


def _clear_dir(path: str) -> None:
    """Make ``path`` an empty directory, removing only a database of ours."""
    path = os.path.abspath(path)
    with store_errors(path, "preparing the directory"):
        if not os.path.lexists(path):
            os.makedirs(path)
            return
        if not os.path.isdir(path) or os.path.islink(path):
            raise StateStoreError(f"keyed-state store at {path}: not a directory")
        names = os.listdir(path)
        foreign = sorted(n for n in names if not _is_ours(n))
        if foreign:
            raise StateStoreError(
                f"keyed-state store at {path}: the directory holds files that are not a RocksDB database "
                f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); give the store a directory of its own"
            )
        for n in names:
            p = os.path.join(path, n)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.remove(p)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dst)
