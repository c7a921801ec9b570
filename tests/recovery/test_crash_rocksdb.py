"""Crash tests of a run whose keyed state is in RocksDB (``state=ts.RocksDB(...)``):
SIGKILL during an SST file's upload, during an SST ingest (a restore's, a pre-copy
move's) and at random instants; the job restarted from its checkpoints -- on another
worker count -- until it finishes gives exactly-once output identical to an
uninterrupted run on the heap."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.recovery.killable import outputs, run_killable

pytest.importorskip("rocksdict", reason="the RocksDB keyed-state store needs rocksdict (the rocksdb extra)")


def job(ckpt: Path, out: Path, db: Path, *extra: str, kill_after: float | None = None) -> int:
    code, _text = run_killable("tests.recovery.job", str(ckpt), str(out), "--rocksdb", str(db), *extra, kill_after=kill_after)
    return code


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[str]]:
    d = tmp_path_factory.mktemp("reference")
    code, _ = run_killable("tests.recovery.job", str(d / "ckpt"), str(d / "out"), "--workers", "1")
    assert code == 0
    return outputs(d / "out")


@pytest.mark.parametrize("n", [1, 4])
def test_killed_during_an_upload(tmp_path, reference, n):
    """Die in the n-th upload of an SST file (half of it in the store): the restart (3
    workers) resumes from the last committed checkpoint, never from the torn file's."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert job(ckpt, out, tmp_path / "db1", f"--crash-upload={n}", "--mode", "sync") in (9, -9)
    assert job(ckpt, out, tmp_path / "db2", "--workers", "3") == 0
    assert outputs(out) == reference


def test_killed_during_a_restore_ingest(tmp_path, reference):
    """Killed once mid-run, then again in the restart's second SST ingest (restoring the
    bins from the checkpoint's files): the third run finishes with the same output."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert job(ckpt, out, tmp_path / "db1", "--crash-commit=4", "--mode", "sync") in (9, -9)
    assert job(ckpt, out, tmp_path / "db2", "--crash-ingest=2", "--workers", "3") in (9, -9)
    assert job(ckpt, out, tmp_path / "db3", "--workers", "2") == 0
    assert outputs(out) == reference


@pytest.mark.parametrize("n", [1, 5])
def test_killed_during_a_precopy_ingest(tmp_path, reference, n):
    """Pre-copy moves (rescale 2 -> 4 -> 2): killed right after the n-th ingest of a
    bin's files into its new owner (preloaded, not handed over): the restart finishes
    with the same output."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    code = job(ckpt, out, tmp_path / "db1", "--precopy", f"--crash-ingest={n}", "--mode", "sync", "--every", "1")
    assert code in (9, -9)
    assert job(ckpt, out, tmp_path / "db2", "--precopy", "--workers", "3") == 0
    assert outputs(out) == reference


@pytest.mark.parametrize("sequence", range(2))
def test_sigkill_at_random_instants(tmp_path, reference, sequence):
    rng = random.Random(sequence)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    for i in range(3):
        job(ckpt, out, tmp_path / f"db{i}", "--workers", str(rng.randint(1, 4)), "--mode", rng.choice(["async", "sync"]),
            kill_after=rng.uniform(0.5, 2.5))
    assert job(ckpt, out, tmp_path / "last", "--workers", str(rng.randint(1, 4))) == 0
    assert outputs(out) == reference
