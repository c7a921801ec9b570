"""Rescaling on Spark (issue 6): a live rescale 2 -> 4 partitions, and a rescale at a restart.

The workload is spark_keyed_count's: ``--files`` parquet files (default 20) of
``--rows-per-file`` rows (default 50k) over ``--keys`` string keys (default 10k), read by a
streaming file source with ``maxFilesPerTrigger=1`` and ``availableNow`` (one micro-batch
per file); a ``fold_bins`` count (256 bins) emitting the updated ``(key, count)`` of the
keys touched in each batch; local[2], RocksDB state store with changelog checkpointing
for Spark's own query.

1. **Live rescale** (tstate): four runs side by side, all starting on 2 partitions —
   ``none`` (control), ``all-at-once``, ``fluid`` (``steps`` batches) and ``precopy``
   (the executors prefetch the moving bins during batch ``at + 1``, the bins move at
   ``at + 2``).  The sink calls
   ``backend.rescale(4, strategy)`` on the driver while delivering batch ``--at`` (default
   5), so the bins move from batch ``at + 1`` on.  Per batch: ``BatchMetrics.seconds``,
   moved bins, executor cache hits / catch-ups / misses.  Table: median before (batches
   1..at; batch 0 is the cold start), median and max during the move (the batches that
   moved bins; for the control run, the fluid window), median after.  Plot: per-batch
   seconds over the batch id for the three runs.
2. **Restart-time rescale**: the query runs over the first ``--restart-files`` files
   (default 12) on 2 partitions and stops; the SparkSession is stopped and a new one
   started (fresh executors: no cached state anywhere, the JVM stays warm; the new
   session gets an untimed tstate and native warm-up on other directories); then
   ``--after-files`` more files (default 3) arrive and the query restarts:
   * tstate: a new ``Backend`` on the same checkpoint with ``partitions=4`` (rescale at
     restart) or ``partitions=2`` (plain restart).  Its first batch reads every bin from
     the store on its (new) owner.
   * Spark: native ``groupBy("key").count()`` with ``shuffle.partitions=2``; restarted as
     is, or after the offline ``StreamingCheckpointManager.repartition(ckpt, 4)``
     (experimental, pyspark >= 4.2; timed on its own).
   First batch = the restarted query's first ``batchDuration`` (query progress; for
   tstate also ``BatchMetrics.seconds``); start -> first output = from starting the
   query (tstate: constructing the Backend) to the first batch's output in the sink.

3. **The hand-over at low churn** (all-at-once, the current strategy, beside precopy and
   a control run), on a per-key ``stateful`` count (its deltas hold only the changed
   keys; ``fold_bins`` rewrites a whole bin): ``--handover-keys`` keys (default 200k) in state from the first
   file, then ``--handover-files - 1`` files touching ``--churn`` of the keys each
   (default 1%); ``rescale(4, strategy)`` in batch ``--handover-at``.  Per strategy:
   steady batch median, the lead and hand-over batches' seconds, the worst of them over
   the steady median, and the bytes the new owners read for the moved bins at the
   hand-over (``BatchMetrics.handover_bytes``: whole chains for all-at-once, only the
   files since the prefetch for precopy) and the seconds its tasks spent taking bins
   (``BatchMetrics.take_seconds``), with prefetched bins / fallbacks.  The last
   line is JSON: ``spark_precopy_handover_bytes_ratio`` (precopy's hand-over bytes over
   all-at-once's) and ``spark_precopy_max_over_steady`` (with the same for all-at-once
   and the control run).

Every run is checked: final counts equal the plain-Python count over the same files,
the emitted rows equal the keys touched per batch, and the operator's state (tstate:
``backend.state``; Spark: ``numRowsTotal``) holds every key, so a broken run cannot look
fast.  Moved bins are checked against the planner's minimal move.

    python -m benchmarks.spark_rescale [--files 20] [--rows-per-file 50000] [--keys 10000]
        [--at 5] [--steps 4] [--restart-files 12] [--after-files 3] [--repeat 2]
        [--restart-repeat 3] [--handover-files 12] [--handover-keys 200000] [--churn 0.01]
        [--handover-at 5] [--only live,restart,handover] [--quick]

Writes benchmarks/results/spark_rescale.txt and .png (not with --quick).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from benchmarks.common import table
from benchmarks.spark_common import (
    Collector,
    TempDirs,
    batch_durations,
    check,
    default_data_dir,
    generate,
    median,
    run_query,
    spark_session,
    stream_source,
)

FROM, TO = 2, 4
STRATEGIES = ["none", "all-at-once", "fluid", "precopy"]
#: part 3 (the hand-over at low churn): the current strategy beside pre-copy
HANDOVER = ["none", "all-at-once", "precopy"]


# ---------------------------------------------------------------- reference + helpers


def reference(paths: list[str]) -> tuple[list[dict[str, int]], list[int]]:
    """Plain Python over the files: the counts after each file, and the keys touched per file."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    after, touched = [], []
    for p in paths:
        keys = pq.read_table(p, columns=["key"]).column("key").to_pylist()
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        touched.append(len(set(keys)))
        after.append(dict(counts))
    return after, touched


