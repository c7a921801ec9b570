"""The files a RocksDB checkpoint or a bin export consists of, as values.

A checkpoint of a :class:`~tstate.state.rocksdb.db.LocalDB` is a directory of hard
links: its **SST files** (immutable, named by a number that never repeats in one
database's life) and a few small files that say which SST files make the database
(``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``, an empty write-ahead log, rocksdict's
``rocksdict-config.json``).  :class:`CheckpointFiles` lists them, each SST file marked
``new`` unless an earlier checkpoint's upload already holds it: only new SST files and
the small ones need copying to the checkpoint store (Flink's incremental RocksDB
checkpoints).

>>> c = CheckpointFiles("/x/ck-1", (SstFile("000012.sst", 900, False), SstFile("000015.sst", 40, True)),
...                     (OtherFile("CURRENT", 16), OtherFile("MANIFEST-000005", 300)))
>>> [f.name for f in c.to_upload()], c.upload_bytes, c.total_bytes
(['000015.sst', 'CURRENT', 'MANIFEST-000005'], 356, 1256)
"""

from __future__ import annotations

import os
from typing import Union

from attrs import frozen

__all__ = ["SstFile", "OtherFile", "CheckpointFiles", "ExportedBin"]


@frozen
class SstFile:
    """One SST file of a checkpoint: its name, size, and whether no earlier upload
    holds it."""

    name: str
    size: int
    new: bool


@frozen
class OtherFile:
    """A small file of a checkpoint that is not an SST file (copied every time)."""

    name: str
    size: int


@frozen
class CheckpointFiles:
    """A checkpoint's directory and its files (see the module docstring)."""

    dir: str
    sst: tuple[SstFile, ...]
    other: tuple[OtherFile, ...]
    #: which open database made it (:attr:`LocalDB.incarnation
    #: <tstate.state.rocksdb.db.LocalDB.incarnation>`): an SST file's name is unique
    #: within one database only, so a later checkpoint may reference an earlier one's
    #: file by name only when both come from the same incarnation ("": unknown, never)
    incarnation: str = ""

    def to_upload(self) -> list[Union[SstFile, OtherFile]]:
        """The files an upload must copy: the new SST files and the small ones."""
        return [f for f in self.sst if f.new] + list(self.other)

    @property
    def upload_bytes(self) -> int:
        return sum(f.size for f in self.to_upload())

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.sst) + sum(f.size for f in self.other)

    def path(self, f: Union[SstFile, OtherFile]) -> str:
        return os.path.join(self.dir, f.name)


@frozen
class ExportedBin:
    """One bin of one operator written to an SST file (its states and its own
    records as stored: nothing decoded), with the file's size and xxh64."""

    family: str
    bin: int
    path: str
    entries: int
    size: int
    xxh64: int
