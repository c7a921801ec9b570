"""``python -m benchmarks.before_after``: the same benchmark on an earlier commit and on
this checkout, alternately; its last line holds ``after / before`` per figure."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import before_after

ROOT = Path(before_after.__file__).resolve().parents[1]


def _in_git() -> bool:
    probe = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _in_git(), reason="needs a git checkout")
def test_head_against_itself_reports_every_figure_of_both_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    before_after.main(
        [
            "--before", "HEAD", "--repeat", "1",
            "--bench", "benchmarks.stateless_pipeline --records 3000 --repeat 1",
            "--bench", "benchmarks.keyed_count --events 3000 --keys 50 --epochs 5 --repeat 1 --no-bytewax",
        ]
    )  # fmt: skip
    ratios = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(ratios) == {
        "benchmarks.stateless_pipeline.tstate_1w_events_per_s", "benchmarks.stateless_pipeline.tstate_1w_over_plain",
        "benchmarks.stateless_pipeline.tstate_4w_over_plain", "benchmarks.keyed_count.tstate_events_per_s",
        "benchmarks.keyed_count.tstate_over_dict_loop", "benchmarks.keyed_count.tstate_emit_over_dict_loop",
    }  # fmt: skip
    assert all(r > 0 for r in ratios.values())


def test_a_failing_benchmark_is_reported_not_counted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert before_after.run_once(ROOT, "benchmarks.no_such_benchmark") is None
    assert "benchmarks.no_such_benchmark failed" in capsys.readouterr().err
