"""Crashes during pre-copy migrations (``strategy="precopy"``): the crash job rescales
with pre-copy moves and dies in the middle of a preload (copies loaded, not handed
over) or right after a hand-over (the bin at its new owner, no checkpoint of it yet),
or at random instants; restarted from its checkpoints -- on other worker counts, with
the same moves planned again -- its exactly-once output equals an uninterrupted run
without any migration."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.recovery.killable import outputs, run_killable


def job(ckpt: Path, out: Path, *extra: str, kill_after: float | None = None) -> tuple[int, str]:
    return run_killable("tests.recovery.job", str(ckpt), str(out), *extra, kill_after=kill_after)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[str]]:
    d = tmp_path_factory.mktemp("reference")
    code, _ = job(d / "ckpt", d / "out", "--workers", "1")
    assert code == 0
    return outputs(d / "out")


def stats(text: str) -> dict[str, int]:
    m = re.search(r"precopy handovers=(\d+) fallbacks=(\d+) preloaded=(\d+) late=(\d+)", text)
    assert m, text
    return dict(zip(["handovers", "fallbacks", "preloaded", "late"], map(int, m.groups())))


def test_uninterrupted_precopy_run_hands_over_deltas(tmp_path, reference):
    code, text = job(tmp_path / "ckpt", tmp_path / "out", "--precopy", "--mode", "sync", "--workers", "2")
    assert code == 0 and outputs(tmp_path / "out") == reference
    s = stats(text)
    assert s["handovers"] > 0 and s["preloaded"] > 0


@pytest.mark.parametrize("crash", ["--crash-preload=1", "--crash-preload=5", "--crash-handover=1", "--crash-handover=7"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_crash_during_a_precopy(tmp_path, reference, crash, mode):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    code, _ = job(ckpt, out, "--precopy", crash, "--mode", mode, "--workers", "2")
    assert code in (9, -9)  # it died where it was told to
    code, text = job(ckpt, out, "--precopy", "--mode", mode, "--workers", "3")
    assert code == 0
    assert outputs(out) == reference
    from tstate.checkpoint.store import CheckpointStore

    store = CheckpointStore(str(ckpt), readonly=True)
    m = store.latest()
    assert m is not None and store.problems == [] and store.verify(m) == []


@pytest.mark.parametrize("sequence", range(3))
def test_sigkill_at_random_instants_of_precopy_runs(tmp_path, reference, sequence):
    rng = random.Random(100 + sequence)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    for _ in range(4):
        workers = str(rng.randint(1, 4))
        mode = rng.choice(["async", "sync", "thread"])
        job(ckpt, out, "--precopy", "--workers", workers, "--mode", mode, kill_after=rng.uniform(0.3, 1.6))
    code, _ = job(ckpt, out, "--precopy", "--workers", str(rng.randint(1, 4)))
    assert code == 0
    assert outputs(out) == reference
