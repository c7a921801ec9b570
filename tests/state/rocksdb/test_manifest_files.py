"""ManifestFiles replays a RocksDB MANIFEST to the file numbers its last version holds:
the same as RocksDB's own live files, read whole or a few appended bytes at a time
(past 32 KiB block boundaries), and ``None`` -- never a guess -- for bytes it cannot
replay (a record cut off, a record type or edit tag it does not know)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tstate.state.rocksdb.db import LocalDB
from tstate.state.rocksdb.manifest_files import ManifestFiles


def _manifest(db: LocalDB) -> tuple[str, bytes]:
    with open(os.path.join(db.path, "CURRENT")) as f:
        name = f.read().strip()
    with open(os.path.join(db.path, name), "rb") as f:
        return name, f.read()


def _live(db: LocalDB) -> frozenset[int]:
    return frozenset(int(str(f["name"]).lstrip("/").split(".")[0]) for f in db._db.live_files())


def _quiet(db: LocalDB) -> tuple[str, bytes, frozenset[int]]:
    """The MANIFEST and the live files at a moment no compaction changes them."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        live = _live(db)
        name, data = _manifest(db)
        busy = db._db.property_int_value("rocksdb.num-running-compactions")
        if not busy and _live(db) == live and _manifest(db) == (name, data):
            return name, data, live
        time.sleep(0.002)
    raise AssertionError("compactions did not stop")


def test_the_files_named_are_the_live_files_after_every_flush_and_compaction(tmp_path: Path) -> None:
    db = LocalDB.create(str(tmp_path / "w"))
    fams = [db.family("a"), db.family("b")]
    step, whole = ManifestFiles(), ManifestFiles()
    try:
        pad = b"x" * 1500  # (long keys: each edit names a file's smallest and largest, so
        # that 40 edits cross a 32 KiB block boundary, a record split across it)
        for round_ in range(40):
            fam = fams[round_ % 2]
            db.write([(fam, b"k%05d" % ((i * 13 + round_) % 900) + pad, b"v%d" % round_) for i in range(60)])
            db.flush()
            if round_ % 9 == 0:
                fam.rdict.compact_range(None, None)
            name, data, live = _quiet(db)
            start = step.resume_at(name)
            assert step.files(name, data[start:], start) == live
            assert ManifestFiles().files(name, data) == live
        assert len(data) > 32768  # (records across a block boundary were replayed)
        assert whole.files(name, data) == live
    finally:
        db.close()


def test_bytes_it_cannot_replay_answer_none(tmp_path: Path) -> None:
    db = LocalDB.create(str(tmp_path / "w"))
    db.write([(db.family("a"), b"k", b"v")])
    db.flush()
    name, data = _manifest(db)
    db.close()
    assert ManifestFiles().files(name, data) is not None
    assert ManifestFiles().files(name, data[:-3]) is None  # the last record cut off
    first_type = 6  # the first record's type byte: 5 is a recyclable FULL record
    assert ManifestFiles().files(name, data[:first_type] + b"\x05" + data[first_type + 1:]) is None
    # an edit tag it does not know (300, an atomic group): its length kept, the edit unreplayable
    length = data[4] | data[5] << 8
    edit = data[7: 7 + length]
    bad = b"\xac\x02\x01" + edit[3:]  # varint 300, then one byte; the same length
    assert ManifestFiles().files(name, data[:7] + bad + data[7 + length:]) is None
    m = ManifestFiles()
    assert m.files(name, data) is not None
    assert m.files("MANIFEST-999999", data[10:], 10) is None  # another MANIFEST, not from its start
