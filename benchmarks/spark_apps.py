"""Both sample apps on Spark vs the embedded engine, as a user runs them, and the
other figures of issue 25 side by side in one run.

    python -m benchmarks.spark_apps                      # everything: CEP on all 3M flights (../shared/data),
                                                         # the graph app on a 200k-vertex power-law graph,
                                                         # keyed count vs native, a Python-key aggregation (2M rows)
    python -m benchmarks.spark_apps --rows 300000        # CEP on the first 300k flights, the others scaled down
    python -m benchmarks.spark_apps --quick              # a smoke test (small everything, seconds of work)
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
marked in the table; CEP runs with ``--output`` and its epoch files must be the
embedded engine's byte for byte.

``--apps`` also takes ``keyed`` and ``pykey`` (:mod:`benchmarks.spark_extra`, in one
process with one ``local[2]`` session): the keyed count against Spark's native
``groupBy().count()``, and a README-style keyed aggregation with a Python key function
and a per-epoch timer, Spark ``local[2]`` against the embedded engine.

After the table, the issue's rows (figure, measured, target), and the last line is
JSON with ``cep_spark_over_embedded`` (Spark ``local[2]`` wall / embedded wall, CEP),
``cep_local1_run_over_embedded_run`` (run seconds: per-core efficiency),
``local2_over_local1_events_per_s``, ``graph_local2_over_local1`` (the graph app's
speed-up: ``local[1]`` wall / ``local[2]`` wall), ``output_handover_share`` (CEP
``local[2]``: seconds handing the output over after each commit / run seconds),
``driver_share`` (CEP ``local[2]``: the driver's own seconds outside Spark jobs / run
seconds, :attr:`tstate.metrics.BatchMetrics.driver_own_seconds`), ``setup_s`` and
``session_s`` (CEP ``local[2]``: before the run, and of that the Spark session's
start), ``keyed_count_over_native`` and ``python_key_local2_over_embedded``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


def _digest(d: Path) -> str:
    """One hash of every file under ``d`` (relative names and bytes)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in d.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(d)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _cep(configs: dict[str, list[str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    base = [sys.executable, "-m", "apps.cep", "--no-progress", "--show", "0"]
    if args.input is not None:
        base += ["--input", str(args.input)]
    if args.limit is not None:
        base += ["--limit", str(args.limit)]
    out = Path(tempfile.mkdtemp(prefix="bench-cep-out-"))

    def found(stats: dict[str, Any], _out: str) -> Any:  # the counts and the --output files' bytes
        got = [stats["found"], _digest(out)]
        shutil.rmtree(out, ignore_errors=True)
        return got

    try:
        return _measure("cep", [*base, "--output", str(out)], configs, args.repeat, found)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _graph(configs: dict[str, list[str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    base = [sys.executable, "-m", "apps.graph", "--no-progress"]
    if args.vertices:  # the power-law graph of benchmarks/graph.py, about 12 epochs
        path = Path(tempfile.mkdtemp(prefix="bench-graph-")) / f"powerlaw-{args.vertices}.parquet"
        import pyarrow as pa
        import pyarrow.parquet as pq

        from benchmarks.graph_inputs import powerlaw_edges

        edges = powerlaw_edges(args.vertices)
        pq.write_table(pa.table({"src": [u for u, _ in edges], "dst": [v for _, v in edges]}), path)
        base += ["--input", str(path), "--rows-per-epoch", str(max(1, len(edges) // 12))]
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
            "app": app, "config": name, "wall_s": wall, "run_s": seconds, "stats": last,
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


def _extra(args: argparse.Namespace, which: list[str]) -> dict[str, Any]:
    """The keyed-count and Python-key rows (:mod:`benchmarks.spark_extra`, its own process)."""
    cmd = [sys.executable, "-m", "benchmarks.spark_extra", "--rows", str(args.python_key_rows)]
    cmd += ["--files", str(args.files), "--rows-per-file", str(args.rows_per_file)]
    cmd += ["--skip", ",".join(w for w in ("keyed", "pykey") if w not in which)]
    print(f"[{','.join(which)}] ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": _pythonpath()})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def _figures(rows: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    """The JSON line's ratios (see the module docstring)."""

    def fig(app: str, config: str, key: str) -> Any:
        return next((r[key] for r in rows if r["app"] == app and r["config"] == config), None)

    out: dict[str, Any] = {}
    emb, l2 = fig("cep", "embedded", "wall_s"), fig("cep", "spark local[2]", "wall_s")
    if emb and l2:
        out["cep_spark_over_embedded"] = round(l2 / emb, 3)
    run_emb, run_l1 = fig("cep", "embedded", "run_s"), fig("cep", "spark local[1]", "run_s")
    if run_emb and run_l1:
        out["cep_local1_run_over_embedded_run"] = round(run_l1 / run_emb, 3)
    l1e, l2e = fig("cep", "spark local[1]", "events_per_s"), fig("cep", "spark local[2]", "events_per_s")
    if l1e and l2e:
        out["local2_over_local1_events_per_s"] = round(l2e / l1e, 3)
    g1, g2 = fig("graph", "spark local[1]", "wall_s"), fig("graph", "spark local[2]", "wall_s")
    if g1 and g2:
        out["graph_local2_over_local1"] = round(g1 / g2, 3)
    st = fig("cep", "spark local[2]", "stats")
    if st:
        out["output_handover_share"] = st.get("output_share")
        out["driver_share"] = st.get("driver_share")
        out["setup_s"] = st.get("setup_seconds")
        out["session_s"] = st.get("session_seconds")
    k = extra.get("keyed")
    if k and k.get("native"):
        out["keyed_count_over_native"] = round(k["tstate"] / k["native"], 3)
    py = extra.get("pykey")
    if py and py.get("embedded_s"):
        out["python_key_local2_over_embedded"] = round(py["spark_s"] / py["embedded_s"], 3)
        out["python_key_spark_s"] = round(py["spark_s"], 3)  # (for before/after comparisons of the Spark run)
        out["python_key_embedded_s"] = round(py["embedded_s"], 3)
    out["all_same_as_embedded"] = all(r["same_as_embedded"] for r in rows) and all(
        v == "ok" for key in ("tstate_check", "native_check") for v in [(k or {}).get(key, "ok")]
    ) and bool((py or {}).get("same", True))
    return out


#: the issue's rows: JSON key, what it is, target (None: shown, no target)
ISSUE_ROWS = [
    ("cep_local1_run_over_embedded_run", "CEP Spark local[1] run / embedded run (per-core efficiency)", "<= 1.5"),
    ("cep_spark_over_embedded", "CEP Spark local[2] wall / embedded wall, setup included", "<= 1.0"),
    ("local2_over_local1_events_per_s", "CEP Spark local[2] events/s over local[1]", ">= 1.8"),
    ("setup_s", "CEP setup s (session, read, partition; local[2])", "session + 5"),
    ("session_s", "  of which the Spark session's start, s", None),
    ("output_handover_share", "CEP --output hand-over / run (local[2])", "<= 0.10"),
    ("driver_share", "CEP driver's own time / run (local[2])", "<= 0.05"),
    ("graph_local2_over_local1", "graph: local[1] wall / local[2] wall (speed-up)", ">= 1.5"),
    ("keyed_count_over_native", "keyed count, tstate on Spark / native groupBy().count()", "<= 1.5"),
    ("python_key_local2_over_embedded", "Python key + per-epoch timer, Spark local[2] / embedded (run s)", "<= 2"),
]


def _issue_table(figs: dict[str, Any]) -> str:
    lines = ["| figure | measured | target |", "|---|---|---|"]
    for key, what, target in ISSUE_ROWS:
        v = figs.get(key)
        lines.append(f"| {what} | {'-' if v is None else v} | {target or ''} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_apps", description=__doc__.split("\n\n")[0])
    p.add_argument("--apps", default="cep,graph,keyed,pykey", help="comma-separated: cep, graph, keyed, pykey (default: all)")
    p.add_argument("--input", type=Path, default=FLIGHTS if FLIGHTS.exists() else None, help="CEP input (default: the 3M flights)")
    p.add_argument("--limit", type=int, default=None, help="CEP: the first N flights only")
    p.add_argument("--rows", type=int, default=None, help="scale: CEP --limit N, Python-key rows N, keyed count ~N rows")
    p.add_argument("--quick", action="store_true", help="a smoke test: the bundled sample, small graph and counts")
    p.add_argument("--vertices", type=int, default=200_000, help="graph: power-law vertices (0: the bundled sample)")
    p.add_argument("--python-key-rows", type=int, default=2_000_000, help="rows of the Python-key aggregation")
    p.add_argument("--files", type=int, default=10, help="keyed count: parquet files (one micro-batch each)")
    p.add_argument("--rows-per-file", type=int, default=100_000, help="keyed count: rows per file")
    p.add_argument("--graph-args", default="", help="extra arguments of python -m apps.graph")
    p.add_argument("--repeat", type=int, default=1, help="runs of each configuration (medians)")
    p.add_argument("--configs", default=None, help="comma-separated subset of the configurations")
    p.add_argument("--s3", action="store_true", help="also local[2] with the state in a local S3 server (moto)")
    args = p.parse_args(argv)
    if args.quick:
        args.input, args.vertices, args.rows = None, 1_000, args.rows or 20_000
    if args.rows is not None:
        args.limit = args.limit or args.rows
        args.python_key_rows = args.rows
        args.files, args.rows_per_file = min(args.files, 3), max(1_000, args.rows // 3)
    configs: dict[str, list[str]] = {"embedded": [], **SPARK}
    server = None
    if args.s3:
        server, url = _start_s3()
        configs["spark local[2] + S3 state"] = [*SPARK["spark local[2]"], "--checkpoint", "--s3"]
    if args.configs:
        keep = {c.strip() for c in args.configs.split(",")} | {"embedded"}
        configs = {k: v for k, v in configs.items() if k in keep}
    elif args.quick:
        configs.pop("spark local-cluster[2,1,1024]")
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        for app in apps:
            if app in ("cep", "graph"):
                rows += {"cep": _cep, "graph": _graph}[app](configs, args)
        inproc = [a for a in apps if a in ("keyed", "pykey")]
        if inproc:
            extra = _extra(args, inproc)
    finally:
        if server is not None:
            server.stop()
    print(_table(rows))
    k, py = extra.get("keyed"), extra.get("pykey")
    if k:
        print(f"keyed count ({args.files} files x {args.rows_per_file:,} rows): tstate on Spark {k['tstate']:.1f} s "
              f"({k['tstate_check']}), native groupBy().count() {k['native']:.1f} s ({k['native_check']})")
    if py:
        print(f"Python key + per-epoch timer ({py['rows']:,} rows): embedded {py['embedded_s']:.1f} s, "
              f"Spark local[2] {py['spark_s']:.1f} s (driver share {py['driver_share']:.2f}), "
              f"same output: {'yes' if py['same'] else 'NO'}")
    figs = _figures(rows, extra)
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {os.getloadavg()[0]:.1f} at the end")
    print(_issue_table(figs))
    print(json.dumps(figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
