"""Crash tests: SIGKILL a checkpointing job at random instants (and at the dangerous
ones on purpose), restart it from its directory — on a random number of workers — until
it finishes; the exactly-once file output equals an uninterrupted run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.recovery.killable import outputs, run_killable
from tstate.engine.checkpointing.forked import fork_available

MODES = ["async", "thread", "sync"] + (["fork"] if fork_available() else [])


def job(ckpt: Path, out: Path, *extra: str, kill_after: float | None = None, stdout: list[str] | None = None) -> int:
    code, text = run_killable("tests.recovery.job", str(ckpt), str(out), *extra, kill_after=kill_after)
    if stdout is not None:
        stdout.append(text)
    return code


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[str]]:
    d = tmp_path_factory.mktemp("reference")
    assert job(d / "ckpt", d / "out", "--workers", "1") == 0
    return outputs(d / "out")


def test_reference_has_output(reference):
    assert len(reference) > 40 and sum(len(v) for v in reference.values()) > 1000


@pytest.mark.parametrize("sequence", range(10))
def test_sigkill_at_random_instants(tmp_path, reference, sequence):
    rng = random.Random(sequence)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    kills = 0
    for _ in range(5):  # five random crash points per sequence: fifty in the suite
        workers = str(rng.randint(1, 4))
        mode = rng.choice(MODES)
        job(ckpt, out, "--workers", workers, "--mode", mode, kill_after=rng.uniform(0.3, 1.6))
        kills += 1
    assert job(ckpt, out, "--workers", str(rng.randint(1, 4))) == 0
    assert outputs(out) == reference


@pytest.mark.parametrize("crash", ["--crash-commit=1", "--crash-commit=3", "--crash-write=1", "--crash-write=5"])
def test_crash_inside_a_checkpoint_write(tmp_path, reference, crash):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert job(ckpt, out, crash, "--mode", "sync") in (9, -9)
    assert job(ckpt, out, crash.split("=")[0] + "=999", "--workers", "3") == 0
    assert outputs(out) == reference


@pytest.mark.parametrize("crash", ["--crash-slice=1", "--crash-slice=3", "--crash-commit-sent=1", "--crash-commit-sent=4"])
def test_crash_inside_an_asynchronous_checkpoint(tmp_path, reference, crash):
    """Die while an asynchronous checkpoint is half encoded (some of its files written by
    the writer process, not committed), or right after asking the writer process to
    commit one: the restarted run (another mode, another worker count) resumes from
    what was committed and its exactly-once output equals an uninterrupted run."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert job(ckpt, out, crash, "--mode", "async", "--workers", "2") in (9, -9)
    assert job(ckpt, out, "--mode", "async", "--workers", "3") == 0
    assert outputs(out) == reference
    from tstate.checkpoint.store import CheckpointStore

    store = CheckpointStore(str(ckpt), readonly=True)
    m = store.latest()
    assert m is not None and store.problems == [] and store.verify(m) == []


@pytest.mark.skipif(not fork_available(), reason="no safe fork on this platform")
@pytest.mark.parametrize("checkpoint", [1, 2, 4])
def test_killed_snapshot_process_loses_a_checkpoint_not_the_run(tmp_path, reference, checkpoint):
    """SIGKILL the forked snapshot process of one checkpoint mid-write: the job finishes
    (its checkpoint and any captured after it are abandoned, the next one is written
    whole), leaves no child process behind, its output is exactly the reference, and a
    restart from its directory (the newest checkpoint must verify) finishes too."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    printed: list[str] = []
    assert job(ckpt, out, "--mode", "fork", "--workers", "2", f"--kill-snapshot={checkpoint}", stdout=printed) == 0
    assert (ckpt / f"killed-snapshot-{checkpoint}").exists()
    last = printed[0].strip().splitlines()[-1]
    assert "lost=1" in last and "children=0" in last
    assert outputs(out) == reference
    from tstate.checkpoint.store import CheckpointStore

    store = CheckpointStore(str(ckpt), readonly=True)
    m = store.latest()
    assert m is not None and store.problems == [] and store.verify(m) == []
    assert job(ckpt, out, "--mode", "fork", "--workers", "3") == 0
    assert outputs(out) == reference
