"""A checkpoint linked GIL free (hard_links.py) is whole: a compaction that changes the
database's files while it is linked -- deleting a file before its link, or appending
its outputs to the MANIFEST before the copy, or appended but not yet installed -- makes
it link again, never keeps a checkpoint that misses or tears a file; a compaction that
runs but is not installed does not stop it; and checkpoints taken while compactions
really run restore exactly the state checkpointed."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from tstate.state.rocksdb import checkpoint_dirs
from tstate.state.rocksdb import hard_links
from tstate.state.rocksdb.db import LocalDB
from tstate.state.rocksdb.settings import RocksDB


def _layered(path: Path, files: int = 3, keys: int = 300) -> tuple[LocalDB, dict[bytes, bytes]]:
    """A database whose family ``a`` holds ``files`` overlapping L0 files (a compaction
    rewrites them all; fewer than the 4 that start one by themselves), and its contents."""
    db = LocalDB.create(str(path))
    fam = db.family("a")
    ref: dict[bytes, bytes] = {}
    for f in range(files):
        puts = [(fam, b"k%05d" % i, b"v%d-%d" % (f, i)) for i in range(f, keys, 2)]
        db.write(puts)
        ref.update((k, v) for _, k, v in puts)
        db.flush()
    return db, ref


def _contents(ck_dir: str, where: Path) -> dict[bytes, bytes]:
    back = LocalDB.restore(ck_dir, str(where))
    try:
        return dict(back.family("a").range(b"", b"\xff"))
    finally:
        back.close()


def _compact_once_at(monkeypatch: pytest.MonkeyPatch, db: LocalDB, name: str, after: int = 0) -> list[int]:
    """Run a full compaction of family ``a`` inside ``hard_links``'s ``name`` call
    (``os.link`` or ``shutil.copyfile``) number ``after`` of the first attempt; the
    number of compactions run."""
    module = os if name == "link" else shutil
    real: Callable[..., Any] = getattr(module, name)
    calls, ran = [0], list[int]()

    def hooked(*args: Any, **kw: Any) -> Any:
        if calls[0] == after and not ran:
            ran.append(1)
            db.family("a").rdict.compact_range(None, None)
        calls[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(hard_links, module.__name__, _Namespace(module, name, hooked))
    return ran


class _Namespace:
    """``module`` with its attribute ``name`` replaced (for ``hard_links``' own reference)."""

    def __init__(self, module: Any, name: str, fn: Callable[..., Any]) -> None:
        self._module, self._name, self._fn = module, name, fn

    def __getattr__(self, attr: str) -> Any:
        return self._fn if attr == self._name else getattr(self._module, attr)


@pytest.mark.parametrize("where", ["before the links", "between the links"])
def test_a_compaction_deleting_files_before_their_links_makes_it_link_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    db, ref = _layered(tmp_path / "w")
    hooked = _compact_once_at(monkeypatch, db, "link", after=0 if where == "before the links" else 2)
    ck = db.checkpoint(str(tmp_path / "ck"))
    assert hooked and db.checkpoints.retries >= 1 and db.checkpoints.fallbacks == 0
    db.close()
    assert _contents(ck.dir, tmp_path / "back") == ref


def test_a_compaction_appending_to_the_manifest_before_its_copy_makes_it_link_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the links made (the compaction's inputs), then the compaction installed: a MANIFEST
    # copied now names its outputs, which were not linked -- a torn checkpoint if kept
    db, ref = _layered(tmp_path / "w")
    hooked = _compact_once_at(monkeypatch, db, "copyfile", after=0)
    ck = db.checkpoint(str(tmp_path / "ck"))
    assert hooked and db.checkpoints.retries >= 1 and db.checkpoints.fallbacks == 0
    db.close()
    assert _contents(ck.dir, tmp_path / "back") == ref
    assert sorted(f.name for f in ck.sst) == sorted(n for n in os.listdir(ck.dir) if n.endswith(".sst"))


def test_checkpoints_taken_while_compactions_run_restore_exactly_what_was_checkpointed(tmp_path: Path) -> None:
    settings = RocksDB(str(tmp_path), memtable_bytes=2 << 20, write_buffer_bytes=1 << 20)
    db = LocalDB.create(str(tmp_path / "w"), settings)
    fams = [db.family("a"), db.family("b")]
    ref: dict[tuple[str, bytes], bytes] = {}
    taken = []
    stop = threading.Event()

    def compact() -> None:  # compactions of every kind, any time, alongside the cuts
        while not stop.is_set():
            for fam in fams:
                fam.rdict.compact_range(None, None)

    t = threading.Thread(target=compact, daemon=True)
    t.start()
    try:
        for round_ in range(12):
            puts = [(fams[i % 2], b"k%05d" % ((i * 7919 + round_) % 4000), b"r%d-%d" % (round_, i) * 8) for i in range(3000)]
            db.write(puts)
            ref.update(((f.name, k), v) for f, k, v in puts)
            ck = db.checkpoint(str(tmp_path / f"ck{round_}"))
            taken.append((ck, dict(ref)))
    finally:
        stop.set()
        t.join(timeout=60)
    db.close()
    for i, (ck, expected) in enumerate(taken):
        back = LocalDB.restore(ck.dir, str(tmp_path / f"back{i}"))
        got = {(name, k): v for name in ("a", "b") for k, v in back.family(name).range(b"", b"\xff")}
        back.close()
        assert got == expected, f"checkpoint {i}"




def test_a_checkpoint_is_linked_while_a_compaction_runs_and_restores_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a running compaction changes no live file until it is installed: the cut links
    # GIL free through it (it fell back to create_checkpoint, holding the GIL 52-157 ms
    # under load, at most cuts)
    settings = RocksDB(str(tmp_path), memtable_bytes=8 << 20, write_buffer_bytes=4 << 20)
    db = LocalDB.create(str(tmp_path / "w"), settings)
    fam = db.family("a")
    running: list[int] = []
    real = checkpoint_dirs.link_checkpoint

    def link_checkpoint(rdb: Any, *args: Any) -> bool:
        compacting = rdb.property_int_value("rocksdb.num-running-compactions")
        made = real(rdb, *args)
        running.append(compacting if made else 0)
        return made

    monkeypatch.setattr(checkpoint_dirs, "link_checkpoint", link_checkpoint)
    ref: dict[bytes, bytes] = {}
    through = []
    for round_ in range(40):  # every 4th flush starts an L0 -> L1 compaction of them all
        puts = [(fam, b"k%06d" % ((i * 7919 + round_) % 30000), b"v%d" % round_ * 20) for i in range(8000)]
        db.write(puts)
        ref.update((k, v) for _, k, v in puts)
        ck = db.checkpoint(str(tmp_path / f"ck{round_}"))
        if running[-1]:
            through.append((ck, dict(ref)))
        if len(through) == 2:
            break
    assert through, "no compaction ran at a cut"
    assert db.checkpoints.fallbacks == 0
    db.close()
    for i, (ck, expected) in enumerate(through):
        assert _contents(ck.dir, tmp_path / f"back{i}") == expected


def test_a_manifest_naming_files_not_linked_is_refused_though_nothing_changed_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a compaction between its MANIFEST append and its install: the live files are still
    # the inputs, the super versions and the MANIFEST's size do not move while the cut
    # links, but the MANIFEST names the outputs.  Played here by a compaction installed
    # before the cut, its inputs linked back in place and listed as the live files once
    db, ref = _layered(tmp_path / "w")
    inputs = {n: os.path.join(db.path, n) for n in (str(f["name"]).lstrip("/") for f in db._db.live_files())}
    keep = tmp_path / "inputs"
    keep.mkdir()
    for n, p in inputs.items():
        os.link(p, keep / n)
    stale = db._db.live_files()
    db.family("a").rdict.compact_range(None, None)
    for n, p in inputs.items():
        if not os.path.exists(p):
            os.link(keep / n, p)
    real = hard_links.link_checkpoint
    calls = [0]

    class Stale:
        """The database, its live files the compaction's inputs on the first look."""

        def __init__(self, rdb: Any) -> None:
            self._rdb = rdb

        def __getattr__(self, name: str) -> Any:
            return getattr(self._rdb, name)

        def live_files(self) -> Any:
            calls[0] += 1
            return stale if calls[0] == 1 else self._rdb.live_files()

    monkeypatch.setattr(checkpoint_dirs, "link_checkpoint", lambda rdb, *a: real(Stale(rdb), *a))
    ck = db.checkpoint(str(tmp_path / "ck"))
    assert calls[0] == 2 and db.checkpoints.retries == 1 and db.checkpoints.fallbacks == 0
    live = sorted(str(f["name"]).lstrip("/") for f in db._db.live_files())
    db.close()
    assert sorted(f.name for f in ck.sst) == live != sorted(inputs)
    assert _contents(ck.dir, tmp_path / "back") == ref