def link_files(paths: list[str], into: str) -> None:
    """Hard links (same mtimes, so the file source reads them in name order)."""
    os.makedirs(into, exist_ok=True)
    for p in paths:
        dst = os.path.join(into, os.path.basename(p))
        if os.path.exists(dst):
            continue
        try:
            os.link(p, dst)
        except OSError:
            shutil.copy2(p, dst)


def _get(p: Any, name: str, default: Any = None) -> Any:
    return p.get(name, default) if isinstance(p, dict) else getattr(p, name, default)


def state_ops(query: Any) -> Any:
    """The last input-reading progress report's first state operator (or None)."""
    for p in reversed(getattr(query, "recentProgress", None) or []):
        ops = _get(p, "stateOperators") or []
        if ops:
            return ops[0]
    return None


def short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if "terminated with exception:" in msg:
        msg = msg.split("terminated with exception:", 1)[1].strip()
    return f"{type(e).__name__}: {msg}"


def f2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# ---------------------------------------------------------------- tstate


def build_flow(sink: Any, fold: bool = True) -> tuple[Any, Any]:
    """The keyed count: a ``fold_bins`` over each bin's records (which rewrites a whole
    bin when it changes), or (``fold=False``) a per-key ``stateful`` emitting the count
    per record (a bin's delta holds only its changed keys)."""
    import tstate as ts

    flow = ts.Dataflow("keyed-count")
    events = flow.input("events")
    if not fold:
        @flow.stateful(events, key=lambda r: r["key"], state=int)
        def counted(n: int, r: dict, ctx: Any) -> int:
            ctx.emit((r["key"], n + 1))
            return n + 1

        counted.sink(sink)
        return flow, counted

    @flow.fold_bins(events, key=lambda r: r["key"], state=int)
    def count(states: dict, records: Any, ctx: Any) -> None:
        touched: dict[str, None] = {}
        for r in records:
            k = r["key"]
            states[k] = states.get(k, 0) + 1
            touched[k] = None
        for k in touched:
            ctx.emit((k, states[k]))

    count.sink(sink)
    return flow, count


def bench_sink(out: Collector, hook: Callable[[int], None] | None = None) -> Any:
    """A sink feeding the emitted pairs to ``out``; after a batch's records (its frontier
    callback, on the driver, before the batch commits) calls ``hook(batch time)`` — the
    batch id here (micro-batch ``b`` is epoch ``b``)."""
    from tstate.io.sinks import Sink

    class BenchSink(Sink):
        def __init__(self) -> None:
            self.last: int | None = None
            self.first_output: float | None = None

        def write(self, worker: int, t: Any, records: list[Any]) -> None:
            out.add_pairs(records)
            self.last = t

        def frontier(self, worker: int, frontier: Any) -> None:
            if self.last is None:
                return
            if self.first_output is None:
                self.first_output = time.perf_counter()
            b, self.last = self.last, None
            if hook is not None:
                hook(b)

    return BenchSink()


def tstate_state(backend: Any, op: Any) -> dict[str, int]:
    return {r[0]: r[1] for r in backend.state(op).frame.collect()}


def run_tstate(
    spark: Any, source_dir: str, ckpt: str, partitions: int, out: Collector,
    hook: Callable[[Any, int], None] | None = None, fold: bool = True,
) -> dict[str, Any]:
    """One availableNow run of the tstate query; ``hook(backend, batch)`` after each batch's sink."""
    from tstate.spark import Backend

    t0 = time.perf_counter()
    backend = Backend(spark, checkpoint=ckpt, partitions=partitions)
    sink = bench_sink(out, (lambda b: hook(backend, b)) if hook else None)
    flow, op = build_flow(sink, fold)
    q = backend.start(flow, {"events": stream_source(spark, source_dir)}, trigger={"availableNow": True}).query
    q.awaitTermination()
    total = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    return {
        "total": total, "batches": list(backend.metrics.batches), "progress": batch_durations(q),
        "first_output": (sink.first_output - t0) if sink.first_output else None,
        "state": tstate_state(backend, op), "backend": backend,
    }


# ---------------------------------------------------------------- part 1: live rescale


def expected_moves(bins: int) -> int:
    from tstate.migration.planner import balanced_map, rescale_map

    cur = balanced_map(bins, FROM)
    return sum(a != b for a, b in zip(cur, rescale_map(cur, TO)))


