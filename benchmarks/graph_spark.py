"""The graph app on Spark: ``local[1]`` vs ``local[2]`` vs the embedded engine, side by side.

    python -m benchmarks.graph --spark                       # the sample + the 200k power-law graph
    python -m benchmarks.graph --spark --vertices 20000      # a smaller power-law graph
    python -m benchmarks.graph_spark --graphs sample         # the same, only the sample
    python -m benchmarks.graph_spark --ab 4                  # the sample: before/after (VARIANTS), alternating
    python -m benchmarks.graph_spark --floor 3               # a fresh session's first Python job, per variant
    python -m benchmarks.graph_spark --breakdown 3           # the sample's run, stage by stage, per variant

Two inputs, each run by three contenders one after another, in one process:

- **sample**: the app's own run (``python -m apps.graph``'s dataflow): the bundled two
  days of flights, hourly epochs, a 24-epoch window, all four algorithms, the app's
  epochs per Spark micro-batch (48: one batch, and the closing one);
- **powerlaw**: :func:`benchmarks.graph.powerlaw_edges` at ``--vertices`` (default
  200,000: about 600,000 edges) loaded whole at epoch 0, then ``--epochs`` epochs of
  ``--churn`` (default 1%) deletions and insertions (:class:`benchmarks.graph.Churn`),
  all four algorithms, every epoch in one micro-batch.

Contenders: the **embedded** engine (:class:`apps.graph.GraphStream`, one worker, its
default layout: one key per algorithm), and the Spark backend on ``local[1]`` (one
partition) and ``local[2]`` (two) with the app's Spark layout
(:func:`apps.graph.stream.build` with ``buckets=SPARK_BUCKETS, spread=True``), each in a
fresh SparkSession.  **run** is the dataflow's run (the embedded engine fed epoch by
epoch; ``Backend.run`` on Spark, with its micro-batches, state files and the changes
collected to the driver); **wall** adds the session's start and the DataFrame's
creation.  Every Spark run's changes must equal the embedded engine's, epoch by epoch
(PageRank's floats included).

The last line is JSON: ``graph_local2_over_local1`` (the power-law graph: ``local[1]``
run seconds / ``local[2]`` run seconds, the speed-up of the second core; target >= 1.5)
and ``graph_spark_local2_over_embedded_run`` (the sample: ``local[2]`` run / embedded
run; target <= 3), plus the same figures for the other input.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from operator import itemgetter
from typing import Any, Optional, Sequence

from benchmarks.common import table

#: contender name -> (Spark master, partitions); None: the embedded engine
CONTENDERS: dict[str, Optional[tuple[str, int]]] = {
    "embedded": None,
    "spark local[1]": ("local[1]", 1),
    "spark local[2]": ("local[2]", 2),
}


class Workload:
    """One input: updates per epoch, the window, the micro-batch size, and the
    DataFrame schema of its rows."""

    def __init__(self, name: str, batches: dict[int, list[Any]], window: Optional[int], per_batch: int) -> None:
        self.name, self.batches, self.window, self.per_batch = name, batches, window, per_batch
        self.epochs = max(batches) + 1 if batches else 0
        self.rows = [(e, s, d, k) for e, recs in sorted(batches.items()) for s, d, k in recs]
        ids = {type(x) for r in self.rows for x in r[1:3]}
        vtype = "bigint" if ids == {int} else "string"
        if vtype == "string":
            self.rows = [(e, str(s), str(d), k) for e, s, d, k in self.rows]
        self.vtype = vtype
        self.schema = f"epoch bigint, src {vtype}, dst {vtype}, delta bigint"

    def frame(self, spark: Any, staging: Optional[str] = None) -> Any:
        """The rows as a DataFrame of :attr:`schema`, built as the app builds it
        (:func:`apps.graph.__main__.updates_frame`: one Arrow table, read by the JVM; a
        large input as Parquet files in ``staging``, read by Spark's reader)."""
        try:
            from apps.graph.__main__ import updates_frame
        except ImportError:  # an earlier tree (benchmarks.before_after): the app made it from the rows
            return spark.createDataFrame(self.rows, self.schema)
        import inspect

        if staging is not None and "staging" in inspect.signature(updates_frame).parameters:
            return updates_frame(spark, self.rows, self.vtype, staging=staging)
        return updates_frame(spark, self.rows, self.vtype)  # (an earlier tree: no staging)


def sample() -> Workload:
    """The app's default run: the bundled sample, hourly epochs, a 24-epoch window."""
    from apps.graph.__main__ import DEFAULT_INPUT
    from apps.graph.io import EdgeFile

    from apps.graph.__main__ import parse_args

    data = EdgeFile(DEFAULT_INPUT, on_invalid="skip")
    args = parse_args(["--backend", "spark"])  # the app's defaults: window, epochs per batch
    return Workload("sample", dict(data.batches()), window=args.window, per_batch=args.epochs_per_batch)


def powerlaw(vertices: int, epochs: int, churn: float) -> Workload:
    """The power-law graph loaded at epoch 0, then ``epochs`` epochs of churn."""
    from benchmarks.graph_inputs import Churn, powerlaw_edges

    edges = powerlaw_edges(vertices)
    ch = Churn(edges, churn, seed=11)
    batches = {0: [(u, v, 1) for u, v in edges]}
    for e in range(1, epochs + 1):
        batches[e] = ch.epoch()
    return Workload("powerlaw", batches, window=None, per_batch=epochs + 1)


def embedded(w: Workload) -> tuple[float, float, dict[tuple[int, str], list[Any]]]:
    """The embedded engine's (wall, run) seconds and changes per (epoch, output)."""
    from apps.graph.stream import GraphStream

    t0 = time.perf_counter()
    g = GraphStream(workers=1, window=w.window, horizon=w.epochs, on_invalid="skip", keep_view=False)
    out: dict[tuple[int, str], list[Any]] = {}
    t1 = time.perf_counter()
    results = []
    for e in range(w.epochs):
        results.extend(g.advance(e, w.batches.get(e, [])))
    results.extend(g.close())
    t2 = time.perf_counter()
    for res in results:
        for name, recs in res.changes.items():
            if recs:
                out.setdefault((res.epoch, name), []).extend(recs)
    return t2 - t0, t2 - t1, out


def spark_flow(w: Workload) -> tuple[Any, dict[str, Any]]:
    """The graph app's dataflow as it runs on Spark (edge counts in ``SPARK_BUCKETS``
    keys, the algorithms' keys spread over the partitions) for workload ``w``, reading
    input ``updates``; and its collecting sinks by output name."""
    import tstate as ts
    from apps.graph.__main__ import SPARK_BUCKETS
    from apps.graph.stream import ALGORITHMS, InputStats, build

    flow = ts.Dataflow("graph")
    updates = flow.input("updates").map(itemgetter(1, 2, 3), name="edge")
    analytics = build(
        flow, updates, ALGORITHMS, w.window, w.epochs, True, "skip", InputStats(),
        buckets=SPARK_BUCKETS, spread=True,
    )  # fmt: skip
    return flow, {name: s.collect(name=f"out.{name}") for name, s in analytics.outputs().items()}


def on_spark(
    w: Workload, master: str, partitions: int, session: Optional[dict[str, Any]] = None, cpu: Optional[list[Any]] = None,
) -> tuple[float, float, dict[tuple[int, str], list[Any]], Any]:
    """A fresh session on ``master`` (``local_session``'s keyword arguments
    ``session``): (wall, run) seconds, the changes per (epoch, output) and the batches'
    metrics; with ``cpu`` a list, the CPU seconds (driver Python, JVM, Python workers)
    of the run and of the whole (session start to the run's end) are appended to it."""
    return _on_spark(w, master, partitions, session, cpu)


def _on_spark(
    w: Workload, master: str, partitions: int, session: Optional[dict[str, Any]], cpu: Optional[list[Any]]
) -> tuple[float, float, dict[tuple[int, str], list[Any]], Any]:
    from tstate.spark import Backend, Source

    t0 = time.perf_counter()
    spark = _session(master, f"benchmarks.graph_spark {w.name}", session)
    clocks = _clocks(spark) if cpu is not None else None
    c0 = clocks.now() if clocks is not None else None
    directory = tempfile.mkdtemp(prefix="graph-spark-bench-")
    try:
        flow, sinks = spark_flow(w)
        df = w.frame(spark, staging=f"{directory}-input")
        backend = Backend(spark, checkpoint=directory, partitions=partitions, progress=False)
        t1 = time.perf_counter()
        c1 = clocks.now() if clocks is not None else None
        backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=w.per_batch)
        t2 = time.perf_counter()
        if clocks is not None and cpu is not None:
            c2 = clocks.now()
            cpu.append(([b - a for a, b in zip(c1[1:], c2[1:])], [b - a for a, b in zip(c0[1:], c2[1:])]))
    finally:
        spark.stop()
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(f"{directory}-input", ignore_errors=True)
    out: dict[tuple[int, str], list[Any]] = {}
    for name, sink in sinks.items():
        for t, r in sink.items:
            out.setdefault((t, name), []).append(r)
    return t2 - t0, t2 - t1, out, backend.metrics.batches


