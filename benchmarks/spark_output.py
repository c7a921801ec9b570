"""Driver memory as the output grows: sink output written by the executors vs fed to
the driver.  ``python -m benchmarks.spark_output [--rows N]``

``python -m benchmarks.spark_output --handover CHECKPOINT`` replays the epoch files of the
last committed batch of a Spark run's checkpoint (``apps.cep --backend spark --output DIR
--checkpoint CHECKPOINT``) in this process, one :meth:`~tstate.io.sinks.FileSink.commit_epochs`
per sink as a :func:`~tstate.spark.output.finalise` task runs it, into a temporary
directory, and prints where the hand-over's work goes: wall and CPU seconds of reading
the parts, decoding the records, encoding and writing the lines, the durability barrier
and the renames.

``python -m benchmarks.spark_output --cep [apps.cep arguments]`` instead profiles the
micro-batches of the CEP app on Spark (default: 300,000 flights with ``--output``): per
batch its wall seconds, the Spark jobs it ran, the seconds the driver waited on them,
its own seconds and the output hand-over's, then per driver step (the
:class:`~tstate.spark.batch.MicroBatch` stages, the output's ``finalise``, the commit)
the seconds and jobs summed over the batches.  Its JSON line holds ``jobs_per_batch``,
``driver_share`` and ``output_handover_share`` (of the run's seconds).

One dataflow (a keyed count emitting one record per input row, 4 epochs, 2 partitions on
``local[2]``) runs with N and 10 N rows, each in a fresh process, with its output going

- ``executors``: to ``ts.io.keep()`` (written by the tasks, read back by
  ``backend.output(op).count()`` on the executors), or
- ``driver``: to ``stream.collect()`` (delivered to an in-memory sink on the driver,
  which is what every sink did before ``tstate.spark.output``).

The table shows the driver's peak RSS (the Python process: Spark's workers are other
processes) and the output records; the JSON line holds the RSS growth 1x -> 10x of each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from typing import Any


def child(mode: str, rows: int) -> None:
    import tstate as ts
    from tstate.spark import Backend, Source, local_session

    spark = local_session("local[2]", app_name="bench-output", **{"spark.driver.memory": "2g"})
    flow = ts.Dataflow("grow")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=int, bins=32)
    def count(c: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], r["v"], c + 1, "x" * 40))
        return c + 1

    sink = count.sink(ts.io.keep(), name="kept") if mode == "executors" else count.collect()
    df = spark.range(rows).selectExpr("concat('k', cast(id % 1000 as string)) as k", "id as v", f"id * 4 div {rows} as t")
    with tempfile.TemporaryDirectory() as d:
        backend = Backend(spark, checkpoint=d, partitions=2, progress=False)
        backend.run(flow, {"events": Source(df, time="t")})
        out = backend.output(count).count() if mode == "executors" else len(sink)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "rows": rows, "out": out, "rss": rss}))
    spark.stop()


#: the driver steps the CEP profile times (of MicroBatch or Stages; those a version does
#: not have are skipped)
STEPS = (
    "input_frames", "colocated_stage", "held_rows", "input_rows", "loops", "boundary_stage", "reduce_rows", "output",
    "manifest", "sinks", "finish",
)


def cep_profile(cep_args: list[str]) -> None:
    """Run ``python -m apps.cep --backend spark`` in this process with the driver's steps
    timed and the Spark jobs counted per batch (module docstring)."""
    import time

    import tstate.spark.backend as backend_mod
    import tstate.spark.batch as batch_mod
    import tstate.spark.delivery as delivery_mod
    import tstate.spark.stages as stages_mod
    import tstate.spark.output as output_mod
    from apps.cep.__main__ import main as cep_main

    log: list[dict] = []
    now: list[dict[str, list[float]]] = [{}]  # the steps of the batch under way (the last one's hand-over too)

    def jobs() -> int:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        ids = sc.statusTracker().getJobIdsForGroup(None) if sc is not None else []
        return max(ids) + 1 if ids else 0

    def timed(fn, label):
        def run(*a, **k):
            j0, t0 = jobs(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                d = now[0].setdefault(label, [0.0, 0])
                d[0] += time.perf_counter() - t0
                d[1] += jobs() - j0

        return run

    for name in STEPS:
        for cls in (batch_mod.MicroBatch, stages_mod.Stages):  # (the stages moved to tstate.spark.stages)
            if name in vars(cls):
                setattr(cls, name, timed(getattr(cls, name), name))
    # the Spark jobs inside the steps (a step's own seconds: its seconds less these)
    stages_mod.Stages.run = timed(stages_mod.Stages.run, "stages (all: planning, jobs)")
    stages_mod.Stages._collect = timed(stages_mod.Stages._collect, "  spark job (collect rows)")
    stages_mod.local_batch.run_local = timed(stages_mod.local_batch.run_local, "  one-task batch (run_local)")
    for mod in (batch_mod, backend_mod):
        for name in ("finalise", "commit", "records_of", "clean", "write_index"):
            if hasattr(mod, name) and (mod is batch_mod or name == "finalise"):
                setattr(mod, name, timed(getattr(mod, name), f"  {name}"))
    if hasattr(output_mod, "HandOver"):
        for name in ("deliver", "wait"):
            setattr(output_mod.HandOver, name, timed(getattr(output_mod.HandOver, name), f"  hand-over {name}"))
    wait = timed(delivery_mod.Delivery.wait, "  delivery wait")

    def _wait(self):  # (the part of the wait inside the hand-over's Spark job: Waited.job_seconds)
        got = wait(self)
        d = now[0].setdefault("  delivery wait: in its Spark job", [0.0, 0])
        d[0] += getattr(got, "job_seconds", 0.0)
        return got

    delivery_mod.Delivery.wait = _wait
    one = backend_mod.Backend._batch

    def _batch(self, *a, **k):
        now[0] = {}
        j0, t0 = jobs(), time.perf_counter()
        one(self, *a, **k)
        m = self.metrics.batches[-1]
        log.append({
            "batch": m.batch, "wall": time.perf_counter() - t0, "jobs": jobs() - j0, "waited": m.job_seconds,
            "own": m.driver_own_seconds, "handover": m.output_seconds, "seconds": m.seconds,
            "steps": now[0],
        })  # fmt: skip

    backend_mod.Backend._batch = _batch
    cut = backend_mod.Backend._cut

    def _cut(self, *a, **k):
        j0, t0 = jobs(), time.perf_counter()
        try:
            return cut(self, *a, **k)
        finally:
            log.append({"cut": time.perf_counter() - t0, "jobs": jobs() - j0})

    backend_mod.Backend._cut = _cut
    finals: list = []  # the run's BatchMetrics after the last hand-over (Delivery.finish)
    finish = delivery_mod.Delivery.finish

    def _finish(self, metrics):
        finish(self, metrics)
        finals[:] = list(metrics.batches)

    delivery_mod.Delivery.finish = _finish
    args = cep_args or ["--input", "/work/shared/data/flights-3m.parquet", "--limit", "300000"]
    import tempfile

    if "--output" not in args:
        args = [*args, "--output", tempfile.mkdtemp(prefix="cep-out-")]
    stats = os.path.join(tempfile.mkdtemp(prefix="cep-stats-"), "stats.json")
    t0 = time.perf_counter()
    cep_main(["--backend", "spark", "--no-progress", "--stats", stats, *args])
    run_s = time.perf_counter() - t0
    with open(stats) as f:
        st = json.load(f)
    _cep_report(log, finals, st, run_s)


def _cep_report(log: list[dict], finals: list[Any], st: dict[str, Any], run_s: float) -> None:
    """The CEP profile's tables and JSON line (:func:`cep_profile`): ``log`` its batches'
    and cut's entries, ``finals`` the run's BatchMetrics, ``st`` the app's ``--stats``."""
    import collections

    batches = [e for e in log if "batch" in e]
    for e, m in zip(batches, finals):  # (the last batch's hand-over is added after it: Delivery.finish)
        e.update(wall=e["wall"] + m.seconds - e["seconds"], waited=m.job_seconds, own=m.driver_own_seconds,
                 handover=m.output_seconds)  # fmt: skip
    print(f"{'batch':>5} {'wall s':>8} {'jobs':>5} {'waited s':>9} {'own s':>7} {'hand-over s':>12}")
    for e in batches:
        print(f"{e['batch']:>5} {e['wall']:>8.2f} {e['jobs']:>5} {e['waited']:>9.2f} {e['own']:>7.2f} {e['handover']:>12.2f}")
    for e in log:
        if "cut" in e:
            print(f"cut into batches: {e['cut']:.2f} s, {e['jobs']} Spark jobs")
    tot: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for e in batches:
        for k, (sec, n) in e["steps"].items():
            tot[k][0] += sec
            tot[k][1] += n
    for e in batches:  # the per-batch split of the driver's own time (the steps outside Spark jobs)
        print(f"batch {e['batch']} steps: " + ", ".join(f"{k.strip()} {sec:.2f} s/{int(n)} jobs" for k, (sec, n) in e["steps"].items()))
    print(f"{'driver step (all batches)':<28} {'s':>8} {'jobs':>5}")
    for k, (sec, n) in tot.items():
        print(f"{k:<28} {sec:>8.2f} {int(n):>5}")
    wall = sum(e["wall"] for e in batches)
    print(json.dumps({
        "batches": len(batches), "jobs_per_batch": round(sum(e["jobs"] for e in batches) / max(1, len(batches)), 2),
        "run_s": round(run_s, 2), "batches_s": round(wall, 2),
        "driver_share": round(sum(e["own"] for e in batches) / wall, 4) if wall else 0.0,
        "output_handover_share": round(sum(e["handover"] for e in batches) / wall, 4) if wall else 0.0,
        # as benchmarks.spark_apps reports them: of the app's run seconds (its cut included)
        "app_seconds": st["seconds"], "app_driver_share": st["driver_share"], "app_output_share": st["output_share"],
        "cpu_s": round(_cpu(), 2),
    }))  # fmt: skip


