"""Both sample apps on Spark vs the embedded engine, as a user runs them.

    python -m benchmarks.spark_apps                      # CEP on all 3M flights (../shared/data)
    python -m benchmarks.spark_apps --limit 300000       # a quicker run
    python -m benchmarks.spark_apps --apps cep,graph --repeat 3

Every configuration is the app's own command line (``python -m apps.cep ...``,
``python -m apps.graph ...``) in a fresh process, timed from the outside (the whole
process: Spark's start-up included) and reporting its figures through ``--stats``:
seconds of the run itself, events, micro-batches, bytes written to the state store, and
the peak memory of the Python driver process.  Configurations run in turn (A B C A B C
...), so a noisy machine disturbs them alike; figures are medians over ``--repeat`` runs.

Configurations: the embedded engine (1 worker), Spark ``local[1]``, ``local[2]`` and
``local-cluster[2,1,1024]`` (two executor processes), each with the state in a local
directory; with ``--s3``, also ``local[2]`` with the state in an S3 bucket of a local
S3-protocol server (moto, from the test extra) started by the benchmark.

Every run must find what the embedded engine finds (the match / timeout / late counts
of each pattern; for the graph app, the printed per-epoch lines): a differing run is
marked in the table.  The last line is JSON with ``cep_spark_over_embedded`` (Spark
``local[2]`` wall / embedded wall, CEP) and ``local2_over_local1_events_per_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

FLIGHTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "flights-3m.parquet"

#: name -> extra arguments of the app's command line
SPARK = {
    "spark local[1]": ["--backend", "spark", "--master", "local[1]", "--partitions", "1"],
    "spark local[2]": ["--backend", "spark", "--master", "local[2]", "--partitions", "2"],
    "spark local-cluster[2,1,1024]": ["--backend", "spark", "--master", "local-cluster[2,1,1024]", "--partitions", "2"],
}


def _run(cmd: list[str], env: Optional[dict[str, str]] = None) -> tuple[float, dict[str, Any], str]:
    """Run ``cmd`` with ``--stats``; returns the process's wall seconds, its stats and
    its standard output."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*cmd, "--stats", str(stats)], capture_output=True, text=True, env={**os.environ, **(env or {})}
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return wall, json.loads(stats.read_text()), proc.stdout


