"""Where the keyed count's time goes on Spark (issue 25), batch by batch.

The workload and the tstate contender are :mod:`benchmarks.spark_keyed_count`'s (a
streaming file source, one micro-batch per file, ``fold_bins`` keyed by a key function,
``local[2]``), after one untimed native query and an untimed one-file tstate run.
During the timed run:

- the driver's ``foreachBatch`` thread runs each micro-batch under :mod:`cProfile`
  (:class:`tstate.spark.driving.StreamingBatches` wrapped here); its cumulative
  seconds are split into **Spark jobs** (``collect`` and the other calls that run a job),
  **DataFrame building** (``where``, ``unionAll``, ``repartition``, ``mapInArrow``,
  ``persist``/``unpersist``, ``createDataFrame``, ...), **reduce rows**
  (``MicroBatch.reduce_rows``: FILE/STATS/SINK rows into the checkpoint), **commit**
  (the manifest), **delivery** (waiting for and handing over the sinks' output), and
  the rest;
- Spark's own REST API (the UI is on for this run only) gives, per job the batch ran,
  its stages' wall, executor run and CPU seconds;
- :class:`tstate.metrics.BatchMetrics` gives the backend's own split per batch;
- every py4j round trip the driver makes during a micro-batch is counted and timed by
  the pyspark call site that made it (:class:`Py4jCalls`): the JVM calls building the
  batch's ``mapInArrow`` (its UDF), Spark's size estimate, the collect -- serial
  driver work each batch pays however little its tasks do;
- with ``--task-cpu``, each task's CPU seconds (``TSTATE_SPARK_CPU``,
  :mod:`tstate.spark.profiling`; set before the session starts).

Nothing here changes what runs.  The text goes to
``benchmarks/results/spark_keyed_count_profile.txt`` (``--out``).

    python -m benchmarks.spark_keyed_count_profile [--files 10] [--rows-per-file 100000] [--column]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import threading
import time
import urllib.request
from datetime import datetime
from typing import Any

#: (label, (file suffix, function name) pairs whose cumulative time goes under it);
#: the first label a call matches wins, in this order (an outer category's time
#: includes an inner one's, so inner ones come first and are subtracted)
CATEGORIES: list[tuple[str, list[tuple[str, str]]]] = [
    ("reduce rows (FILE/STATS/SINK rows)", [("tstate/spark/batch.py", "reduce_rows")]),
    ("commit (manifest)", [("tstate/checkpoint/commit.py", "commit")]),
    ("delivery (wait + hand-over)", [("tstate/spark/delivery.py", "wait"), ("tstate/spark/delivery.py", "deliver")]),
    ("Spark jobs (collect, count, agg)", [
        ("pyspark/sql/classic/dataframe.py", "collect"), ("pyspark/sql/dataframe.py", "collect"),
        ("pyspark/sql/classic/dataframe.py", "count"), ("pyspark/sql/classic/dataframe.py", "toArrow"),
    ]),
    ("DataFrame building (where, unionAll, repartition, mapInArrow, persist, ...)", [
        ("pyspark/sql/classic/dataframe.py", name) for name in (
            "where", "filter", "unionAll", "union", "repartition", "persist", "unpersist", "withColumns",
            "drop", "select", "agg", "limit", "mapInArrow",
        )
    ] + [
        ("pyspark/sql/pandas/map_ops.py", "mapInArrow"), ("pyspark/sql/session.py", "createDataFrame"),
        ("pyspark/sql/classic/session.py", "createDataFrame"), ("tstate/spark/shuffles.py", "ticks"),
    ]),
]


def _cum(stats: pstats.Stats, fns: list[tuple[str, str]]) -> float:
    """The cumulative seconds of the functions ``fns`` ((file suffix, name) pairs),
    each call counted once: a matched function's time under another matched one (e.g.
    ``where`` -> ``filter``) is not added again."""
    table = stats.stats  # type: ignore[attr-defined]
    matched = {f for f in table if any(f[2] == n and f[0].endswith(s) for s, n in fns)}
    total = 0.0
    for f in matched:
        callers = table[f][4]
        total += sum(v[3] for c, v in callers.items() if c not in matched)
    return total


def split(stats: pstats.Stats, wall: float) -> list[tuple[str, float]]:
    """``stats``' seconds per :data:`CATEGORIES` label (DataFrame building less the jobs
    it ran, e.g. ``persist`` does not run one; the rest is the driver's own work)."""
    out = [(label, _cum(stats, fns)) for label, fns in CATEGORIES]
    rest = wall - sum(v for _, v in out)
    return out + [("the rest (driver's own: planning, due timers, output index, ...)", rest)]