def _clocks(spark: Any) -> Any:
    """CPU clocks of this process, the JVM and its Python workers
    (:class:`benchmarks.clocks.Clocks`); its ``now()`` gives (wall, driver
    Python, JVM, workers) seconds.  The session's first start of the JVM is counted in
    none of them (the JVM starts once a process)."""
    from benchmarks.clocks import Clocks

    return Clocks(int(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid()))


def _session(master: str, name: str, variant: Optional[dict[str, Any]]) -> Any:
    """``local_session(master)`` with a :data:`VARIANTS` entry's keyword arguments."""
    from tstate.spark import local_session

    return local_session(master, app_name=name, **(variant or {}))


#: ``--ab``'s variants: ``local_session`` keyword arguments; "default" a default session,
#: "warm" with the session's warm-up (``local_session(warm=True)``: one worker started
#: with a one-task RDD job as the session starts, :func:`tstate.spark.warm.start_worker`)
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "warm": {"warm": True},
}


def ab(w: Workload, pairs: int, master: str = "local[2]") -> dict[str, Any]:
    """``pairs`` rounds of: the embedded run, then a fresh ``master`` session per
    :data:`VARIANTS` entry (their order alternating round by round), each running
    ``w``; after one unmeasured Spark run (the process's first JVM start).  Per variant
    the run and wall seconds, run / the same round's embedded run, and the CPU seconds;
    medians."""
    parts = int(master.split("[")[1].rstrip("]"))
    _wall, _run, ref = embedded(w)
    on_spark(w, master, parts)  # (the JVM's first start and first queries: not measured)
    got: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for i in range(pairs):
        emb = embedded(w)[1]
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for v in order:
            cpu: list[Any] = []
            wall, run, out, _m = on_spark(w, master, parts, VARIANTS[v], cpu)
            (run_cpu, all_cpu), = cpu
            got[v].append({"run": run, "wall": wall, "ratio": run / emb, "embedded": emb, "same": _same(out, ref),
                           "run_cpu": run_cpu, "all_cpu": all_cpu})  # fmt: skip
            print(f"[ab {i}] {v}: run {run:.2f} s ({run / emb:.2f}x embedded {emb:.2f}), wall {wall:.2f}; CPU run "
                  f"py/jvm/workers {'/'.join(f'{x:.2f}' for x in run_cpu)}, whole {'/'.join(f'{x:.2f}' for x in all_cpu)}"
                  f" (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)  # fmt: skip
    med = statistics.median
    return {
        v: {
            "run_s": round(med(r["run"] for r in rs), 3), "wall_s": round(med(r["wall"] for r in rs), 3),
            "run_over_embedded": round(med(r["ratio"] for r in rs), 2),
            "run_cpu": [round(med(r["run_cpu"][k] for r in rs), 3) for k in range(3)],
            "whole_cpu": [round(med(r["all_cpu"][k] for r in rs), 3) for k in range(3)],
            "same": all(r["same"] for r in rs),
        }
        for v, rs in got.items()
    }


#: ``--floor``'s variants
FLOOR_VARIANTS: dict[str, dict[str, Any]] = VARIANTS


def _empty(batches: Any) -> Any:
    for _ in batches:
        pass
    return iter(())


def _tstate_empty(batches: Any) -> Any:
    import tstate.spark.local_batch  # noqa: F401  (what a tstate task's function imports)

    for _ in batches:
        pass
    return iter(())


def floor(rounds: int, rows: int = 31_678, master: str = "local[2]", warm_jobs: int = 5) -> dict[str, Any]:
    """Spark's floor for a first Python job on a fresh session, per
    :data:`FLOOR_VARIANTS` entry (their order rotating round by round, after one
    unmeasured session: the process's JVM start): the session started, then at once
    one ``mapInArrow`` job of one task over ``rows`` rows whose function imports
    tstate's task code (what every tstate task does; the first: cold), then
    ``warm_jobs`` more, then as many empty ones (importing nothing).  Per variant:
    medians of (wall, driver Python, JVM, workers CPU) seconds."""
    from tstate.spark import local_session

    def job(spark: Any, clocks: Any, f: Any) -> list[float]:
        a = clocks.now()
        spark.range(0, rows, 1, 1).mapInArrow(f, "id long").collect()
        b = clocks.now()
        return [y - x for x, y in zip(a, b)]

    local_session(master, app_name="benchmarks.graph_spark floor").stop()  # (the JVM's start: not measured)
    got: dict[str, dict[str, list[list[float]]]] = {v: {"cold": [], "warm": [], "warm_empty": []} for v in FLOOR_VARIANTS}
    names = list(FLOOR_VARIANTS)
    for i in range(rounds):
        for v in names[i % len(names):] + names[: i % len(names)]:
            spark = _session(master, "benchmarks.graph_spark floor", FLOOR_VARIANTS[v])  # (no run: run_start moot)
            try:
                clocks = _clocks(spark)
                got[v]["cold"].append(job(spark, clocks, _tstate_empty))
                got[v]["warm"] += [job(spark, clocks, _tstate_empty) for _ in range(warm_jobs)]
                got[v]["warm_empty"] += [job(spark, clocks, _empty) for _ in range(warm_jobs)]
            finally:
                spark.stop()
            print(f"[floor {i}] {v}: cold {'/'.join(f'{x:.2f}' for x in got[v]['cold'][-1])} (wall/py/jvm/workers s; "
                  f"load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)  # fmt: skip
    med = statistics.median
    return {v: {k: [round(med(r[j] for r in rs), 3) for j in range(4)] for k, rs in d.items()} for v, d in got.items()}


def breakdown(rounds: int, master: str = "local[2]") -> dict[str, Any]:
    """Where a fresh session's run of the sample goes, per :data:`VARIANTS` entry (their
    order alternating round by round, after one unmeasured session: the process's JVM
    start), beside the embedded run's CPU: the session's start and the caller's setup
    (dataflow, frame; wall s), then the run -- its wall and CPU seconds (driver Python,
    JVM, Python workers), the Spark job's wall (``BatchMetrics.job_seconds``) and the
    driver's own (the rest), the task's CPU (``TSTATE_SPARK_CPU``: the graph work, Arrow
    in and out, state files, output parts) and the workers' CPU beyond it (the worker
    daemon's start and imports, the fork: the first job's Python start).  CPU counts
    from the session's start, so a warm-up's is in it.  Medians."""
    import glob
    import shutil

    cpu_dir = tempfile.mkdtemp(prefix="graph-spark-cpu-")
    os.environ["TSTATE_SPARK_CPU"] = cpu_dir  # (before the JVM starts: its workers inherit it)
    w = sample()
    parts = int(master.split("[")[1].rstrip("]"))
    on_spark(w, master, parts)  # (the JVM's start: not measured)
    got: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for i in range(rounds):
        c = time.process_time()
        emb_wall = embedded(w)[1]
        emb_cpu = time.process_time() - c
        for v in (list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))):
            for f in glob.glob(os.path.join(cpu_dir, "*.cpu")):
                os.remove(f)
            cpu: list[Any] = []
            wall, run, _out, m = on_spark(w, master, parts, VARIANTS[v], cpu)
            (run_cpu, all_cpu), = cpu
            task = sum(float(open(f).read().split()[0]) for f in glob.glob(os.path.join(cpu_dir, "*.cpu")))
            job = sum(b.job_seconds for b in m)
            got[v].append({
                "setup_wall": wall - run, "run_wall": run, "job_wall": job, "driver_own_wall": run - job,
                "run_py": run_cpu[0], "run_jvm": run_cpu[1], "run_workers": run_cpu[2], "whole_jvm": all_cpu[1],
                "whole_workers": all_cpu[2], "task_cpu": task, "worker_start_cpu": all_cpu[2] - task,
                "embedded_cpu": emb_cpu, "embedded_wall": emb_wall, "run_over_embedded": run / emb_wall,
            })  # fmt: skip
            print(f"[breakdown {i}] {v}: " + ", ".join(f"{k} {x:.2f}" for k, x in got[v][-1].items())
                  + f" (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)  # fmt: skip
    shutil.rmtree(cpu_dir, ignore_errors=True)
    med = statistics.median
    return {v: {k: round(med(r[k] for r in rs), 3) for k in rs[0]} for v, rs in got.items()}


def _same(a: dict[tuple[int, str], list[Any]], b: dict[tuple[int, str], list[Any]]) -> bool:
    norm = lambda d: {k: sorted(map(repr, v)) for k, v in d.items() if v}  # noqa: E731
    return norm(a) == norm(b)


def compare(workloads: Sequence[Workload]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every contender on every workload; the table's rows and the JSON figures."""
    rows: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    for w in workloads:
        print(f"[{w.name}] {len(w.rows):,} edge updates, {w.epochs} epochs", file=sys.stderr, flush=True)
        got: dict[str, dict[str, Any]] = {}
        ref: dict[tuple[int, str], list[Any]] = {}
        for name, spec in CONTENDERS.items():
            print(f"[{w.name}] {name} ...", file=sys.stderr, flush=True)
            if spec is None:
                wall, run, ref = embedded(w)
                got[name] = {"wall": wall, "run": run, "same": True, "batches": "-", "stages": "-", "task_share": "-"}
            else:
                wall, run, out, m = on_spark(w, *spec)
                spark_s = sum(b.spark_seconds for b in m)
                got[name] = {
                    "wall": wall, "run": run, "same": _same(out, ref), "batches": len(m),
                    "stages": sum(b.stages for b in m), "task_share": f"{spark_s / run:.0%}" if run else "-",
                }
            print(f"[{w.name}] {name}: run {got[name]['run']:.2f} s", file=sys.stderr, flush=True)
        for name, g in got.items():
            rows.append({"input": w.name, "contender": name, **g})
        emb, l1, l2 = (got[n]["run"] for n in CONTENDERS)
        prefix = "graph" if w.name == "powerlaw" else f"graph_{w.name}"
        figures[f"{prefix}_local2_over_local1"] = round(l1 / l2, 3) if l2 else None
        prefix = "graph_spark" if w.name == "sample" else f"graph_{w.name}_spark"
        figures[f"{prefix}_local2_over_embedded_run"] = round(l2 / emb, 3) if emb else None
        figures.setdefault("all_same_as_embedded", True)
        figures["all_same_as_embedded"] &= all(g["same"] for g in got.values())
    return rows, figures


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="sample,powerlaw", help="comma-separated: sample, powerlaw")
    ap.add_argument("--vertices", type=int, default=200_000, help="vertices of the power-law graph")
    ap.add_argument("--epochs", type=int, default=5, help="churn epochs after the power-law graph's load")
    ap.add_argument("--churn", type=float, default=0.01, help="fraction of the edges changed per churn epoch")
    ap.add_argument("--ab", type=int, default=0, help="instead: N rounds of before/after on the sample (VARIANTS)")
    ap.add_argument("--master", default="local[2]", help="--ab's master")
    ap.add_argument("--floor", type=int, default=0, help="instead: N rounds of the first-job floor (FLOOR_VARIANTS)")
    ap.add_argument("--breakdown", type=int, default=0, help="instead: N rounds of the sample's breakdown per VARIANTS entry")
    args = ap.parse_args(argv)
    if args.breakdown:
        res = breakdown(args.breakdown, args.master)
        keys = list(next(iter(res.values())))
        print(f"graph sample, a fresh {args.master} session's run, {args.breakdown} rounds, medians (s):")
        print(table(["figure", *res], [[k, *(f"{r[k]:.2f}" for r in res.values())] for k in keys]))
        print(json.dumps(res, sort_keys=True))
        return
    if args.floor:
        fl = floor(args.floor, master=args.master)
        print(f"a fresh {args.master} session's first Python job (1 task, 31,678 rows, importing tstate's task code), then "
              f"warm ones; medians of wall / driver Python / JVM / workers CPU s:")  # fmt: skip
        for v, r in fl.items():
            print(f"  {v:12}: " + "; ".join(f"{k} {'/'.join(f'{x:.2f}' for x in xs)}" for k, xs in r.items()))
        print(json.dumps(fl, sort_keys=True))
        return
    if args.ab:
        res = ab(sample(), args.ab, args.master)
        print(f"graph sample, {args.master}, {args.ab} rounds, medians (CPU s: driver Python / JVM / Python workers):")
        for v, r in res.items():
            print(f"  {v:11}: run {r['run_s']:.2f} s = {r['run_over_embedded']:.2f}x the embedded run, wall {r['wall_s']:.2f} s;"
                  f" CPU of the run {r['run_cpu']}, from the session's start {r['whole_cpu']}; same: {r['same']}")
        print(json.dumps(res, sort_keys=True))
        return
    makers = {"sample": sample, "powerlaw": lambda: powerlaw(args.vertices, args.epochs, args.churn)}
    names = [g for g in args.graphs.split(",") if g]
    for g in names:
        if g not in makers:
            ap.error(f"unknown input {g!r}; choose from {sorted(makers)}")
    rows, figures = compare([makers[g]() for g in names])
    header = ["input", "contender", "wall s", "run s", "run / embedded run", "micro-batches", "stages",
              "Spark jobs' share of run", "same as embedded"]  # fmt: skip
    emb = {r["input"]: r["run"] for r in rows if r["contender"] == "embedded"}
    body = [
        [r["input"], r["contender"], f"{r['wall']:.1f}", f"{r['run']:.2f}", f"{r['run'] / emb[r['input']]:.2f}x",
         r["batches"], r["stages"], r["task_share"], "yes" if r["same"] else "NO"]
        for r in rows
    ]  # fmt: skip
    print(
        "graph app: embedded vs Spark local[1] vs local[2] (the app's Spark layout: edge counts in "
        "SPARK_BUCKETS keys, the algorithms' keys spread over the partitions)"
    )
    print(table(header, body))
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