def live_run(spark: Any, data_dir: str, ckpt: str, strategy: str, at: int, steps: int,
             ref: dict[str, int], touched: int, rows: int, files: int, moves: int, fold: bool = True) -> dict[str, Any]:
    out = Collector()
    fired: list[int] = []

    def hook(backend: Any, b: int) -> None:
        if strategy != "none" and b == at and not fired:
            fired.append(backend.rescale(TO, strategy, steps=steps).steps)

    r = run_tstate(spark, data_dir, ckpt, FROM, out, hook, fold)
    bm = r["batches"]
    status = check(strategy, out, ref, touched, rows)
    problems = [] if status == "ok" else [status]
    if r["state"] != ref:
        problems.append(f"backend.state differs from the baseline ({len(r['state']):,} keys)")
    if len(bm) != files:
        problems.append(f"{len(bm)} batches, expected {files}")
    moved = sum(b.moved_bins for b in bm)
    want_moved, want_parts = (0, FROM) if strategy == "none" else (moves, TO)
    if moved != want_moved:
        problems.append(f"moved {moved} bins, expected {want_moved}")
    if bm and bm[-1].partitions != want_parts:
        problems.append(f"ended on {bm[-1].partitions} partitions, expected {want_parts}")
    r["status"] = "ok" if not problems else "; ".join(problems)
    r["strategy"] = strategy
    return r


def phases(bm: list[Any], strategy: str, at: int, steps: int) -> tuple[list[Any], list[Any], list[Any]]:
    """(before, during, after) batches: before = 1..at (0 is the cold start); during =
    the batches that moved bins or prefetched them (precopy: the lead batch and the
    hand-over; control: the fluid window at+1..at+steps)."""
    ids = [b.batch for b in bm]
    if strategy == "none":
        window = set(range(at + 1, at + 1 + steps))
    else:
        window = {b.batch for b in bm if b.moved_bins or b.prefetch_bins}
    last = max(window) if window else at
    before = [b for b in bm if 1 <= b.batch <= at]
    during = [b for b in bm if b.batch in window]
    after = [b for b in bm if b.batch > last]
    assert len(before) + len(during) + len(after) == len(ids) - (1 if 0 in ids else 0)
    return before, during, after


def split(b: Any) -> str:
    """A batch's seconds in Spark jobs / on the driver / committing."""
    return f"{b.spark_seconds:.2f}/{b.driver_seconds:.2f}/{b.commit_seconds:.2f}"


def hcm(bs: list[Any]) -> str:
    return "/".join(str(sum(getattr(b, k) for b in bs)) for k in ("cache_hits", "cache_catchups", "cache_misses"))


