"""The issue-25 test matrix on the masters the fixture session does not cover: a run
on ``local[1]`` (one task slot: every partition's task in turn), for the column-key
path (``ts.col("k")``, :mod:`tstate.spark.colocated`) and the Python-key path, with a
rescale (2 -> 3 partitions at batch 2) and the driver killed in the middle of batch 4
(after its output was written, before its commit), then restarted: the output equals
an uninterrupted embedded run, with no duplicates or gaps, and every part file left is
committed.  (``local[2]``: tests/spark/test_colocated.py, test_backend.py, test_placed.py;
``local-cluster[2,1,1024]``: test_faults.py and test_colocated.py, which also rescale.)
Each run is its own process (its own SparkContext), as the driver's death needs."""

from __future__ import annotations

from typing import Any

import pytest

from .test_faults import read_output, reference, run_job
from .test_output import committed_parts, stored_output


def committed_partitions(ck: str) -> int:
    from tstate.checkpoint.store import CheckpointStore

    return int(CheckpointStore(ck, readonly=True).latest().meta["spark"]["partitions"])


@pytest.mark.parametrize("key", ["python", "column"])
def test_local1_rescale_and_driver_crash_resume_equal_embedded(tmp_path: Any, key: str) -> None:
    ref = reference(tmp_path)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    extra = ["--column-key"] if key == "column" else []
    first = run_job("local[1]", ck, out, "--rescale-at", "2", "--die-at", "4", *extra)
    assert first.returncode == -9, first.stderr[-3000:]
    assert read_output(out) != ref
    assert committed_partitions(ck) == 3  # the last commit before the crash: after the rescale
    second = run_job("local[1]", ck, out, *extra)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done [4, 5, 6, 7]" in second.stdout  # resumed at the uncommitted batch (7 also closes the inputs)
    assert read_output(out) == ref
    assert stored_output(ck) == committed_parts(ck)