def _cpu() -> float:
    """CPU seconds of this process and its finished children (Spark's JVM and workers
    run until the session stops: the app stops it)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


#: the hand-over's stages (handover_profile): the functions whose own time makes each
HANDOVER_STAGES = {
    "read parts": ("read_bytes", "open_file", "read_all", "xxh64", "as_py", "to_pylist", "_digest", "part_cells"),
    "decode records": ("decode_records", "unpackb", "_decode"),
    "encode + write lines": ("dumps", "encode", "iterencode", "write", "sorted_lines", "<genexpr>", "open", "records"),
    "durability barrier": ("_durable", "syncfs", "fsync", "_syncfs"),
    "renames + dir sync": ("replace", "_sync_dir"),
}


def handover_profile(directory: str) -> None:
    """The hand-over of the last committed batch of checkpoint ``directory``, replayed
    in this process (module docstring)."""
    import cProfile
    import pstats
    import shutil
    import tempfile
    import time

    import tstate as ts
    from tstate.errors import RecordClassError
    from tstate.spark import binstore
    from tstate.spark.output import part_cells, read_index
    from tstate.spark.record_types import BUILTIN
    from tstate.spark.records import decode_records

    store = binstore.store(directory)
    head = store.head
    index = head.meta["spark"]["output"] if head is not None else None
    if index is None:
        raise SystemExit(f"{directory}: no committed output")
    batch, _prev, parts = read_index(store.fs, index)
    out = tempfile.mkdtemp(prefix="handover-")
    walls = {k: 0.0 for k in [*HANDOVER_STAGES, "other"]}
    others: dict[str, float] = {}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    files, skipped = 0, []
    try:
        for node in sorted({p.sink for p in parts}):
            mine = [p for p in parts if p.sink == node]
            run = sorted({t for p in mine for t, _n in p.times})
            sink = ts.io.files(os.path.join(out, str(node)))

            cells: dict[int, list[tuple[str, bytes]]] = {}

            def records(t: int) -> Any:  # (as finalise's task: decoded as the sink takes them)
                for path, cell in cells.pop(t, ()):
                    yield from decode_records(cell, BUILTIN, path)

            prof = cProfile.Profile(time.perf_counter)
            prof.enable()
            try:
                for p in mine:  # (as finalise's task: each part read once, the run's cells)
                    for t, cell in part_cells(store.fs, p):
                        cells.setdefault(t, []).append((p.path, cell))
                files += sink.commit_epochs((t, records(t)) for t in run)
            except RecordClassError:  # a driver sink's records (classes this replay does not import)
                skipped.append(node)
                continue
            finally:
                prof.disable()
            st = pstats.Stats(prof)
            for (_file, _line, fn), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
                stage = next((k for k, names in HANDOVER_STAGES.items() if any(n in fn for n in names)), "other")
                walls[stage] += tt
                if stage == "other":
                    others[fn] = others.get(fn, 0.0) + tt
    finally:
        shutil.rmtree(out, ignore_errors=True)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(f"batch {batch}: {len(parts)} parts, {files} epoch files, {wall:.2f} s wall, {cpu:.2f} CPU s (profiled)"
          f"{f'; sinks {skipped} skipped (records of classes not imported here: driver sinks)' if skipped else ''}")
    for stage, sec in walls.items():
        print(f"  {stage:<24} {sec:7.2f} s wall ({sec / wall:.0%})")
    print("  other, the largest: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(others.items(), key=lambda kv: -kv[1])[:6]))
    print(json.dumps({"files": files, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                      **{k.replace(" ", "_"): round(v, 3) for k, v in walls.items()}}))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--cep":
        cep_profile(argv[1:])
        return
    if argv and argv[0] == "--handover":
        handover_profile(argv[1])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = {}
    for mode in ("executors", "driver"):
        for rows in (args.rows, 10 * args.rows):
            r = subprocess.run(
                [sys.executable, "-m", "benchmarks.spark_output", "--child", mode, str(rows)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            res[mode, rows] = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"{'output to':<10} {'rows':>10} {'output records':>15} {'driver peak RSS':>16}")
    for (mode, rows), r in res.items():
        print(f"{mode:<10} {rows:>10,} {r['out']:>15,} {r['rss'] / 2**20:>13.0f} MB")
    growth = {
        f"{mode}_rss_10x_over_1x": round(res[mode, 10 * args.rows]["rss"] / res[mode, args.rows]["rss"], 2)
        for mode in ("executors", "driver")
    }
    print(json.dumps(growth))


if __name__ == "__main__":
    main()
