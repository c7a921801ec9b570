"""``python -m benchmarks.spark_apps``: its last line holds every ratio issue 25 names,
computed from the rows it measured (a full or ``--quick`` run is the benchmark itself:
too slow for the suite)."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.spark_apps import ISSUE_ROWS, _figures, _issue_table

KEYS = {
    "cep_spark_over_embedded", "cep_local1_run_over_embedded_run", "local2_over_local1_events_per_s",
    "graph_local2_over_local1", "output_handover_share", "driver_share", "keyed_count_over_native",
    "python_key_local2_over_embedded",
}  # fmt: skip


def row(app: str, config: str, wall: float, run: float, events: int, stats: Any = None) -> dict[str, Any]:
    return {
        "app": app, "config": config, "wall_s": wall, "run_s": run, "events_per_s": events / run, "stats": stats or {},
        "same_as_embedded": True,
    }  # fmt: skip


def test_the_json_line_has_the_issue_keys_from_the_measured_rows() -> None:
    stats = {"output_share": 0.07, "driver_share": 0.03, "setup_seconds": 9.0, "session_seconds": 5.0}
    rows = [
        row("cep", "embedded", 10.0, 8.0, 800), row("cep", "spark local[1]", 30.0, 24.0, 800),
        row("cep", "spark local[2]", 20.0, 12.0, 800, stats),
        row("graph", "embedded", 3.0, 2.0, 50), row("graph", "spark local[1]", 40.0, 38.0, 50),
        row("graph", "spark local[2]", 25.0, 23.0, 50),
    ]  # fmt: skip
    extra = {
        "keyed": {"tstate": 6.0, "native": 4.0, "tstate_check": "ok", "native_check": "ok"},
        "pykey": {"embedded_s": 5.0, "spark_s": 15.0, "same": True},
    }
    figs = _figures(rows, extra)
    assert KEYS <= set(figs) and KEYS <= {k for k, _w, _t in ISSUE_ROWS}
    assert figs["cep_spark_over_embedded"] == 2.0 and figs["cep_local1_run_over_embedded_run"] == 3.0
    assert figs["local2_over_local1_events_per_s"] == 2.0 and figs["graph_local2_over_local1"] == 1.6
    assert figs["keyed_count_over_native"] == 1.5 and figs["python_key_local2_over_embedded"] == 3.0
    assert figs["output_handover_share"] == 0.07 and figs["driver_share"] == 0.03 and figs["all_same_as_embedded"]
    json.dumps(figs)
    assert "| CEP --output hand-over / run (local[2]) | 0.07 | <= 0.10 |" in _issue_table(figs)
    rows[0]["same_as_embedded"] = False
    assert not _figures(rows, extra)["all_same_as_embedded"]
    assert not _figures(rows[1:], {**extra, "pykey": {**extra["pykey"], "same": False}})["all_same_as_embedded"]
