"""The driver side of a small Spark run, phase by phase: where the fixed cost goes.

    python -m benchmarks.graph_driver_profile                       # the sample, local[2]
    python -m benchmarks.graph_driver_profile --master 'local[1]' --runs 3
    python -m benchmarks.graph_driver_profile --cprofile /tmp/driver.prof
    python -m benchmarks.graph_driver_profile --graph powerlaw --runs 1 --no-floor   # the 200k-vertex graph

Runs the graph sample (:mod:`benchmarks.graph_spark`'s dataflow and frame) ``--runs``
times in one fresh SparkSession (run 0 pays the session's first queries: the JVM's
class loading and code generation; later runs show what every run pays), each in a
fresh checkpoint directory, and reports per run a timeline of the driver's phases
(:data:`PHASES`: the functions of :mod:`tstate.spark` wrapped for the run, nothing
else changed): start and end seconds from the run's start, wall seconds, and the CPU
seconds spent meanwhile by the driver's Python process (``py``), the JVM (``jvm``: the
driver's planning and, on ``local[N]``, the executors' threads) and the Python workers
(``workers``).  CPU seconds hold under load where wall seconds do not (a loaded machine
stretches the wall clock, not the work); a phase's JVM CPU is its planning and the jobs'
JVM work, the workers' its Python tasks.

Then, on the same (warm) session, Spark's own per-job floor: a job of one empty
``mapInArrow`` task over ``range`` (what any Python stage costs at least), a JVM-only
aggregate (what a cut costs at least), and ``persist`` + the first aggregate of a fresh
frame of the sample (what caching the input costs).  The last line is JSON.

``--ab N``: instead, before and after in the same session, alternating, ``N`` runs
each (after one unmeasured run: the session's first): with ``--change fold`` (the
default) "before" cuts the run with its counting job as every run was cut until
tstate.spark.folded folded a one-batch run into its batch; with ``--change uncached``
"before" caches the input frame as every input was cached until tstate.spark.cuts left
small local relations uncached.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Optional

#: (module, owner attribute or "", function, label): the phases wrapped (module docstring)
PHASES = [
    ("tstate.spark.backend", "Backend", "_prepare", "prepare (plan, bind, resume, sinks)"),
    ("tstate.spark.warm", "", "warm_workers", "start the warm-up job (thread)"),
    ("tstate.spark.placed", "", "place", "place (colocated inputs)"),
    ("tstate.spark.cuts", "", "cut_run", "cut (persist + span)"),
    ("tstate.spark.cuts", "", "span", "  span job (epochs counted)"),
    ("tstate.spark.local_batch", "", "fits", "  local batch? (size estimate, state)"),
    ("tstate.spark.stages", "Stages", "_collect", "  batch job(s) (collected as Arrow)"),
    ("tstate.spark.batch", "MicroBatch", "reduce_rows", "  reduce rows"),
    ("tstate.spark.batch", "MicroBatch", "output", "  output index"),
    ("tstate.spark.batch", "MicroBatch", "manifest", "  manifest"),
    ("tstate.spark.batch", "", "commit", "  commit"),
    ("tstate.spark.batch", "MicroBatch", "run", "micro-batch up to its commit"),
    ("tstate.spark.batch", "MicroBatch", "finish", "micro-batch: sinks & metrics"),
    ("tstate.spark.delivery", "Delivery", "finish", "delivery finish (last output to sinks)"),
]

from benchmarks.clocks import Clocks


class Timeline:
    """The phases of :data:`PHASES` wrapped while the timeline is open; ``log``: per
    call (label, thread, clocks at start, clocks at end)."""

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks
        self.log: list[tuple[str, str, tuple[float, ...], tuple[float, ...]]] = []
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "Timeline":
        import importlib

        for mod, owner, name, label in PHASES:
            m = importlib.import_module(mod)
            obj = getattr(m, owner) if owner else m
            f = obj.__dict__[name] if owner else getattr(m, name)
            setattr(obj, name, self._wrapped(f, label))
            self._undo.append(functools.partial(setattr, obj, name, f))
        return self

    def __exit__(self, *exc: Any) -> None:
        for u in reversed(self._undo):
            u()

    def _wrapped(self, f: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(f)
        def w(*a: Any, **k: Any) -> Any:
            c0 = self.clocks.now()
            try:
                return f(*a, **k)
            finally:
                self.log.append((label, threading.current_thread().name, c0, self.clocks.now()))

        return w

    def report(self, t0: tuple[float, ...]) -> list[str]:
        lines = ["   start     end    wall  py-cpu  jvm-cpu  workers-cpu  phase"]
        for label, thread, a, b in sorted(self.log, key=lambda e: e[2][0]):
            th = "" if thread == "MainThread" else f" [{thread}]"
            lines.append(
                f"  {a[0] - t0[0]:6.2f}  {b[0] - t0[0]:6.2f}  {b[0] - a[0]:6.2f}  {b[1] - a[1]:6.2f}  "
                f"{b[2] - a[2]:7.2f}  {b[3] - a[3]:11.2f}  {label}{th}"
            )
        return lines


def _empty(batches: Iterable[Any]) -> Iterator[Any]:
    for _ in batches:
        pass
    return iter(())


def floor(spark: Any, clocks: Clocks, frame: Callable[[], Any], reps: int = 3) -> dict[str, list[tuple[float, ...]]]:
    """Spark's own per-job floor on ``spark`` (module docstring): per probe, ``reps``
    (wall, py, jvm, workers) seconds."""
    from pyspark.sql import functions as F

    def persisted_agg() -> None:
        df = frame().persist()
        df.agg(F.min("epoch"), F.max("epoch")).collect()
        df.unpersist()

    probes = {
        "empty mapInArrow job (range, 1 task)": lambda: spark.range(0, 1, 1, 1).mapInArrow(_empty, "id long").collect(),
        "JVM-only min/max of the sample frame": lambda: frame().agg(F.min("epoch"), F.max("epoch")).collect(),
        "persist + min/max of the sample frame": persisted_agg,
        "empty mapInArrow over the sample frame, coalesce(1), toArrow": (
            lambda: frame().coalesce(1).mapInArrow(_empty, "id long").toArrow()
        ),
    }
    out: dict[str, list[tuple[float, ...]]] = {}
    for name, probe in probes.items():
        for _ in range(reps):
            a = clocks.now()
            probe()
            b = clocks.now()
            out.setdefault(name, []).append(tuple(y - x for x, y in zip(a, b)))
    return out


def ab(spark: Any, clocks: Clocks, one_run: Callable[[], None], pairs: int, change: str = "fold") -> dict[str, list[list[float]]]:
    """``pairs`` runs before and after ``change`` (module docstring), alternating; per
    variant the (wall, py, jvm, workers) seconds of each."""
    from unittest import mock

    from tstate.spark import backend, cuts

    out: dict[str, list[list[float]]] = {"before": [], "after": []}
    undo = (
        mock.patch.object(backend, "foldable", lambda *a, **k: None) if change == "fold"
        else mock.patch.object(cuts, "is_small_local", lambda df: False)
    )  # fmt: skip
    for _ in range(pairs):
        for variant in ("before", "after"):
            patch = undo if variant == "before" else None
            if patch is not None:
                patch.start()
            try:
                a = clocks.now()
                one_run()
                b = clocks.now()
            finally:
                if patch is not None:
                    patch.stop()
            out[variant].append([y - x for x, y in zip(a, b)])
    return out


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=2, help="runs in the one session (run 0: the session's first)")
    ap.add_argument("--cprofile", default=None, help="write run 0's driver cProfile here")
    ap.add_argument("--no-floor", action="store_true", help="skip the per-job floor probes")
    ap.add_argument("--ab", type=int, default=0, help="instead: N before/after pairs (module docstring)")
    ap.add_argument("--change", choices=["fold", "uncached"], default="fold", help="what --ab compares")
    ap.add_argument("--graph", default="sample", choices=["sample", "powerlaw"], help="the input (default: the sample)")
    ap.add_argument("--vertices", type=int, default=200_000, help="vertices of the power-law graph")
    a = ap.parse_args(argv)

    from benchmarks.graph_spark import powerlaw, sample, spark_flow
    from tstate.spark import Backend, Source, local_session

    w = sample() if a.graph == "sample" else powerlaw(a.vertices, 5, 0.01)
    parts = int(a.master.split("[")[1].rstrip("]"))
    t = time.perf_counter()
    spark = local_session(a.master, app_name="graph_driver_profile")
    session_s = time.perf_counter() - t
    clocks = Clocks(int(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid()))
    figures: dict[str, Any] = {"master": a.master, "session_s": round(session_s, 2), "runs": []}
    print(f"{w.name} on {a.master}: session started in {session_s:.2f} s (load {os.getloadavg()[0]:.1f})")

    def setup() -> tuple[Any, Any, str, Any]:
        directory = tempfile.mkdtemp(prefix="graph-driver-prof-")
        flow, _sinks = spark_flow(w)
        return flow, w.frame(spark, staging=f"{directory}-input"), directory, Backend(spark, checkpoint=directory, partitions=parts, progress=False)

    def one_run() -> None:
        flow, df, directory, backend = setup()
        backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=w.per_batch)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(f"{directory}-input", ignore_errors=True)

    try:
        if a.ab:
            one_run()  # (the session's first run: not measured)
            res = ab(spark, clocks, one_run, a.ab, a.change)
            print(f"\nbefore/after, alternating, {a.ab} runs each (load {os.getloadavg()[0]:.1f}): mean seconds")
            for variant, rs in res.items():
                n = len(rs)
                mean = [sum(r[k] for r in rs) / n for k in range(4)]
                print(f"  {variant:6}: wall {mean[0]:.3f}  CPU: driver Python {mean[1]:.3f}, JVM {mean[2]:.3f}, "
                      f"workers {mean[3]:.3f}, all {sum(mean[1:]):.3f}")  # fmt: skip
                figures[f"ab_{variant}"] = [round(x, 3) for x in mean]
            print(json.dumps(figures, sort_keys=True))
            return
        for i in range(a.runs):
            flow, df, directory, backend = setup()
            prof = cProfile.Profile() if (a.cprofile and i == 0) else None
            with Timeline(clocks) as tl:
                t0 = clocks.now()
                if prof is not None:
                    prof.enable()
                backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=w.per_batch)
                if prof is not None:
                    prof.disable()
                t1 = clocks.now()
            shutil.rmtree(directory, ignore_errors=True)
            shutil.rmtree(f"{directory}-input", ignore_errors=True)
            if prof is not None:
                prof.dump_stats(a.cprofile)
            total = [y - x for x, y in zip(t0, t1)]
            print(f"\n== run {i}: wall {total[0]:.2f} s; CPU s: driver Python {total[1]:.2f}, JVM {total[2]:.2f}, "
                  f"Python workers {total[3]:.2f}; {len(backend.metrics.batches)} micro-batch(es) (load {os.getloadavg()[0]:.1f})")  # fmt: skip
            print("\n".join(tl.report(t0)))
            figures["runs"].append({"wall": round(total[0], 2), "py": round(total[1], 2), "jvm": round(total[2], 2),
                                    "workers": round(total[3], 2)})  # fmt: skip
        if not a.no_floor:
            fl = floor(spark, clocks, lambda: w.frame(spark))
            print("\nSpark's own per-job floor on this (warm) session: wall / driver-py / JVM / workers CPU s, per repetition")
            for name, reps in fl.items():
                print(f"  {name}: " + "; ".join("/".join(f"{x:.2f}" for x in r) for r in reps))
            figures["floor"] = {name: [round(r[0], 3) for r in reps] for name, reps in fl.items()}
    finally:
        spark.stop()
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