class Profiled:
    """``StreamingBatches.__call__`` under cProfile, one profile per micro-batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, float, pstats.Stats]] = []
        self.lock = threading.Lock()
        self.on = False

    def install(self) -> None:
        from tstate.spark.driving import StreamingBatches

        original = StreamingBatches.__call__
        me = self

        def call(this: Any, df: Any, batch_id: int) -> None:
            if not me.on:
                return original(this, df, batch_id)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            try:
                return original(this, df, batch_id)
            finally:
                prof.disable()
                wall = time.perf_counter() - t0
                with me.lock:
                    me.batches.append((batch_id, wall, pstats.Stats(prof)))

        StreamingBatches.__call__ = call  # type: ignore[method-assign]


class Py4jCalls:
    """Counts and times the driver's py4j round trips while :attr:`on` (but the main
    thread's: it awaits the query), by the nearest pyspark or tstate frame that made
    them (its file, line and code)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.on = False
        self.lock = threading.Lock()

    def install(self) -> None:
        import traceback

        from py4j import clientserver

        original = clientserver.ClientServerConnection.send_command
        me = self

        def send(this: Any, command: Any) -> Any:
            if not me.on or threading.current_thread() is threading.main_thread():  # (awaitTermination)
                return original(this, command)
            t0 = time.perf_counter()
            try:
                return original(this, command)
            finally:
                dt = time.perf_counter() - t0
                site = "(py4j's own)"
                for fr in reversed(traceback.extract_stack()[:-1]):
                    for top in ("/pyspark/", "/tstate/"):
                        if top in fr.filename and "/py4j/" not in fr.filename:
                            site = f"{top[1:]}{fr.filename.split(top)[-1]}:{fr.lineno} {fr.name}: {(fr.line or '').strip()[:50]}"
                            break
                    else:
                        continue
                    break
                with me.lock:
                    me.counts[site] = me.counts.get(site, 0) + 1
                    me.seconds[site] = me.seconds.get(site, 0.0) + dt

        clientserver.ClientServerConnection.send_command = send  # type: ignore[method-assign]


def task_cpu(directory: str) -> list[float]:
    """The tasks' CPU seconds written to ``directory`` (``TSTATE_SPARK_CPU``), by file time."""
    out = []
    for name in sorted(os.listdir(directory), key=lambda n: os.path.getmtime(os.path.join(directory, n))):
        with open(os.path.join(directory, name)) as f:
            out.append(float(f.read().split()[0]))
    return out


