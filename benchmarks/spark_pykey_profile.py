"""Where the Python-key dataflow's time goes on Spark, stage by stage, beside the
embedded engine's profile of the same dataflow (issue 25, ``python_key_local2_over_embedded``).

    python -m benchmarks.spark_pykey_profile [--rows 500000] [--master local[2]]

The dataflow and rows are :mod:`benchmarks.spark_extra`'s (a Python key function, an
``int`` state per key, a per-epoch timer).  Runs:

- the embedded engine under cProfile (process CPU time), own time grouped as in
  :mod:`benchmarks.graph_spark_profile`;
- Spark ``--master`` with every ``mapInArrow`` task under cProfile in its Python worker
  (:func:`benchmarks.graph_spark_profile.install`): per task its wall and CPU seconds,
  the worker's CPU before the task (its start and imports, and earlier tasks), rows in
  and out; per task kind the grouped own time and the top functions; per micro-batch
  the wall, Spark-job and driver-own seconds; Spark's own per-stage view.

The profiler's overhead inflates small calls on both sides alike; read the shares.
Beside it, the run's CPU seconds by process (Linux ``/proc``; the driver's Python, the
driver JVM -- in ``local[N]`` also the executor's JVM -- and the Python workers), which
the profiler does not see (``--no-cprofile`` leaves the workers unprofiled, for CPU
seconds as a plain run spends them).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import tempfile
import time
from typing import Any, Optional


def embedded_profile(table: Any, top: int) -> str:
    """The embedded run of the workload under cProfile: grouped own time, top functions."""
    from benchmarks.graph_spark_profile import _group, _short
    from benchmarks.spark_extra import python_key_embedded

    prof = cProfile.Profile(time.process_time)
    t0 = time.perf_counter()
    prof.enable()
    python_key_embedded(table)
    prof.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(prof)
    total = 0.0
    groups: dict[str, float] = {}
    fns = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        total += tt
        g = _group(file, fn)
        groups[g] = groups.get(g, 0.0) + tt
        fns.append((tt, nc, ct, f"{_short(file)}:{line}({fn})"))
    lines = [f"== embedded engine: wall {wall:.2f} s (profiled), {total:.2f} s own time"]
    for g, tt in sorted(groups.items(), key=lambda kv: -kv[1]):
        lines.append(f"   {100 * tt / total:5.1f}%  {tt:6.2f} s  {g}")
    lines.append("   top functions by own time (s, calls, cumulative s):")
    for tt, nc, ct, k in sorted(fns, reverse=True)[:top]:
        lines.append(f"   {tt:6.2f} {int(nc):>9} {ct:7.2f}  {k}")
    lines.append("   top functions by cumulative time:")
    for tt, nc, ct, k in sorted(fns, key=lambda f: -f[2])[:top]:
        lines.append(f"   {ct:6.2f} {int(nc):>9} {tt:7.2f}  {k}")
    return "\n".join(lines)


def process_cpu() -> dict[str, float]:
    """CPU seconds so far of this process (``driver Python``) and of its descendants,
    by kind (``JVM``: java processes; ``Python workers``: the rest), from ``/proc``
    (empty off Linux).  Exited processes count in their waiting parent's children
    time."""
    if not os.path.isdir("/proc/self"):
        return {}
    hz = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[str, int, float]] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        end = st.rindex(")")
        fields = st[end + 2 :].split()
        procs[int(p)] = (st[st.index("(") + 1 : end], int(fields[1]), sum(int(x) for x in fields[11:15]) / hz)
    kids: dict[int, list[int]] = {}
    for pid, (_name, ppid, _cpu) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out = {"driver Python": time.process_time(), "JVM": 0.0, "Python workers": 0.0}
    stack = list(kids.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        name, _ppid, cpu = procs[pid]
        out["JVM" if "java" in name else "Python workers"] += cpu
        stack.extend(kids.get(pid, []))
    return out


def main(argv: Optional[list[str]] = None) -> None:
    from benchmarks.graph_spark_profile import install, report, spark_stages
    from benchmarks.spark_extra import python_key_flow, python_key_table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--no-cprofile", action="store_true", help="no cProfile in the workers: plain CPU seconds")
    a = ap.parse_args(argv)
    parts = int(a.master.split("[")[1].rstrip("]"))
    table = python_key_table(a.rows)
    if a.no_cprofile:
        from benchmarks.spark_extra import python_key_embedded

        c0, t0 = time.process_time(), time.perf_counter()
        python_key_embedded(table)
        print(f"== embedded engine: wall {time.perf_counter() - t0:.2f} s, CPU {time.process_time() - c0:.2f} s", flush=True)
    else:
        print(embedded_profile(table, a.top), flush=True)

    from tstate.spark import Backend, Source, local_session

    out_dir = tempfile.mkdtemp(prefix="pykey-prof-")
    directory = tempfile.mkdtemp(prefix="pykey-prof-ck-")
    if not a.no_cprofile:
        install(out_dir)
    spark = local_session(a.master, app_name="pykey_profile", **{"spark.ui.enabled": "true", "spark.ui.port": "4078"})
    try:
        df = spark.createDataFrame(table.to_pandas()).repartition(parts).cache()
        df.count()
        flow, _out = python_key_flow()
        backend = Backend(spark, checkpoint=directory, partitions=parts, progress=False)
        tracker = spark.sparkContext.statusTracker()
        jobs0 = len(tracker.getJobIdsForGroup(None))
        cpu0 = process_cpu()
        t0 = time.perf_counter()
        backend.run(flow, {"events": Source(df, time="t")})
        run_s = time.perf_counter() - t0
        cpu = {k: v - cpu0.get(k, 0.0) for k, v in process_cpu().items()}
        jobs = len(tracker.getJobIdsForGroup(None)) - jobs0
        stages_txt = spark_stages(spark)
    finally:
        spark.stop()
        shutil.rmtree(directory, ignore_errors=True)
    buf = io.StringIO()
    m = backend.metrics
    print(f"\n== Spark {a.master}, {parts} partition(s), {a.rows} rows: run {run_s:.2f} s (profiled), {jobs} Spark jobs, "
          f"cut {m.cut_seconds:.2f} s", file=buf)
    print("run CPU s by process: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()), file=buf)
    print("batch  frontier  wall s  jobs s  driver-own s  commit s  stages  records", file=buf)
    for b in m.batches:
        print(
            f"{b.batch:>5}  {str(b.frontier):>8}  {b.seconds:6.2f}  {b.job_seconds:6.2f}  "
            f"{b.seconds - b.job_seconds:12.2f}  {b.commit_seconds:8.2f}  {b.stages:6}  {b.records:7}",
            file=buf,
        )
    print(buf.getvalue() + stages_txt + ("" if a.no_cprofile else report(out_dir, a.top)))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.environ.pop("TSTATE_SPARK_PROFILE", None)


if __name__ == "__main__":
    main()