def part_live(spark: Any, args: Any, paths: list[str], data_dir: str, tmp: TempDirs,
              refs: list[dict[str, int]], touched: list[int]) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    from tstate.dataflow import DEFAULT_BINS

    moves = expected_moves(DEFAULT_BINS)
    rows = args.files * args.rows_per_file
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in STRATEGIES}
    for rnd in range(args.repeat):
        for s in STRATEGIES:  # round-robin: machine noise hits all alike
            print(f"live rescale: {s} (round {rnd + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
            try:
                r = live_run(spark, data_dir, tmp.new(f"live-{s}"), s, args.at, args.steps,
                             refs[-1], sum(touched), rows, args.files, moves)
            except Exception as e:  # noqa: BLE001 -- a failing run must not hide the others
                traceback.print_exc()
                r = {"strategy": s, "status": f"failed: {short(e)}", "batches": []}
            print(f"  {s}: {r.get('total', 0):.1f} s, check {r['status']}", file=sys.stderr, flush=True)
            runs[s].append(r)
    trows = []
    for s in STRATEGIES:
        for r in runs[s]:
            bm = r["batches"]
            if not bm:
                trows.append((s, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", r["status"]))
                continue
            before, during, after = phases(bm, s, args.at, args.steps)
            def sec(bs: list[Any]) -> list[float]:
                return [b.seconds for b in bs]

            mb = median(sec(before))
            trows.append((
                s,
                f2(mb),
                f2(median(sec(during))),
                f2(max(sec(during)) if during else None),
                f2(median(sec(after))),
                f"{max(sec(during)) / mb:.2f}" if during and mb else "-",
                f"{r['total']:.1f}",
                f"{sum(b.moved_bins for b in bm)} in {sum(1 for b in bm if b.moved_bins)}",
                hcm(before), hcm(during), hcm(after),
                r["status"],
            ))
    text = table(
        ["strategy", "median before s", "median during s", "max during s", "median after s",
         "max during / median before", "total s",
         "bins moved (batches)", "cache h/c/m before", "cache h/c/m during", "cache h/c/m after", "check"],
        trows,
    )
    return text, runs


def plot_live(runs: dict[str, list[dict[str, Any]]], at: int, steps: int, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = {"none": ("tab:gray", "o"), "all-at-once": ("tab:red", "s"), "fluid": ("tab:blue", "^"),
              "precopy": ("tab:green", "D")}
    for s in STRATEGIES:
        for i, r in enumerate(runs[s]):
            bm = r["batches"]
            if not bm:
                continue
            c, m = styles[s]
            label = ("control (no rescale)" if s == "none" else f"{s}" + (f", {steps} steps" if s == "fluid" else ""))
            ax.plot([b.batch for b in bm], [b.seconds for b in bm], color=c, marker=m, ms=4, lw=1.3,
                    alpha=1.0 if i == 0 else 0.4, label=label if i == 0 else None)
    ax.axvline(at + 0.5, color="k", ls="--", lw=1)
    ax.text(at + 0.6, ax.get_ylim()[1] * 0.95, f"rescale {FROM}->{TO} called in batch {at}", va="top", fontsize=8)
    ax.axvspan(at + 0.5, at + steps + 0.5, color="tab:blue", alpha=0.08, label="fluid move window")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("micro-batch id")
    ax.set_ylabel("batch seconds (BatchMetrics.seconds)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- part 2: restart-time rescale


def native_query(spark: Any, source_dir: str, ckpt: str, out: Collector) -> tuple[float, list[float], Any, float | None]:
    first: list[float] = []
    t0 = time.perf_counter()

    def fb(df: Any, batch_id: int) -> None:
        out.foreach_batch(df, batch_id)
        if not first:
            first.append(time.perf_counter())

    df = stream_source(spark, source_dir).groupBy("key").count()
    total, per_batch, q = run_query(lambda: (
        df.writeStream.outputMode("update").foreachBatch(fb).option("checkpointLocation", ckpt)
        .trigger(availableNow=True).start()
    ))
    return total, per_batch, q, (first[0] - t0) if first else None


def checkpoint_manager(spark: Any) -> Any:
    m = getattr(spark, "streamingCheckpointManager", None)
    return m if m is not None else spark._streamingCheckpointManager  # pyspark 4.2/4.3: private


CASES = [
    ("tstate", 2, "tstate, restart on 2 partitions"),
    ("tstate", 4, "tstate, restart on 4 partitions (rescale at restart)"),
    ("native", 2, "Spark native, restart on 2"),
    ("native", 4, "Spark native, offline repartition(4) + restart"),
]


def part_restart(args: Any, paths: list[str], tmp: TempDirs, refs: list[dict[str, int]],
                 touched: list[int]) -> tuple[str, list[str], Any]:
    n, k = args.restart_files, args.after_files
    first, extra = paths[:n], paths[n:n + k]
    ref_n, ref_nk = refs[n - 1], refs[n + k - 1]
    rows_n, rows_nk = n * args.rows_per_file, (n + k) * args.rows_per_file
    cases: list[dict[str, Any]] = [
        {"engine": e, "parts": p, "label": lab, "rnd": r, "status": "ok", "out": Collector()}
        for r in range(args.restart_repeat) for e, p, lab in CASES
    ]
    notes: list[str] = []

    # -- before the restart: each case's own checkpoint and source dir, on 2 partitions
    spark = spark_session("spark-rescale")
    try:
        for c in cases:
            c["src"], c["ckpt"] = tmp.new(f"src-{c['engine']}{c['parts']}"), tmp.new(f"ckpt-{c['engine']}{c['parts']}")
            link_files(first, c["src"])
            print(f"restart: initial run of {c['label']} (round {c['rnd'] + 1}) over {n} files ...",
                  file=sys.stderr, flush=True)
            try:
                if c["engine"] == "tstate":
                    r = run_tstate(spark, c["src"], c["ckpt"], FROM, c["out"])
                    c["keys_before"] = len(r["state"])
                    c["steady"] = median([b.seconds for b in r["batches"][1:]])
                    ok = r["state"] == ref_n
                else:
                    _, per_batch, q, _ = native_query(spark, c["src"], c["ckpt"], c["out"])
                    op = state_ops(q)
                    c["keys_before"] = _get(op, "numRowsTotal") if op is not None else None
                    c["steady"] = median(per_batch[1:])
                    ok = c["keys_before"] == len(ref_n)
                st = check(c["label"], c["out"], ref_n, sum(touched[:n]), rows_n)
                if st != "ok" or not ok:
                    c["status"] = f"initial run wrong: {st if st != 'ok' else 'state keys differ'}"
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                c["status"] = f"initial run failed: {short(e)}"
    finally:
        spark.stop()

    # -- the restart: a new SparkSession (fresh executors), warmed up on other directories
    spark = spark_session("spark-rescale-restarted")
    try:
        warm_src = tmp.new("warm-src")
        link_files(paths[:2], warm_src)
        for p in (FROM, TO):
            run_tstate(spark, warm_src, tmp.new(f"warm-tstate{p}"), p, Collector())
        native_query(spark, warm_src, tmp.new("warm-native"), Collector())
        for c in cases:
            if c["status"] != "ok":
                continue
            link_files(extra, c["src"])
            print(f"restart: {c['label']} (round {c['rnd'] + 1}) ...", file=sys.stderr, flush=True)
            try:
                if c["engine"] == "tstate":
                    r = run_tstate(spark, c["src"], c["ckpt"], c["parts"], c["out"])
                    bm = r["batches"]
                    c["first"] = r["progress"][0] if r["progress"] else None
                    c["first_tstate"] = bm[0].seconds if bm else None
                    c["first_cache"] = hcm(bm[:1])
                    c["first_split"] = split(bm[0]) if bm else "-"
                    c["later"] = median([b.seconds for b in bm[1:]])
                    c["later_cache"] = hcm(bm[1:])
                    c["to_first"] = r["first_output"]
                    c["parts_after"] = bm[0].partitions if bm else None
                    c["keys_after"] = len(r["state"])
                    c["batches_after"] = len(bm)
                    state_ok = r["state"] == ref_nk
                else:
                    if c["parts"] != FROM:
                        t0 = time.perf_counter()
                        try:
                            checkpoint_manager(spark).repartition(c["ckpt"], c["parts"])
                            c["repartition"] = time.perf_counter() - t0
                        except Exception as e:  # noqa: BLE001 -- experimental: report, do not hide
                            c["repartition_error"] = f"{type(e).__name__}: {e}"
                            c["status"] = f"repartition failed: {short(e)}"
                            notes.append(f"{c['label']} (round {c['rnd'] + 1}): repartition(ckpt, {c['parts']}) "
                                         f"raised after {time.perf_counter() - t0:.1f} s:\n{e}")
                            continue
                    _, per_batch, q, to_first = native_query(spark, c["src"], c["ckpt"], c["out"])
                    op = state_ops(q)
                    c["first"] = per_batch[0] if per_batch else None
                    c["later"] = median(per_batch[1:])
                    c["to_first"] = to_first
                    c["parts_after"] = _get(op, "numShufflePartitions") if op is not None else None
                    c["keys_after"] = _get(op, "numRowsTotal") if op is not None else None
                    c["batches_after"] = len(per_batch)
                    state_ok = c["keys_after"] == len(ref_nk)
                st = check(c["label"], c["out"], ref_nk, sum(touched[:n + k]), rows_nk)
                problems = [] if st == "ok" else [st]
                if not state_ok:
                    problems.append(f"state after the restart differs ({c['keys_after']} keys)")
                if c["batches_after"] != k:
                    problems.append(f"{c['batches_after']} batches after the restart, expected {k}")
                if c["parts_after"] != c["parts"]:
                    problems.append(f"ran on {c['parts_after']} partitions, expected {c['parts']}")
                c["status"] = "ok" if not problems else "; ".join(problems)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                c["status"] = f"restart failed: {short(e)}"
            print(f"  {c['label']}: first batch {f2(c.get('first'))} s, check {c['status']}", file=sys.stderr,
                  flush=True)
    finally:
        spark.stop()

    # -- the table: per case, medians over the rounds that passed
    trows = []
    for eng, p, lab in CASES:
        cs = [c for c in cases if c["engine"] == eng and c["parts"] == p]
        good = [c for c in cs if c["status"] == "ok"]

        def med(key: str, good: list[dict[str, Any]] = good) -> float | None:
            return median([c[key] for c in good if c.get(key) is not None])

        bad = [c["status"] for c in cs if c["status"] != "ok"]
        status = "ok" if not bad else f"{len(good)}/{len(cs)} ok; " + " | ".join(dict.fromkeys(bad))
        first_s = f2(med("first"))
        if eng == "tstate" and good:
            first_s += f" ({f2(med('first_tstate'))})"
        rep = "-" if p == FROM else (f2(med("repartition")) if good else "failed")
        if eng == "tstate" and p != FROM:
            rep = "none needed"
        keys = cs[0].get("keys_before")
        trows.append((
            lab,
            f"{keys:,}" if isinstance(keys, int) else "-",
            f2(med("steady")),
            rep,
            first_s,
            ", ".join(dict.fromkeys(c["first_cache"] for c in good)) if eng == "tstate" and good else "-",
            f2(med("later")),
            f2(med("to_first")),
            str(good[0]["parts_after"]) if good else "-",
            status,
        ))
    text = table(
        ["case", "keys in state", "steady batch s (before)", "offline repartition s", "first batch after restart s",
         "cache h/c/m first batch", f"next {k - 1} batches median s", "start -> first output s",
         "partitions after", "check"],
        trows,
    )
    return text, notes, cases


# ---------------------------------------------------------------- part 3: the hand-over at low churn


def generate_churn(data_dir: str, files: int, keys: int, churn: float, seed: int = 11) -> list[str]:
    """File 0: every one of ``keys`` keys once (the state); files 1..: ``churn`` of the
    keys each (distinct, random): few keys change per batch.  Reused if already there."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(data_dir, exist_ok=True)
    names = np.array([f"key{i:07d}" for i in range(keys)], dtype=object)
    rng = np.random.default_rng(seed)
    per = max(1, int(keys * churn))
    base = int(time.time()) - files - 10
    paths = []
    for f in range(files):
        ks = rng.permutation(keys) if f == 0 else rng.choice(keys, per, replace=False)
        path = os.path.join(data_dir, f"part-{f:05d}.parquet")
        if not os.path.exists(path):
            tbl = pa.table({"key": pa.array(names[ks], type=pa.string()),
                            "value": pa.array(np.arange(len(ks)), type=pa.int64())})
            pq.write_table(tbl, path + ".tmp")
            os.replace(path + ".tmp", path)
        os.utime(path, (base + f, base + f))
        paths.append(path)
    return paths


def part_handover(args: Any, tmp: TempDirs) -> tuple[str, dict[str, Any]]:
    """The hand-over at low churn: the current strategy (all-at-once) beside precopy and
    a control run, round-robin; returns the table and the JSON figures."""
    from tstate.dataflow import DEFAULT_BINS

    files, keys, churn, at = args.handover_files, args.handover_keys, args.churn, args.handover_at
    data_dir = default_data_dir(files, 0, keys) + f"-churn{churn:g}"
    paths = generate_churn(data_dir, files, keys, churn)
    refs, touched = reference(paths)
    rows = keys + (files - 1) * max(1, int(keys * churn))
    moves = expected_moves(DEFAULT_BINS)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in HANDOVER}
    spark = spark_session("spark-rescale-handover")
    try:
        warm = tmp.new("handover-warm")
        link_files(paths[:2], warm)
        for p in (FROM, TO):
            run_tstate(spark, warm, tmp.new(f"handover-warm{p}"), p, Collector(), fold=False)
        for rnd in range(args.repeat):
            for s in HANDOVER:
                print(f"hand-over: {s} (round {rnd + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                src = tmp.new(f"handover-src-{s}")
                link_files(paths, src)
                try:
                    r = live_run(spark, src, tmp.new(f"handover-{s}"), s, at, 1, refs[-1], sum(touched), rows,
                                 files, moves, fold=False)
                except Exception as e:  # noqa: BLE001 -- a failing run must not hide the others
                    traceback.print_exc()
                    r = {"strategy": s, "status": f"failed: {short(e)}", "batches": []}
                print(f"  {s}: {r.get('total', 0):.1f} s, check {r['status']}", file=sys.stderr, flush=True)
                runs[s].append(r)
    finally:
        spark.stop()
    figures: dict[str, dict[str, list[float]]] = {
        s: {"bytes": [], "max_over": [], "hand_over": [], "take": []} for s in HANDOVER
    }
    trows = []
    for s in HANDOVER:
        for r in runs[s]:
            bm = r["batches"]
            if not bm or r["status"] != "ok":
                trows.append((s, "-", "-", "-", "-", "-", "-", "-", "-", "-", f"{r.get('total', 0):.1f}", r["status"]))
                continue
            before, during, _after = phases(bm, s, at, 2)  # (control: the batches precopy's lead and hand-over take)
            steady = median([b.seconds for b in before]) or 0.0
            hand = [b for b in during if b.moved_bins] or during[-1:]
            lead = [b for b in during if b.prefetch_bins]
            worst = max(b.seconds for b in during)
            hb = sum(b.handover_bytes for b in bm)
            figures[s]["bytes"].append(hb)
            figures[s]["max_over"].append(worst / steady)
            figures[s]["hand_over"].append(hand[0].seconds / steady)
            figures[s]["take"].append(hand[0].take_seconds)
            trows.append((
                s, f2(steady), f2(lead[0].seconds) if lead else "-", f2(hand[0].seconds), f"{worst / steady:.2f}",
                f"{hb:,}", f"{sum(b.bytes_read for b in during):,}",
                f"{hand[0].take_seconds:.3f} / {hand[0].take_max_seconds:.3f}",
                f"{sum(b.moved_bins for b in bm)}",
                f"{sum(b.prefetched_bins for b in bm)}/{sum(b.prefetch_fallbacks for b in bm)}/"
                f"{sum(b.prefetch_loads for b in bm)}",
                f"{r['total']:.1f}", r["status"],
            ))
    text = table(
        ["strategy", "steady median s", "lead batch s", "hand-over batch s", "max during / steady",
         "bytes read at hand-over (moved bins)", "bytes read, all bins, during",
         "hand-over batch: taking bins s (all tasks / slowest)", "bins moved",
         "prefetched/fallbacks/loads", "total s", "check"],
        trows,
    )
    out: dict[str, Any] = {}
    pre, aao = figures["precopy"], figures["all-at-once"]
    if pre["bytes"] and aao["bytes"] and median(aao["bytes"]):
        out["spark_precopy_handover_bytes_ratio"] = round((median(pre["bytes"]) or 0) / (median(aao["bytes"]) or 1), 4)
    for s, key in (("precopy", "spark_precopy"), ("all-at-once", "spark_all_at_once"), ("none", "spark_control")):
        if figures[s]["max_over"]:
            out[f"{key}_max_over_steady"] = round(median(figures[s]["max_over"]) or 0, 3)
            out[f"{key}_handover_over_steady"] = round(median(figures[s]["hand_over"]) or 0, 3)
    if pre["take"] and aao["take"] and median(aao["take"]):
        out["spark_precopy_handover_take_ratio"] = round((median(pre["take"]) or 0) / (median(aao["take"]) or 1), 4)
    out["spark_precopy_handover_bytes"] = median(pre["bytes"]) if pre["bytes"] else None
    out["spark_all_at_once_handover_bytes"] = median(aao["bytes"]) if aao["bytes"] else None
    return text, out


# ---------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows-per-file", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--at", type=int, default=5, help="the batch during which rescale() is called")
    ap.add_argument("--steps", type=int, default=4, help="fluid: batches the move is spread over")
    # 12, not 10: with compact_after=8 and retain=3, the commit of batch 10 (and 18, ...)
    # deletes the chains superseded by batch 8's snapshots (~2k files): a restart at batch
    # 10 would time that garbage collection instead of the restart
    ap.add_argument("--restart-files", type=int, default=12, help="files read before the restart")
    ap.add_argument("--after-files", type=int, default=3, help="files arriving after the restart")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of the live part (round-robin; one table row each)")
    ap.add_argument("--restart-repeat", type=int, default=3, help="rounds of each restart case (median)")
    ap.add_argument("--handover-files", type=int, default=12, help="part 3: files (the first holds every key)")
    ap.add_argument("--handover-keys", type=int, default=200_000, help="part 3: keys in state")
    ap.add_argument("--churn", type=float, default=0.01, help="part 3: share of the keys each later file touches")
    ap.add_argument("--handover-at", type=int, default=5, help="part 3: the batch during which rescale() is called")
    ap.add_argument("--only", default="live,restart,handover")
    ap.add_argument("--quick", action="store_true", help="smoke test: 6 files x 10k rows, 2k keys")
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--out", default=None,
                    help="results prefix (default benchmarks/results/spark_rescale -> .txt, .png; none with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.rows_per_file, args.keys = 6, 10_000, 2_000
        args.at, args.steps, args.restart_files, args.after_files = 1, 2, 3, 2
        args.repeat, args.restart_repeat = 1, 1
        args.handover_files, args.handover_keys, args.handover_at = 6, 20_000, 2
    if args.out is None:
        args.out = "" if args.quick else os.path.join("benchmarks", "results", "spark_rescale")
    parts = {s.strip() for s in args.only.split(",") if s.strip()}
    if parts - {"live", "restart", "handover"}:
        ap.error("--only takes live, restart and/or handover")
    if args.handover_at + 2 >= args.handover_files - 1:
        ap.error("--handover-at + 2 must leave batches after the move")
    if args.at + args.steps >= args.files - 1:
        ap.error("--at + --steps must leave batches after the move")
    if args.restart_files + args.after_files > args.files or args.after_files < 1:
        ap.error("--restart-files + --after-files must be <= --files, --after-files >= 1")
    load_before = os.getloadavg()[0]

    data_dir = args.data_dir or default_data_dir(args.files, args.rows_per_file, args.keys)
    paths = generate(data_dir, args.files, args.rows_per_file, args.keys)
    refs, touched = reference(paths)
    assert sum(refs[-1].values()) == args.files * args.rows_per_file

    import pyspark

    head = (
        f"spark rescale {FROM} -> {TO} partitions: keyed count (fold_bins, 256 bins), {args.files} parquet files x "
        f"{args.rows_per_file:,} rows, {args.keys:,} keys, maxFilesPerTrigger=1 (one micro-batch per file), "
        f"local[2], python {sys.version.split()[0]}, pyspark {pyspark.__version__}"
    ) if parts & {"live", "restart"} else (
        f"spark rescale {FROM} -> {TO} partitions: the hand-over, maxFilesPerTrigger=1 (one micro-batch per file), "
        f"local[2], python {sys.version.split()[0]}, pyspark {pyspark.__version__}"
    )
    sections = [head]
    tmp = TempDirs()
    try:
        if "live" in parts:
            spark = spark_session("spark-rescale-live")
            try:
                # untimed: JIT, Python workers, imports, the label jobs for both partition counts
                warm = tmp.new("warm-src")
                link_files(paths[:2], warm)
                for p in (FROM, TO):
                    run_tstate(spark, warm, tmp.new(f"warm{p}"), p, Collector())
                text, runs = part_live(spark, args, paths, data_dir, tmp, refs, touched)
            finally:
                spark.stop()
            sections.append(
                f"\n1. live rescale during a streaming run (tstate on Spark): rescale({TO}, strategy) called from the "
                f"sink in batch {args.at}, bins move from batch {args.at + 1} (fluid: over {args.steps} batches); "
                f"seconds = BatchMetrics.seconds; before = batches 1..{args.at} (0 = cold start), during = batches "
                f"that moved bins (control: batches {args.at + 1}..{args.at + args.steps}); cache h/c/m = bins taken "
                f"from an executor's cache at the committed version / caught up from an older cached version / read "
                f"from the store; {args.repeat} round(s)\n" + text
            )
            if args.out:
                png = args.out + ".png"
                os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
                plot_live(runs, args.at, args.steps, png,
                          f"tstate on Spark, live rescale {FROM}->{TO} partitions: keyed count, "
                          f"{args.files} x {args.rows_per_file:,} rows, {args.keys:,} keys, local[2]")
                sections.append(f"plot: {png}")
            series = []
            for s in STRATEGIES:
                for r in runs[s]:
                    if r["batches"]:
                        series.append(f"# {s} per-batch s: " + ", ".join(f"{b.seconds:.2f}" for b in r["batches"]))
                        series.append(f"# {s} jobs/driver/commit s per batch: " + ", ".join(
                            split(b) for b in r["batches"]))
                        series.append(f"# {s} moved/partitions/h/c/m per batch: " + ", ".join(
                            f"{b.moved_bins}/{b.partitions}/{b.cache_hits}/{b.cache_catchups}/{b.cache_misses}"
                            for b in r["batches"]))
            heavy = sorted({b.batch for rs in runs.values() for r in rs for b in r["batches"]
                            if b.commit_seconds > 0.5 * b.seconds})
            if heavy:
                sections.append(f"batches whose commit took over half the batch (in some run): {heavy}")
            sections.append("\n".join(series))
        if "restart" in parts:
            text, notes, cases = part_restart(args, paths, tmp, refs, touched)
            sections.append(
                f"\n2. rescale at a restart: {args.restart_files} files on {FROM} partitions, stop, new SparkSession "
                f"(fresh executors, warm JVM, untimed warm-up on other dirs), {args.after_files} more files, restart; "
                f"first batch = batchDuration of the restarted query's first batch (tstate: BatchMetrics.seconds in "
                f"parentheses); Spark native = groupBy('key').count(), RocksDB + changelog checkpointing, "
                f"repartition = spark._streamingCheckpointManager.repartition(ckpt, {TO}); median of "
                f"{args.restart_repeat} round(s)\n" + text
            )
            for note in notes:
                sections.append("note: " + note)
            sections.append("\n".join(
                f"# {c['label']} round {c['rnd'] + 1}: first {f2(c.get('first'))}, later {f2(c.get('later'))}, "
                f"repartition {f2(c.get('repartition'))}, start->first output {f2(c.get('to_first'))}, "
                f"tstate first batch jobs/driver/commit s {c.get('first_split', '-')}, "
                f"status {c['status']}" for c in cases))
        if "handover" in parts:
            text, figures = part_handover(args, tmp)
            sections.append(
                f"\n3. the hand-over at low churn: a per-key stateful count (256 bins; a bin's delta holds its "
                f"changed keys), {args.handover_keys:,} keys (file 0 holds each once), then "
                f"{args.handover_files - 1} files of {args.churn:.0%} of the keys each; rescale({TO}, strategy) called "
                f"in batch {args.handover_at}: all-at-once moves the bins at batch {args.handover_at + 1}, precopy "
                f"prefetches them during batch {args.handover_at + 1} (the lead batch) and moves them at "
                f"{args.handover_at + 2}; steady = median of batches 1..{args.handover_at}; during = the lead and "
                f"hand-over batches (control: the same two); bytes read at hand-over = BatchMetrics.handover_bytes "
                f"(state files the new owners read for the moved bins: whole chains, or only the files since the "
                f"prefetch); taking bins = BatchMetrics.take_seconds / take_max_seconds (reading, decoding and "
                f"catching up the bins the tasks install); a moved bin is never served from the old owner's cached copy (binstore: a bin is "
                f"cached for the partition that gave it), as on a cluster; {args.repeat} round(s)\n" + text
            )
    finally:
        tmp.cleanup()
    sections.append(f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
                    f"({os.cpu_count()} CPUs)")
    text = "\n".join(sections)
    if "handover" in parts:
        import json

        text += "\n" + json.dumps(figures)
    print(text)
    if args.out:
        with open(args.out + ".txt", "w") as f:
            f.write(text + "\n")
        print(f"wrote {args.out}.txt", file=sys.stderr)


if __name__ == "__main__":
    main()