def _cep(configs: dict[str, list[str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    base = [sys.executable, "-m", "apps.cep", "--no-progress", "--show", "0"]
    if args.input is not None:
        base += ["--input", str(args.input)]
    if args.limit is not None:
        base += ["--limit", str(args.limit)]
    return _measure("cep", base, configs, args.repeat, lambda stats, _out: stats["found"])


def _graph(configs: dict[str, list[str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    base = [sys.executable, "-m", "apps.graph"]
    if args.graph_args:
        base += args.graph_args.split()

    def found(_stats: dict[str, Any], out: str) -> Any:  # the per-epoch lines, without timings
        return [ln for ln in out.splitlines() if ln.startswith(" ") or "vertices" in ln]

    return _measure("graph", base, configs, args.repeat, found)


def _measure(app: str, base: list[str], configs: dict[str, list[str]], repeat: int, found: Any) -> list[dict[str, Any]]:
    runs: dict[str, list[tuple[float, dict[str, Any]]]] = {name: [] for name in configs}
    results: dict[str, Any] = {}
    for i in range(repeat):
        for name, extra in configs.items():
            env = {}
            if "--s3" in extra:  # a fresh prefix per app and run
                extra = [a if a != "--s3" else f"{_S3_URL}/{app}-{i}" for a in extra]
                env = _S3_ENV
            print(f"[{app}] run {i + 1}/{repeat}: {name} ...", file=sys.stderr, flush=True)
            wall, stats, out = _run([*base, *extra], env)
            runs[name].append((wall, stats))
            results[name] = found(stats, out)
    reference = results.get("embedded")
    rows = []
    for name, rs in runs.items():
        wall = statistics.median(w for w, _ in rs)
        seconds = statistics.median(s["seconds"] for _, s in rs)
        last = rs[-1][1]
        batches = last.get("batches")
        rows.append({
            "app": app, "config": name, "wall_s": wall, "run_s": seconds,
            "events": last.get("events"), "events_per_s": (last.get("events") or 0) / seconds if seconds else 0.0,
            "driver_peak_rss_mb": statistics.median(s["peak_rss_mb"] for _, s in rs),
            "batches": batches,
            "bytes_per_batch": (last["bytes_written"] / batches) if batches else None,
            "same_as_embedded": results[name] == reference,
        })  # fmt: skip
    return rows


_S3_ENV: dict[str, str] = {}
_S3_URL = "s3://tstate-bench"


def _start_s3() -> tuple[Any, str]:
    """A local S3-protocol server (moto) with a bucket; returns it and the bucket URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    _S3_ENV.update({
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint,
    })  # fmt: skip
    import urllib.request

    req = urllib.request.Request(f"{endpoint}/tstate-bench", method="PUT")
    urllib.request.urlopen(req).close()
    return server, _S3_URL


def _table(rows: list[dict[str, Any]]) -> str:
    head = [
        "app", "configuration", "wall s", "run s", "events/s", "driver peak RSS MB", "micro-batches",
        "MB written / batch", "same as embedded",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        per = r["bytes_per_batch"]
        cells = [
            r["app"], r["config"], f"{r['wall_s']:.1f}", f"{r['run_s']:.1f}", f"{r['events_per_s']:,.0f}",
            f"{r['driver_peak_rss_mb']:.0f}", "-" if r["batches"] is None else str(r["batches"]),
            "-" if per is None else f"{per / 1e6:.2f}", "yes" if r["same_as_embedded"] else "NO",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_apps", description=__doc__.split("\n\n")[0])
    p.add_argument("--apps", default="cep", help="comma-separated: cep, graph (default: cep)")
    p.add_argument("--input", type=Path, default=FLIGHTS if FLIGHTS.exists() else None, help="CEP input (default: the 3M flights)")
    p.add_argument("--limit", type=int, default=None, help="CEP: the first N flights only")
    p.add_argument("--graph-args", default="", help="extra arguments of python -m apps.graph")
    p.add_argument("--repeat", type=int, default=1, help="runs of each configuration (medians)")
    p.add_argument("--configs", default=None, help="comma-separated subset of the configurations")
    p.add_argument("--s3", action="store_true", help="also local[2] with the state in a local S3 server (moto)")
    args = p.parse_args(argv)
    configs: dict[str, list[str]] = {"embedded": [], **SPARK}
    server = None
    if args.s3:
        server, url = _start_s3()
        configs["spark local[2] + S3 state"] = [*SPARK["spark local[2]"], "--checkpoint", "--s3"]
    if args.configs:
        keep = {c.strip() for c in args.configs.split(",")} | {"embedded"}
        configs = {k: v for k, v in configs.items() if k in keep}
    rows: list[dict[str, Any]] = []
    try:
        for app in args.apps.split(","):
            rows += {"cep": _cep, "graph": _graph}[app.strip()](configs, args)
    finally:
        if server is not None:
            server.stop()
    print(_table(rows))

    def fig(app: str, config: str, key: str) -> Optional[float]:
        return next((r[key] for r in rows if r["app"] == app and r["config"] == config), None)

    out: dict[str, Any] = {}
    emb, l2, l1 = fig("cep", "embedded", "wall_s"), fig("cep", "spark local[2]", "wall_s"), None
    if emb and l2:
        out["cep_spark_over_embedded"] = round(l2 / emb, 3)
        run_emb, run_l2 = fig("cep", "embedded", "run_s"), fig("cep", "spark local[2]", "run_s")
        if run_emb and run_l2:
            out["cep_spark_over_embedded_run_only"] = round(run_l2 / run_emb, 3)
    l1 = fig("cep", "spark local[1]", "events_per_s")
    l2e = fig("cep", "spark local[2]", "events_per_s")
    if l1 and l2e:
        out["local2_over_local1_events_per_s"] = round(l2e / l1, 3)
    out["all_same_as_embedded"] = all(r["same_as_embedded"] for r in rows)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
