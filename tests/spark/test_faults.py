"""Faults under ``local-cluster[2,1,1024]`` (two real executor processes): an executor
killed mid-batch, and the driver killed mid-batch then restarted.  The final output
equals an uninterrupted run, with no duplicates and no gaps, and no output file of the
killed batch is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


import tstate as ts

from .cluster_job import ROWS
from .flows import keyed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_job(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )


def read_output(d: str) -> list:
    out = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".jsonl"):
            with open(os.path.join(d, name)) as f:
                out += [(name, json.loads(line)) for line in f]
    return sorted(out, key=repr)


def reference(tmp: Any) -> list:
    flow, ev, _stats, _out = keyed()
    d = str(tmp / "ref")
    from .cluster_job import out_stream

    flow.sink(out_stream(flow), ts.io.files(d))
    for t in sorted({r["t"] for r in ROWS}):
        ev.send([r for r in ROWS if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    return read_output(d)


def test_executor_killed_and_driver_restarted_outputs_exactly_once(tmp_path: Any) -> None:
    ref = reference(tmp_path)
    assert ref
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    master = "local-cluster[2,1,1024]"
    # 1. an executor dies during batch 2; the state moves to 3 partitions at batch 3; the
    # driver dies during batch 5
    first = run_job(master, ck, out, "--kill-executor-at", "2", "--rescale-at", "3", "--die-at", "5")
    assert first.returncode == -9, first.stderr[-3000:]
    assert "killing executor" in first.stdout
    partial = read_output(out)
    assert partial and partial != ref
    from .test_masters import committed_partitions

    assert committed_partitions(ck) == 3
    # 2. the driver restarts on the same directories and finishes
    second = run_job(master, ck, out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done [5, 6, 7]" in second.stdout  # resumed at the first uncommitted batch (7 also closes the inputs)
    assert "tstate: resumed at batch 6 of 8" in second.stderr
    assert read_output(out) == ref
    # the output the killed batch wrote is gone; every part file left is committed
    from .test_output import committed_parts, stored_output

    assert stored_output(ck) == committed_parts(ck)
