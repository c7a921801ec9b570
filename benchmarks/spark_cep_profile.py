"""Where a CEP run on Spark spends its time, micro-batch by micro-batch and stage by
stage, and which process burns the CPU (issue 25, item 6 and the local[2]/local[1]
question).

    python -m benchmarks.spark_cep_profile --master "local[1]" --limit 400000
    python -m benchmarks.spark_cep_profile --master "local[2]" --limit 400000

One in-process run of the CEP app's dataflow on Spark (``apps.cep.spark_source``, the
app's sinks with ``--show 0``), every task under cProfile (``TSTATE_SPARK_PROFILE``,
CPU time: comparable on a busy machine; ``--no-profile``: without it, for the CPU per
process without the profiler's overhead).  Prints:

* setup: the session's start, ``flight_frame``, and the run;
* per micro-batch: wall seconds, of which Spark jobs (tasks), the driver's own time
  (:attr:`tstate.metrics.BatchMetrics.driver_own_seconds`), the commit and the output
  hand-over, and the input rows;
* the tasks' Python CPU seconds by stage of the work (input read: Arrow batches from
  the JVM into records; fused chain; the CEP operator: NFA and matcher; encoding the
  output; state files and commit; the rest), from the merged profiles;
* CPU seconds per process over the whole run (``/proc``: the driver's Python process,
  the JVM, the Python workers), against the run's wall seconds times the CPUs, and the
  JVM's by thread kind (JIT compilers, executor tasks, GC, py4j: ``/proc/<pid>/task``).

* with ``--timeline``: Spark's stages in order from its event log (name, tasks, wall
  from submission to completion, the tasks' executor run and CPU seconds as the JVM
  counts them, shuffle bytes), and with ``--no-profile`` the Python tasks' own split
  (``TSTATE_SPARK_CPU``): CPU, wall, and of the wall the time spent waiting for the
  JVM to hand the task its Arrow batches -- before the first Python task starts, how
  long the Python task waits for input, how long it computes;
* with ``--embedded``: the embedded run of the same slice (``python -m apps.cep``, in a
  child process, under cProfile with ``--profile``), its CPU by the same stages and,
  function by function, where the Spark tasks' profile exceeds it.

The session gets the app's settings (:data:`apps.cep.spark_source.SPARK_SETTINGS`),
then any ``--conf KEY=VALUE`` (repeatable: an A/B of a Spark or JVM setting).

The last line is JSON with those figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from benchmarks import jvm_profile

FLIGHTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "flights-3m.parquet"

#: stage of the task's work -> path fragments of the functions it counts (first match wins)
STAGES = [
    ("input read (Arrow -> records)", ("pyspark/sql/pandas", "pyarrow", "tstate/spark/input_rows", "rows_to_records", "apps/cep/source.py",
                                       "pyspark/serializers", "pyspark/worker")),
    ("CEP operator (NFA, matcher)", ("apps/cep/",)),
    ("encode output (sink parts)", ("tstate/spark/records", "tstate/spark/output", "msgpack")),
    ("state files, commit", ("tstate/checkpoint", "tstate/spark/binstore", "tstate/spark/rocks", "tstate/state",
                             "xxhash", "zlib", "posix")),
    ("fused chain, routing, hosting", ("tstate/",)),
]  # fmt: skip


def _stage(filename: str, func: str) -> str:
    where = f"{filename}:{func}"
    for name, frags in STAGES:
        if any(f in where for f in frags):
            return name
    return "other (builtins, Python runtime)"


def task_profile(directory: str) -> tuple[dict[str, float], float, int]:
    """Merged task profiles in ``directory``: CPU seconds by stage (own time of the
    functions), the total, and the number of task profiles."""
    files = sorted(str(p) for p in Path(directory).glob("*.prof"))
    if not files:
        return {}, 0.0, 0
    st = pstats.Stats(files[0])
    for f in files[1:]:
        st.add(f)
    out: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        s = _stage(filename, func)
        out[s] = out.get(s, 0.0) + tt
    return out, sum(out.values()), len(files)


def task_figures(directory: str) -> list[dict[str, Any]]:
    """The tasks' own figures written to ``directory`` (``TSTATE_SPARK_CPU``:
    :mod:`tstate.spark.profiling`), one dict per task: kind, CPU, collector, wall,
    input wall and input CPU seconds."""
    out = []
    for p in sorted(Path(directory).glob("*.cpu"), key=lambda p: p.stat().st_mtime):
        f = p.read_text().split()
        cpu, gc_s, wall, in_wall, in_cpu = (float(f[i]) for i in (0, 1, 5, 6, 7))
        out.append({"kind": p.name.split("-")[0], "cpu_s": round(cpu, 3), "gc_s": round(gc_s, 3), "wall_s": round(wall, 3),
                    "input_wait_s": round(in_wall - in_cpu, 3), "input_cpu_s": round(in_cpu, 3)})  # fmt: skip
    return out


def stage_timeline(log_dir: str, since_ms: float) -> list[dict[str, Any]]:
    """Spark's stages completed after ``since_ms`` (epoch milliseconds), in submission
    order, from the event log in ``log_dir``: name, tasks, wall seconds (submission to
    completion), the tasks' executor run and CPU seconds, the JVM's GC seconds in them,
    the shuffle bytes read and written."""
    stages: dict[int, dict[str, Any]] = {}
    files = [p for p in Path(log_dir).rglob("*") if p.is_file() and not p.name.startswith("appstatus")]
    for f in sorted(files):  # (Spark 4: a directory of event files)
        for line in f.read_text().splitlines():
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            ev = e.get("Event")
            if ev == "SparkListenerStageCompleted":
                i = e["Stage Info"]
                if i.get("Submission Time", 0) < since_ms:
                    continue
                st = stages.setdefault(i["Stage ID"], {"run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0, "shuffle_read_mb": 0.0,
                                                       "shuffle_write_mb": 0.0})  # fmt: skip
                st.update(stage=i["Stage ID"], name=i["Stage Name"].split(" at ")[0], tasks=i["Number of Tasks"],
                          start_ms=i["Submission Time"], wall_s=round((i["Completion Time"] - i["Submission Time"]) / 1e3, 2))
            elif ev == "SparkListenerTaskEnd" and e.get("Task Metrics"):
                m = e["Task Metrics"]
                st = stages.setdefault(e["Stage ID"], {"run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0, "shuffle_read_mb": 0.0,
                                                       "shuffle_write_mb": 0.0})  # fmt: skip
                st["run_s"] += m.get("Executor Run Time", 0) / 1e3
                st["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
                st["gc_s"] += m.get("JVM GC Time", 0) / 1e3
                sr, sw = m.get("Shuffle Read Metrics", {}), m.get("Shuffle Write Metrics", {})
                st["shuffle_read_mb"] += (sr.get("Remote Bytes Read", 0) + sr.get("Local Bytes Read", 0)) / 1e6
                st["shuffle_write_mb"] += sw.get("Shuffle Bytes Written", 0) / 1e6
    done = sorted((s for s in stages.values() if "start_ms" in s), key=lambda s: s["start_ms"])
    for s in done:
        s["start_s"] = round((s.pop("start_ms") - since_ms) / 1e3, 2)
        for k in ("run_s", "cpu_s", "gc_s", "shuffle_read_mb", "shuffle_write_mb"):
            s[k] = round(s[k], 2)
    return done


_EMBEDDED = """
import cProfile, runpy, sys, time
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["apps.cep", *argv]
prof = cProfile.Profile(time.process_time) if out else None
if prof: prof.enable()
try:
    runpy.run_module("apps.cep", run_name="__main__")
