"""Crash tests of the graph job (:mod:`tests.apps.graph.job`): the process dies after a
random number of committed epochs, or is SIGKILLed at a random instant, and is
restarted from its checkpoint directory on a random number of workers until it
finishes; its exactly-once file output then equals an uninterrupted run's.  Covered: degrees alone (the whole root scope), and every algorithm
(with the per-vertex state inside iterate scopes).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from apps.graph.stream import ALGORITHMS
from tests.apps.graph import job as graph_job
from tests.recovery.killable import outputs, run_killable

ROOT = Path(__file__).resolve().parents[3]
DEGREES = "degrees"
ALL = ",".join(ALGORITHMS)


def run_job(ckpt: Path, out: Path, *extra: str, kill_after: float | None = None) -> tuple[int, str]:
    """Run the job (SIGKILLed after ``kill_after`` seconds); its exit code and output."""
    return run_killable("tests.apps.graph.job", str(ckpt), str(out), *extra, kill_after=kill_after)


def same_output(got: dict[str, list[str]], want: dict[str, list[str]]) -> None:
    """Equal files, except that PageRank's floats may differ within the tolerance (the
    restarts run on other worker counts): its folded ranks are compared per epoch."""
    assert got.keys() == want.keys()
    ranks: list[dict[object, float]] = [{}, {}]
    for name in sorted(want):
        for side, lines in enumerate((got[name], want[name])):
            for rec in map(json.loads, lines):
                if rec[0] == "pagerank":
                    key = json.dumps(rec[1])
                    if rec[3] is None:
                        ranks[side].pop(key, None)
                    else:
                        ranks[side][key] = rec[3]
        exact = [[ln for ln in lines if not ln.startswith(('["pagerank"', '["scores"'))] for lines in (got[name], want[name])]
        assert exact[0] == exact[1], name
        assert ranks[0].keys() == ranks[1].keys(), name
        assert sum(abs(ranks[0][v] - ranks[1][v]) for v in ranks[1]) <= 2e-7, name


def reference(tmp: Path, algorithms: str) -> dict[str, list[str]]:
    graph_job.main([str(tmp / "ckpt"), str(tmp / "out"), "--workers", "1", "--algorithms", algorithms, "--mode", "sync"])
    return outputs(tmp / "out")


def crash_and_resume(tmp: Path, algorithms: str, rng: random.Random) -> dict[str, list[str]]:
    ckpt, out = tmp / "ckpt", tmp / "out"
    common = ("--algorithms", algorithms, "--mode", rng.choice(["async", "sync"]))
    # dies after a random number of committed epochs (after the checkpoint at epoch 2 is
    # committed: the runs are slowed down a little), then is SIGKILLed at a random instant
    die = ("--die-after", str(rng.randint(3, 10)), "--delay", "0.02")
    assert run_job(ckpt, out, *common, "--workers", str(rng.randint(1, 4)), *die)[0] == 9
    run_job(ckpt, out, *common, "--workers", str(rng.randint(1, 4)), "--delay", "0.05", kill_after=rng.uniform(0.5, 1.5))
    rc, said = run_job(ckpt, out, *common, "--workers", str(rng.randint(1, 4)))
    assert rc == 0 and "restored_from=None" not in said, said
    return outputs(out)


@pytest.mark.parametrize("sequence", range(2))
def test_killed_and_restarted_job_writes_what_an_uninterrupted_run_writes(tmp_path, sequence):
    want = reference(tmp_path / "ref", DEGREES)
    assert len(want) >= 12
    same_output(crash_and_resume(tmp_path / "run", DEGREES, random.Random(sequence)), want)


def test_killed_and_restarted_job_with_every_algorithm(tmp_path):
    rng = random.Random(7)
    got = crash_and_resume(tmp_path / "run", ALL, rng)
    same_output(got, reference(tmp_path / "ref", ALL))


def test_pair_buckets_are_the_same_in_every_process():
    """A restored bucket of per-epoch sums must be where the pair's new updates go, in
    a process whose ``hash()`` of strings is salted differently."""
    from apps.graph.edges import _bucket

    pairs = [("Valjean", "Javert", 1), (3, "x", 1), (7, 11, -1), ("Medici", "Strozzi", 2)]
    code = f"from apps.graph.edges import _bucket; print([_bucket(p) for p in {pairs!r}])"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        assert got.stdout.strip() == str([_bucket(p) for p in pairs])
