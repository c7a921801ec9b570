"""benchmarks.spark_keyed_count's last JSON line: tstate's speed-ups over Spark's own
stateful APIs (issue 25), from the contenders' checked totals only."""

from __future__ import annotations

from benchmarks.spark_keyed_count import speedups


def test_speedups_are_the_peers_totals_over_tstates_and_skip_unchecked_peers() -> None:
    results = {
        "tstate": {"status": "ok", "total": 4.0},
        "tws-pandas": {"status": "ok", "total": 42.0},
        "apply-pandas": {"status": "ok", "total": 30.0},
        "tws-row": {"status": "wrong counts", "total": 1.0},  # a wrong contender's time means nothing
        "python": {"status": "ok", "total": 0.5},
    }
    assert speedups(results) == {
        "keyed_count_over_tws_pandas": 10.5, "tws_pandas_s": 42.0,
        "keyed_count_over_apply_pandas": 7.5, "apply_pandas_s": 30.0,
        "keyed_count_python_over_tstate": 8.0, "python_s": 0.5,
    }  # fmt: skip


def test_no_speedups_without_a_checked_tstate_run() -> None:
    assert speedups({"tstate": {"status": "failed", "total": None}, "tws-pandas": {"status": "ok", "total": 9.0}}) == {}
