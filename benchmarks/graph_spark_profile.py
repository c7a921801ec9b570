"""Where the graph app's time goes on Spark: per micro-batch and per Spark task.

    python -m benchmarks.graph_spark_profile --graph sample --master local[2]
    python -m benchmarks.graph_spark_profile --graph powerlaw --vertices 20000 --master local[1]

Runs the graph dataflow of :mod:`benchmarks.graph_spark` once on ``--master`` and reports:

- per micro-batch (:class:`tstate.metrics.BatchMetrics`): wall seconds, the part spent
  waiting on Spark jobs and the driver's own part, the commit, stages;
- the Spark jobs and stages the run took (Spark's status tracker);
- per Python task (every ``mapInArrow`` function, wrapped here by a cProfile in the
  executor's Python worker; the profiler's overhead inflates small calls): its wall
  seconds, the rows in and out, and its own time grouped by where it is spent (the
  graph algorithms, the operator host, state encode/decode, record encode/decode, Arrow,
  the rest), the top functions by own time, and the skew between the partitions of
  one stage (slowest task / mean).

Nothing here changes what runs: the wrapper consumes the task's input and output
unchanged.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import marshal
import os
import pstats
import shutil
import tempfile
import time
from typing import Any, Callable, Iterable, Iterator, Optional

#: own-time groups, by the file (or builtin) a function is in; first match wins
GROUPS = [
    ("graph: PageRank (apps/graph/pagerank.py)", ("apps/graph/pagerank",)),
    ("graph: components (apps/graph/components.py, forest.py)", ("apps/graph/components", "apps/graph/forest")),
    ("graph: triangles (apps/graph/triangles.py)", ("apps/graph/triangles",)),
    ("graph: degrees (apps/graph/degrees.py)", ("apps/graph/degrees",)),
    ("graph: edge counts & window (apps/graph/edges.py)", ("apps/graph/edges",)),
    ("graph: the rest (apps/graph)", ("apps/graph/",)),
    ("state codec (tstate/state, msgspec)", ("tstate/state/", "msgspec", "tstate/types/")),
    ("records & cells (spark/records, cells, wire)", ("spark/records", "spark/cells", "spark/wire", "record_types")),
    ("operator host & engine (spark/host, operators, engine, progress)", (
        "spark/host", "tstate/operators/", "tstate/engine/", "tstate/progress/", "tstate/notificator", "tstate/capability",
    )),
    ("store & files (checkpoint, binstore, io)", ("tstate/checkpoint/", "spark/binstore", "tstate/io/", "fsspec")),
    ("routing & plan (spark/plan, task, keys)", ("spark/plan", "spark/task", "tstate/keys", "spark/input_rows")),
    ("Arrow (pyarrow)", ("pyarrow",)),
    ("pyspark worker", ("pyspark",)),
    ("numpy", ("numpy",)),
]


def _group(file: str, fn: str) -> str:
    where = file if file != "~" else fn
    for name, pats in GROUPS:
        if any(p in where for p in pats):
            return name
    return "Python builtins and the rest"


def profiled(func: Callable[[Iterable[Any]], Iterator[Any]], label: str, out_dir: str) -> Callable[..., Iterator[Any]]:
    """``func`` (a ``mapInArrow`` function) run under cProfile in the executor, its stats
    dumped to ``out_dir`` with the task's stage, partition, wall seconds and rows."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        stage = ctx.stageId() if ctx is not None else -1
        part = ctx.partitionId() if ctx is not None else -1
        rows_in = [0]

        def counting() -> Iterator[Any]:
            for b in batches:
                rows_in[0] += b.num_rows
                yield b

        import gc

        gc_s = [0.0, 0.0]  # seconds in collections, of which full ones

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                on_gc.t = time.perf_counter()  # type: ignore[attr-defined]
            else:
                d = time.perf_counter() - on_gc.t  # type: ignore[attr-defined]
                gc_s[0] += d
                if info.get("generation") == 2:
                    gc_s[1] += d

        gc.callbacks.append(on_gc)
        start_cpu = time.process_time()  # the worker's CPU before this task (imports, earlier tasks)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        c0 = time.process_time()
        prof.enable()
        try:
            out = list(func(counting()))
        finally:
            prof.disable()
            gc.callbacks.remove(on_gc)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        prof.create_stats()
        name = os.path.join(out_dir, f"{time.time_ns()}-{os.getpid()}-s{stage}-p{part}.prof")
        meta = {"label": label, "stage": stage, "part": part, "wall": wall, "cpu": cpu,
                "rows_in": rows_in[0], "rows_out": sum(b.num_rows for b in out), "gc": gc_s[0], "gc2": gc_s[1],
                "pid": os.getpid(), "cpu_before": start_cpu}  # fmt: skip
        with open(name, "wb") as f:
            marshal.dump((meta, prof.stats), f)  # type: ignore[attr-defined]
        yield from out

    return run