def rest_jobs(spark: Any, first_job: int) -> list[dict[str, Any]]:
    """Spark's jobs from ``first_job`` on (its REST API), each with its stages."""
    base = spark.sparkContext.uiWebUrl.rstrip("/") + "/api/v1/applications/" + spark.sparkContext.applicationId

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path) as r:
            return json.load(r)

    def ts(x: str) -> float:
        return datetime.strptime(x.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    stages = {s["stageId"]: s for s in get("/stages") if s.get("status") != "SKIPPED"}
    jobs = []
    for j in sorted(get("/jobs"), key=lambda j: j["jobId"]):
        if j["jobId"] < first_job:
            continue
        t0 = ts(j["submissionTime"])
        t1 = ts(j.get("completionTime", j["submissionTime"]))
        ss = []
        for sid in sorted(j["stageIds"]):
            s = stages.get(sid)
            if s is None or "submissionTime" not in s:
                continue
            ss.append({
                "id": sid, "tasks": s["numTasks"], "wall": ts(s["completionTime"]) - ts(s["submissionTime"]),
                "run": s["executorRunTime"] / 1e3, "cpu": s["executorCpuTime"] / 1e9, "name": s["name"],
            })  # fmt: skip
        jobs.append({"id": j["jobId"], "start": t0, "wall": t1 - t0, "name": j["name"], "group": j.get("jobGroup"),
                     "stages": ss, "desc": j.get("description", "")})
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.spark_keyed_count_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--rows-per-file", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--column", action="store_true", help="key by ts.col('key') instead of a key function")
    ap.add_argument("--out", default=os.path.join("benchmarks", "results", "spark_keyed_count_profile.txt"))
    ap.add_argument("--task-cpu", action="store_true", help="each task's CPU seconds (TSTATE_SPARK_CPU)")
    a = ap.parse_args(argv)
    cpu_dir = ""
    if a.task_cpu:
        import tempfile

        from tstate.spark.profiling import CPU_ENV

        cpu_dir = os.environ[CPU_ENV] = tempfile.mkdtemp(prefix="tstate-task-cpu-")
    import shutil

    from benchmarks import spark_common
    from benchmarks.spark_common import Collector, TempDirs, check, default_data_dir, generate
    from benchmarks.spark_keyed_count import run_native, run_python, run_tstate

    data_dir = default_data_dir(a.files, a.rows_per_file, a.keys)
    paths = generate(data_dir, a.files, a.rows_per_file, a.keys)
    ref = Collector()
    _py, _b, touched = run_python(paths, ref)
    spark_common.SPARK_CONF = {**spark_common.SPARK_CONF, "spark.ui.enabled": "true", "spark.ui.port": "0"}
    spark = spark_common.spark_session("spark-keyed-count-profile")
    prof = Profiled()
    prof.install()
    calls = Py4jCalls()
    calls.install()
    tmp = TempDirs()
    load0 = os.getloadavg()[0]
    try:
        run_native(spark, data_dir, tmp.new("warm-native"), Collector())
        one = tmp.new("one-file")
        os.makedirs(one)
        shutil.copy(paths[0], one)
        run_tstate(spark, one, tmp.new("warm-tstate"), Collector(), column=a.column)
        n_out = Collector()
        native_s, _ = run_native(spark, data_dir, tmp.new("native"), n_out)
        tracker = spark.sparkContext.statusTracker()
        first_job = max(tracker.getJobIdsForGroup(None) or [-1]) + 1
        out = Collector()
        if cpu_dir:  # (the warm-up runs' tasks are not counted)
            for name in os.listdir(cpu_dir):
                os.remove(os.path.join(cpu_dir, name))
        prof.on = calls.on = True
        import tstate.spark.backend as backend_mod

        backends: list[Any] = []
        init = backend_mod.Backend.__init__

        def keep(self: Any, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            backends.append(self)

        backend_mod.Backend.__init__ = keep  # type: ignore[method-assign]
        try:
            total, per_batch = run_tstate(spark, data_dir, tmp.new("tstate"), out, column=a.column)
        finally:
            backend_mod.Backend.__init__ = init  # type: ignore[method-assign]
            prof.on = calls.on = False
        status = check("tstate", out, dict(ref.latest), sum(touched), a.files * a.rows_per_file)
        time.sleep(1.0)  # (the listener bus catches up before the REST read)
        jobs = rest_jobs(spark, first_job)
    finally:
        spark.stop()
        tmp.cleanup()
    metrics = backends[-1].metrics.batches if backends else []
    text = report(a, total, native_s, status, per_batch, prof.batches, jobs, metrics, load0)
    text += report_calls(calls, len(prof.batches), task_cpu(cpu_dir) if cpu_dir else [])
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def report(
    a: Any, total: float, native_s: float, status: str, per_batch: list[float],
    batches: list[tuple[int, float, pstats.Stats]], jobs: list[dict[str, Any]], metrics: list[Any], load0: float,
) -> str:
    """The profile as text (module docstring)."""
    w = io.StringIO()
    p = lambda s="": print(s, file=w)  # noqa: E731
    p(f"# keyed count on Spark, profiled: {a.files} files x {a.rows_per_file:,} rows, {a.keys:,} keys, "
      f"key {'ts.col' if a.column else 'function'}, local[2]; 1-min load {load0:.1f} before, "
      f"{os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)")
    p(f"# python -m benchmarks.spark_keyed_count_profile{' --column' if a.column else ''}")
    p(f"tstate total {total:.2f} s (cProfile on the driver's foreachBatch thread inflates it), native "
      f"{native_s:.2f} s, check {status}; query batchDuration median {sorted(per_batch)[len(per_batch) // 2]:.2f} s")
    p()
    p("## The driver's foreachBatch thread, per micro-batch (cProfile cumulative seconds)")
    labels = [lab for lab, _ in CATEGORIES] + ["rest"]
    short = ["reduce", "commit", "deliver", "jobs", "df-build", "rest"]
    p(f"{'batch':>5} {'wall':>6} " + " ".join(f"{s:>8}" for s in short))
    sums = [0.0] * len(labels)
    wall_sum = 0.0
    merged: pstats.Stats | None = None
    for bid, wall, st in sorted(batches, key=lambda x: x[0]):
        parts = split(st, wall)
        wall_sum += wall
        for i, (_lab, v) in enumerate(parts):
            sums[i] += v
        p(f"{bid:>5} {wall:6.3f} " + " ".join(f"{v:8.3f}" for _, v in parts))
        if merged is None:
            merged = st
        else:
            merged.add(st)
    p(f"{'sum':>5} {wall_sum:6.3f} " + " ".join(f"{v:8.3f}" for v in sums))
    for (lab, _), s in zip(CATEGORIES, short):
        p(f"  {s:>8}: {lab}")
    p("  (each column is cumulative time under those calls; jobs = the calls that ran Spark jobs, "
      "df-build = the rest of the DataFrame API calls)")
    p()
    if metrics:
        p("## The backend's own split per batch (tstate.metrics.BatchMetrics, seconds)")
        p(f"{'batch':>5} {'total':>6} {'to-jobs':>8} {'driver':>7} {'commit':>7} {'output':>7} {'job-wait':>8}")
        for m in metrics:
            p(f"{m.batch:>5} {m.seconds:6.3f} {m.spark_seconds:8.3f} {m.driver_seconds:7.3f} {m.commit_seconds:7.3f} "
              f"{m.output_seconds:7.3f} {m.job_seconds:8.3f}")
        p("  (to-jobs: batch start to the end of the last stage, DataFrame building included; job-wait: "
          "seconds waiting on Spark jobs)")
        p()
    p("## Spark jobs during the run (REST API): job wall s; stages: id tasks wall-s run-s cpu-s name")
    t_first = jobs[0]["start"] if jobs else 0.0
    run_sum = cpu_sum = wall_jobs = 0.0
    for j in jobs:
        wall_jobs += j["wall"]
        p(f"  job {j['id']:>4} @{j['start'] - t_first:7.2f} {j['wall']:6.3f} s  {j['name'][:70]}")
        for s in j["stages"]:
            run_sum += s["run"]
            cpu_sum += s["cpu"]
            p(f"      s{s['id']:<5} {s['tasks']:>3} {s['wall']:6.3f} {s['run']:6.3f} {s['cpu']:6.3f}  {s['name'][:60]}")
    p(f"  {len(jobs)} jobs, {wall_jobs:.2f} s job wall, {run_sum:.2f} s executor run, {cpu_sum:.2f} s executor CPU "
      "(JVM threads; Python workers' CPU is not in it)")
    p()
    if merged is not None:
        p("## Top driver functions by cumulative time, all batches")
        s = io.StringIO()
        merged.stream = s  # type: ignore[attr-defined]
        merged.sort_stats("cumulative").print_stats(45)
        p("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:12000])
    return w.getvalue()


def report_calls(calls: Py4jCalls, batches: int, cpu: list[float]) -> str:
    """The py4j round trips per batch by call site, and the tasks' CPU seconds."""
    w = io.StringIO()
    p = lambda s="": print(s, file=w)  # noqa: E731
    n = max(batches, 1)
    total, secs = sum(calls.counts.values()), sum(calls.seconds.values())
    p()
    p(f"## py4j round trips during the micro-batches: {total / n:.1f} per batch, {secs / n * 1e3:.1f} ms per batch "
      "(on the driver's threads but the main one, which awaits the query)")
    for site, c in sorted(calls.counts.items(), key=lambda kv: -calls.seconds[kv[0]])[:20]:
        p(f"  {c / n:5.1f}/batch {calls.seconds[site] / n * 1e3:7.1f} ms/batch  {site}")
    if cpu:
        p()
        p(f"## tasks' CPU seconds (TSTATE_SPARK_CPU): {len(cpu)} tasks, median {sorted(cpu)[len(cpu) // 2]:.3f} s, "
          f"sum {sum(cpu):.2f} s")
    return w.getvalue()


if __name__ == "__main__":
    raise SystemExit(main())