except SystemExit:
    pass
if prof:
    prof.disable()
    prof.dump_stats(out)
"""


def embedded(path: Path, limit: Optional[int], profile_file: Optional[str]) -> float:
    """The CPU seconds (user + system) of the embedded CEP run of the same slice
    (``python -m apps.cep --show 0``, a child process), under cProfile into
    ``profile_file`` when given."""
    import resource
    import subprocess

    argv = ["--input", str(path), "--show", "0", "--no-progress"] + (["--limit", str(limit)] if limit else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", _EMBEDDED, profile_file or "", *argv], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def function_diff(task_dir: str, embedded_file: str, top: int = 25) -> list[tuple[str, float, float]]:
    """Functions by how much more own CPU the Spark tasks' merged profile gives them
    than the embedded run's: ``(function, tasks s, embedded s)``, largest excess first."""

    def own(st: pstats.Stats) -> dict[str, float]:
        out: dict[str, float] = {}
        for (filename, line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
            k = f"{filename.replace(os.getcwd() + '/', '').split('site-packages/')[-1]}:{line}({func})"
            out[k] = out.get(k, 0.0) + tt
        return out

    files = sorted(str(p) for p in Path(task_dir).glob("*.prof"))
    st = pstats.Stats(files[0])
    for f in files[1:]:
        st.add(f)
    spark, emb = own(st), own(pstats.Stats(embedded_file))
    rows = [(k, spark.get(k, 0.0), emb.get(k, 0.0)) for k in set(spark) | set(emb)]
    rows.sort(key=lambda r: -abs(r[1] - r[2]))
    return rows[:top]


def _proc_tree(root: int) -> dict[int, tuple[str, float]]:
    """pid -> (command, CPU seconds, its reaped children's included) of ``root`` and its
    descendants (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    info: dict[int, tuple[str, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parent[int(d.name)] = int(fields[1])
        # its own CPU and its reaped children's (Spark ends Python workers idle for a minute)
        info[int(d.name)] = (cmd, sum(int(f) for f in fields[11:15]) / tick)
    keep = {root}
    grown = True
    while grown:
        new = {p for p, pp in parent.items() if pp in keep and p not in keep}
        keep |= new
        grown = bool(new)
    return {p: info[p] for p in keep if p in info}


def process_cpu() -> dict[str, float]:
    """CPU seconds so far: this driver process, the JVM, the Python workers (the
    daemon and the workers it forked)."""
    out = {"driver (Python)": 0.0, "JVM": 0.0, "Python workers": 0.0}
    for pid, (cmd, cpu) in _proc_tree(os.getpid()).items():
        if pid == os.getpid():
            out["driver (Python)"] += cpu
        elif "java" in cmd.split(" ")[0]:
            out["JVM"] += cpu
        elif "pyspark" in cmd or "python" in cmd:
            out["Python workers"] += cpu
    return out


def _thread_kind(name: str) -> str:
    """A JVM thread's kind from its name (``/proc/<pid>/task/<tid>/comm``, 15 bytes)."""
    for frag, kind in (("C2 Compiler", "JIT compiler (C2)"), ("C1 Compiler", "JIT compiler (C1)"), ("GC", "garbage collector"),
                       ("G1", "garbage collector"), ("Executor task", "executor tasks"), ("stdout writer", "rows -> Python task writer"),
                       ("stdin writer", "rows -> Python task writer"), ("Thread-", "py4j / other (Thread-N)")):
        if frag in name:
            return kind
    return "other"


def jvm_threads() -> dict[str, float]:
    """CPU seconds so far of the session's JVM threads, by kind (:func:`_thread_kind`;
    threads that ended are not counted)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid, (cmd, _cpu) in _proc_tree(os.getpid()).items():
        if "java" not in cmd.split(" ")[0]:
            continue
        for t in Path(f"/proc/{pid}/task").iterdir():
            try:
                name = (t / "comm").read_text().strip()
                stat = (t / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            k = _thread_kind(name)
            out[k] = out.get(k, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def run(
    master: str, path: Path, limit: Optional[int], profile_dir: str, profile: bool = True, rows_per_batch: int = 500_000,
    jfr: Optional[str] = None, conf: Optional[dict[str, str]] = None, timeline: bool = False,
) -> dict[str, Any]:
    # cProfile per task, or (profile=False) only each task's CPU seconds: no profiler overhead
    os.environ["TSTATE_SPARK_PROFILE" if profile else "TSTATE_SPARK_CPU"] = profile_dir
    import gc

    import tstate as ts
    from apps.cep.__main__ import GC_THRESHOLD, build
    from apps.cep.spark_source import flight_frame, spark_events
    from tstate.spark import Backend, local_session

    if jfr is not None:  # (the driver JVM's samples: benchmarks.jvm_profile)
        os.environ["PYSPARK_SUBMIT_ARGS"] = jvm_profile.recording_options(jfr)
    conf = dict(conf or {})
    log_dir = tempfile.mkdtemp(prefix="tstate-eventlog-") if timeline else None
    if log_dir is not None:
        conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + log_dir,
                     "spark.eventLog.compress": "false"})
    since_ms = time.time() * 1e3
    # the app's collector thresholds, as `python -m apps.cep` sets them: tasks run under the driver's
    # (tstate.spark.collector), and Python's defaults would add a collector share the app does not pay
    gc.set_threshold(*GC_THRESHOLD)
    t0 = time.perf_counter()
    cpu0 = process_cpu()
    from apps.cep.spark_source import SPARK_SETTINGS

    spark = local_session(master, app_name="cep-profile", **{**SPARK_SETTINGS, **conf})  # (the app's, then --conf)
    t1 = time.perf_counter()
    frame = flight_frame(spark, path, epoch="1h", limit=limit, partitions=spark.sparkContext.defaultParallelism)
    t2 = time.perf_counter()
    flow = ts.Dataflow("cep-flights")
    build(flow, flow.input("flights"), epoch_minutes=60, lateness=0, show=0, output=None)
    with tempfile.TemporaryDirectory() as ck:
        backend = Backend(spark, checkpoint=ck, partitions=spark.sparkContext.defaultParallelism, progress=False)
        cpu1, thr1 = process_cpu(), jvm_threads()
        t3 = time.perf_counter()
        run_ms = time.time() * 1e3
        backend.run(flow, {"flights": spark_events(frame)}, rows_per_batch=rows_per_batch)
        t4 = time.perf_counter()
        cpu2, thr2 = process_cpu(), jvm_threads()
    jvm = None
    if jfr is not None:
        jvm_profile.dump(spark, jfr)
        jvm = jvm_profile.breakdown(jfr)
    spark.stop()
    stages_run = stage_timeline(log_dir, since_ms) if log_dir is not None else []
    batches = [
        {
            "batch": b.batch, "wall_s": round(b.seconds, 3), "jobs_s": round(b.job_seconds, 3),
            "driver_own_s": round(b.driver_own_seconds, 3), "commit_s": round(b.commit_seconds, 3),
            "output_s": round(b.output_seconds, 3), "rows": b.records,
        }
        for b in backend.metrics.batches
    ]  # fmt: skip
    stages, task_cpu, tasks = task_profile(profile_dir)
    run_cpu = {k: round(cpu2[k] - cpu1[k], 2) for k in cpu2}
    return {
        "master": master, "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 1),
        "session_s": round(t1 - t0, 2), "flight_frame_s": round(t2 - t1, 2), "run_s": round(t4 - t3, 2),
        "cut_s": round(backend.metrics.cut_seconds, 2), "rows": sum(b.records for b in backend.metrics.batches),
        "batches": batches, "task_cpu_by_stage": {k: round(v, 2) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
        "task_cpu_s": round(task_cpu, 2), "task_profiles": tasks,
        "run_cpu_by_process": run_cpu,
        "run_jvm_cpu_by_thread": {k: round(thr2[k] - thr1.get(k, 0.0), 2) for k in sorted(thr2, key=lambda k: -thr2[k])},
        "setup_cpu_by_process": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu1},
        "run_cpu_share_of_capacity": round(sum(run_cpu.values()) / ((t4 - t3) * (os.cpu_count() or 1)), 3),
        "jvm_samples": jvm, "run_starts_s": round((run_ms - since_ms) / 1e3, 2), "spark_stages": stages_run,
        "tasks": task_figures(profile_dir) if not profile else [],
    }  # fmt: skip


def report(r: dict[str, Any]) -> str:
    lines = [
        f"# {r['master']}: {r['rows']:,} flights, {len(r['batches'])} micro-batch(es); {r['cpus']} CPUs, "
        f"1-min load {r['load_1min']} at the end",
        f"setup: session {r['session_s']} s, flight_frame {r['flight_frame_s']} s; run {r['run_s']} s "
        f"(of which cutting the input: {r['cut_s']} s)",
        "| batch | wall s | Spark jobs s | driver own s | commit s | output hand-over s | rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in r["batches"]:
        lines.append(f"| {b['batch']} | {b['wall_s']} | {b['jobs_s']} | {b['driver_own_s']} | {b['commit_s']} | "
                     f"{b['output_s']} | {b['rows']:,} |")  # fmt: skip
    lines += [f"tasks' Python CPU by stage ({r['task_profiles']} task profiles, {r['task_cpu_s']} s, under cProfile):"]
    lines += [f"  {k:<36} {v:>7.2f} s" for k, v in r["task_cpu_by_stage"].items()]
    lines += ["CPU seconds per process during the run (wall x CPUs = "
              f"{round(r['run_s'] * r['cpus'], 1)} s; used {r['run_cpu_share_of_capacity']:.0%}):"]  # fmt: skip
    lines += [f"  {k:<36} {v:>7.2f} s" for k, v in r["run_cpu_by_process"].items()]
    lines += ["  of which the JVM's threads by kind (threads alive at the end):"]
    lines += [f"    {k:<34} {v:>7.2f} s" for k, v in r.get("run_jvm_cpu_by_thread", {}).items()]
    if r.get("spark_stages"):
        lines += [f"Spark stages (event log; seconds from the session's start, the run starts at {r['run_starts_s']} s):",
                  "| stage | name | tasks | start s | wall s | tasks' run s | tasks' JVM CPU s | GC s | shuffle read MB | "
                  "shuffle write MB |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {s['stage']} | {s['name']} | {s['tasks']} | {s['start_s']} | {s['wall_s']} | {s['run_s']} | "
                  f"{s['cpu_s']} | {s['gc_s']} | {s['shuffle_read_mb']} | {s['shuffle_write_mb']} |" for s in r["spark_stages"]]
    if r.get("tasks"):
        lines += ["Python tasks (TSTATE_SPARK_CPU, in finishing order): kind, CPU s (GC s), wall s, waiting for input s:"]
        lines += [f"  {t['kind']:<12} cpu {t['cpu_s']:>7.2f} ({t['gc_s']:.2f})  wall {t['wall_s']:>7.2f}  "
                  f"input wait {t['input_wait_s']:>7.2f}  input read cpu {t['input_cpu_s']:>6.2f}" for t in r["tasks"]]
    if r.get("embedded_cpu_s") is not None:
        lines += [f"embedded run of the same slice (child process): CPU {r['embedded_cpu_s']} s"]
        if r.get("embedded_by_stage"):
            lines += [f"  {k:<36} {v:>7.2f} s (Spark tasks: {r['task_cpu_by_stage'].get(k, 0.0):.2f} s)"
                      for k, v in r["embedded_by_stage"].items()]
            lines += ["functions by |Spark tasks - embedded| own CPU (under cProfile):"]
            lines += [f"  {sp:>7.2f} {em:>7.2f} {sp - em:>+7.2f}  {k}" for k, sp, em in r["function_diff"]]
    jvm = r.get("jvm_samples")
    if jvm:
        lines += [f"driver JVM, executor threads' samples (JFR, setup and run: {jvm['executor_samples']} of "
                  f"{jvm['samples']}) by category:"]  # fmt: skip
        lines += [f"  {v:>6.1%}  {k}" for k, v in jvm["executor_share_by_category"].items()]
        lines += ["  hottest leaf frames:"] + [f"  {v:>6.1%}  {k}" for k, v in jvm["hottest_leaves"].items()]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_cep_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--master", default="local[2]")
    p.add_argument("--input", type=Path, default=FLIGHTS)
    p.add_argument("--limit", type=int, default=400_000)
    p.add_argument("--no-profile", action="store_true", help="no cProfile (CPU per process without its overhead)")
    p.add_argument("--rows-per-batch", type=int, default=500_000, help="Backend.run's rows_per_batch (a slice of at most "
                   "this many rows is one folded task, not the placed path)")
    p.add_argument("--jfr", metavar="FILE", help="record the driver JVM with Java Flight Recorder into FILE and "
                   "break its executor threads' samples down by category (benchmarks.jvm_profile)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the session (repeatable; e.g. spark.driver.extraJavaOptions=...)")
    p.add_argument("--timeline", action="store_true", help="Spark's stages from its event log (and, with --no-profile, "
                   "each Python task's CPU, wall and wait for input)")
    p.add_argument("--embedded", action="store_true", help="also run the embedded engine on the same slice (a child "
                   "process) and compare its CPU, by stage and function by function with the profile")
    args = p.parse_args(argv)
    conf = dict(c.split("=", 1) for c in args.conf)
    with tempfile.TemporaryDirectory() as prof:
        r = run(args.master, args.input, args.limit, prof, profile=not args.no_profile, rows_per_batch=args.rows_per_batch,
                jfr=args.jfr, conf=conf, timeline=args.timeline)
        if args.embedded:
            emb_file = os.path.join(prof, "embedded.pstats") if not args.no_profile else None
            r["embedded_cpu_s"] = round(embedded(args.input, args.limit, emb_file), 2)
            if emb_file is not None:
                by: dict[str, float] = {}
                for (filename, _l, func), (_cc, _nc, tt, _ct, _c) in pstats.Stats(emb_file).stats.items():  # type: ignore[attr-defined]
                    by[_stage(filename, func)] = by.get(_stage(filename, func), 0.0) + tt
                r["embedded_by_stage"] = {k: round(v, 2) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}
                r["function_diff"] = [(k, round(a, 2), round(b, 2)) for k, a, b in function_diff(prof, emb_file)]
    print(report(r))
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