def install(out_dir: str) -> None:
    """Wrap every ``DataFrame.mapInArrow`` function with :func:`profiled`."""
    try:  # pyspark >= 4: the classic (non-Connect) DataFrame
        from pyspark.sql.classic.dataframe import DataFrame
    except ImportError:  # pragma: no cover
        from pyspark.sql import DataFrame  # type: ignore[assignment]

    original = DataFrame.mapInArrow

    def wrapped(self: Any, func: Any, schema: Any, *a: Any, **kw: Any) -> Any:
        label = getattr(func, "__qualname__", repr(func))
        inner = getattr(func, "__closure__", None)
        if inner:  # name the task by the function it wraps (counted, passing)
            for c in inner:
                v = c.cell_contents
                if callable(v) and getattr(v, "__qualname__", "").endswith("run"):
                    label = f"{label} <- {v.__qualname__}"
        return original(self, profiled(func, label, out_dir), schema, *a, **kw)

    DataFrame.mapInArrow = wrapped  # type: ignore[method-assign]


def report(out_dir: str, top: int = 12) -> str:
    """The per-task table and the grouped profiles of the dumps in ``out_dir``."""
    tasks = []
    for p in sorted(glob.glob(os.path.join(out_dir, "*.prof"))):
        with open(p, "rb") as f:
            meta, stats = marshal.load(f)
        tasks.append((meta, stats))
    lines = ["", f"{len(tasks)} Python task runs (stage, partition: wall s, cpu s, gc s (full), worker pid and its "
             "cpu s before the task, rows in -> out, label)"]
    by_stage: dict[int, list[dict[str, Any]]] = {}
    for meta, _s in tasks:
        by_stage.setdefault(meta["stage"], []).append(meta)
        lines.append(
            f"  s{meta['stage']:<3} p{meta['part']}: {meta['wall']:7.3f} {meta['cpu']:7.3f} "
            f"{meta['gc']:6.3f} ({meta['gc2']:6.3f}) {meta['pid']} {meta['cpu_before']:6.2f} "
            f"{meta['rows_in']:>8} -> {meta['rows_out']:<7} {meta['label']}"
        )
    lines.append("skew per stage (slowest task wall / mean, tasks):")
    for s, ms in sorted(by_stage.items()):
        walls = [m["wall"] for m in ms]
        mean = sum(walls) / len(walls)
        lines.append(f"  s{s}: {max(walls) / mean if mean else 0:.2f} ({len(walls)} tasks, {sum(walls):.2f} s)")
    # grouped own time over all tasks, by label
    by_label: dict[str, list[Any]] = {}
    for meta, stats in tasks:
        by_label.setdefault(meta["label"].split(" <- ")[-1], []).append(stats)
    for label, sts in by_label.items():
        total = 0.0
        groups: dict[str, float] = {}
        fns: dict[str, list[float]] = {}
        for st in sts:
            for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.items():
                total += tt
                g = _group(file, fn)
                groups[g] = groups.get(g, 0.0) + tt
                k = f"{_short(file)}:{line}({fn})"
                acc = fns.setdefault(k, [0.0, 0.0, 0.0])
                acc[0] += tt
                acc[1] += nc
                acc[2] += ct
        lines.append(f"\n== {label}: {len(sts)} task runs, {total:.2f} s own time (profiled)")
        for g, tt in sorted(groups.items(), key=lambda kv: -kv[1]):
            lines.append(f"   {100 * tt / total:5.1f}%  {tt:6.2f} s  {g}")
        lines.append("   top functions by own time (s, calls, cumulative s):")
        for k, (tt, nc, ct) in sorted(fns.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"   {tt:6.2f} {int(nc):>9} {ct:7.2f}  {k}")
        lines.append("   top functions by cumulative time:")
        for k, (tt, nc, ct) in sorted(fns.items(), key=lambda kv: -kv[1][2])[:top]:
            lines.append(f"   {ct:6.2f} {int(nc):>9} {tt:7.2f}  {k}")
    return "\n".join(lines)


