"""A bin as an SST file: exported from a column family, as stored (nothing decoded),
to be ingested by another database (:meth:`LocalDB.ingest_bin
<tstate.state.rocksdb.db.LocalDB.ingest_bin>`) -- a migration, a pre-copy's hand-over,
a Spark task's bin file.

An export is described by an :class:`~tstate.state.rocksdb.files.ExportedBin` (records,
size, xxh64); :func:`verify_export` checks a file against it before anything ingests it.
A failed export leaves no file; every failure is a :class:`~tstate.errors.StateStoreError`
naming the path.

>>> import tempfile, os
>>> from tstate.state.rocksdb.db import LocalDB
>>> root = tempfile.mkdtemp()
>>> db = LocalDB.create(os.path.join(root, "w0"))
>>> fam = db.family("count")
>>> db.write([(fam, b"\\x00\\x01k", b"\\x05")])
>>> out = export_bin(fam, 1, os.path.join(root, "bin1.sst"))
>>> out.entries, export_bin(fam, 2, os.path.join(root, "bin2.sst"))
(1, None)
>>> verify_export(out)
>>> db.close()
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Optional

import rocksdict
import xxhash

from tstate.errors import StateStoreError
from tstate.state.rocksdb.db import Family, store_errors
from tstate.state.rocksdb.files import ExportedBin

__all__ = ["export_bin", "export_changes", "verify_export"]


def export_bin(fam: Family, index: int, dest: str) -> Optional[ExportedBin]:
    """Write bin ``index`` of ``fam`` as stored (nothing decoded) to the SST file
    ``dest``; ``None`` (and no file) when the bin holds nothing."""
    fam.db._check_open()
    return _write(fam, index, dest, f"exporting bin {index}", fam.bin_items(index))


def export_changes(fam: Family, index: int, skeys: Iterable[bytes], dest: str) -> Optional[ExportedBin]:
    """Write the records ``skeys`` of bin ``index`` of ``fam`` as they are now -- a key
    with no record as a delete -- to the SST file ``dest`` (a pre-copy hand-over: what
    changed since the copy the new owner holds); ``None`` (and no file) for no keys."""
    fam.db._check_open()
    keys = sorted(set(skeys))
    if not keys:
        return None
    return _write(fam, index, dest, f"exporting changes of bin {index}", zip(keys, fam.get_many(keys)))


def verify_export(exported: ExportedBin) -> None:
    """Raise unless the exported file is there with its size and xxh64."""
    path = exported.path
    with store_errors(path, f"checking the export of bin {exported.bin}"):
        size = os.path.getsize(path)
        if size != exported.size or xxh64_file(path) != exported.xxh64:
            raise StateStoreError(
                f"keyed-state store: export {path} of bin {exported.bin} is corrupt "
                f"({size} bytes, expected {exported.size} with xxh64 {exported.xxh64:016x})"
            )


def xxh64_file(path: str) -> int:
    """The xxh64 of the file at ``path``, read in 1 MiB chunks."""
    h = xxhash.xxh64()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.intdigest()


def _write(fam: Family, index: int, dest: str, what: str,
           records: Iterable[tuple[bytes, Optional[bytes]]]) -> Optional[ExportedBin]:
    """The SST file ``dest`` of ``records`` in key order (a ``None`` value: a delete);
    ``None`` and no file when there is none; on failure no file either."""
    writer = rocksdict.SstFileWriter(rocksdict.Options(raw_mode=True))
    n = 0
    try:
        with store_errors(dest, f"{what} of {fam.name!r} from {fam.db.path}"):
            os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
            for k, v in records:
                if n == 0:
                    writer.open(dest)
                if v is None:
                    del writer[k]
                else:
                    writer[k] = v
                n += 1
            if n == 0:
                return None
            writer.finish()
            size = os.path.getsize(dest)
            digest = xxh64_file(dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(dest)
        raise
    return ExportedBin(fam.name, index, os.path.abspath(dest), n, size, digest)