def spark_stages(spark: Any) -> str:
    """Spark's own view (its REST API): per job its stages, with per stage the wall
    seconds (submission to completion), the tasks' run and CPU seconds, and the tasks'
    deserialisation / result / GC seconds."""
    import json
    import urllib.request

    base = spark.sparkContext.uiWebUrl.rstrip("/") + "/api/v1/applications/" + spark.sparkContext.applicationId

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path) as r:
            return json.load(r)

    from datetime import datetime

    def ts(x: str) -> float:
        return datetime.strptime(x.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    stages = {s["stageId"]: s for s in get("/stages") if s.get("status") != "SKIPPED"}
    lines = ["Spark jobs (job: wall s; its stages: id tasks wall-s run-s cpu-s deser-s name)"]
    first = None
    for j in sorted(get("/jobs"), key=lambda j: j["jobId"]):
        t0, t1 = ts(j["submissionTime"]), ts(j.get("completionTime", j["submissionTime"]))
        first = t0 if first is None else first
        lines.append(f"  job {j['jobId']:>3} @{t0 - first:7.2f}: {t1 - t0:6.2f} s  {j['name'][:60]}")
        for sid in j["stageIds"]:
            s = stages.get(sid)
            if s is None or "submissionTime" not in s:
                continue
            w = ts(s["completionTime"]) - ts(s["submissionTime"])
            lines.append(
                f"      s{sid:<3} {s['numTasks']:>3} {w:6.2f} {s['executorRunTime'] / 1e3:6.2f} "
                f"{s['executorCpuTime'] / 1e9:6.2f} {s['executorDeserializeTime'] / 1e3:6.2f}  {s['name'][:50]}"
            )
    return "\n".join(lines) + "\n"


def _short(file: str) -> str:
    for root in ("/apps/", "/tstate/", "/pyarrow/", "/pyspark/", "/numpy/"):
        i = file.rfind(root)
        if i >= 0:
            return file[i + 1 :]
    return file


def main(argv: Optional[list[str]] = None) -> None:
    from benchmarks.graph_spark import powerlaw, sample, spark_flow

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="sample", choices=["sample", "powerlaw"])
    ap.add_argument("--vertices", type=int, default=20_000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=0, help="default: the master's cores")
    ap.add_argument("--per-batch", type=int, default=0, help="epochs per micro-batch (default: the workload's)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--session", choices=["default", "warm"], default="default",
                    help="a default session, or one with its warm-up (local_session(warm=True)): "
                         "benchmarks.graph_spark.VARIANTS")
    a = ap.parse_args(argv)
    w = sample() if a.graph == "sample" else powerlaw(a.vertices, a.epochs, 0.01)
    parts = a.partitions or int(a.master.split("[")[1].rstrip("]"))

    from tstate.spark import Backend, Source

    out_dir = tempfile.mkdtemp(prefix="graph-spark-prof-")
    directory = tempfile.mkdtemp(prefix="graph-spark-prof-ck-")
    install(out_dir)
    from benchmarks.graph_spark import VARIANTS, _session

    t_session = time.perf_counter()
    spark = _session(a.master, "graph_spark_profile", {"spark.ui.enabled": "true", "spark.ui.port": "4077", **VARIANTS[a.session]})
    try:
        flow, _sinks = spark_flow(w)
        df = w.frame(spark, staging=f"{directory}-input")
        backend = Backend(spark, checkpoint=directory, partitions=parts, progress=False)
        tracker = spark.sparkContext.statusTracker()
        jobs0 = len(tracker.getJobIdsForGroup(None))
        t0 = time.perf_counter()
        setup_s = t0 - t_session
        backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=a.per_batch or w.per_batch)
        run_s = time.perf_counter() - t0
        jobs = len(tracker.getJobIdsForGroup(None)) - jobs0
        stages_txt = spark_stages(spark)
    finally:
        spark.stop()
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(f"{directory}-input", ignore_errors=True)
    buf = io.StringIO()
    print(f"{w.name} on {a.master}, {parts} partition(s), session {a.session}: run {run_s:.2f} s (started {setup_s:.2f} s "
          f"after the session's), {jobs} Spark jobs, cut {backend.metrics.cut_seconds:.2f} s", file=buf)
    print("batch  frontier  wall s  jobs s  driver-own s  commit s  stages  records  op-records", file=buf)
    for b in backend.metrics.batches:
        print(
            f"{b.batch:>5}  {str(b.frontier):>8}  {b.seconds:6.2f}  {b.job_seconds:6.2f}  "
            f"{b.seconds - b.job_seconds:12.2f}  {b.commit_seconds:8.2f}  {b.stages:6}  {b.records:7}  {b.operator_records:10}",
            file=buf,
        )
    print(buf.getvalue() + stages_txt + report(out_dir, a.top))
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
