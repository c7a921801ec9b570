"""Keyed count on Spark (issue 6): tstate on Spark vs Spark's own stateful APIs.

The workload: ``--files`` parquet files (default 10) of ``--rows-per-file`` rows (default
100k) over ``--keys`` string keys (default 10k), read by a streaming file source with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``, so every contender runs exactly
one micro-batch per file; ``local[2]``, ``shuffle.partitions=2``, RocksDB state store with
changelog checkpointing.  Every contender keeps a running count per key and emits, per
micro-batch, the updated ``(key, count)`` of the keys touched in that batch, into the same
foreachBatch sink (the batch's output collected to the driver as Arrow, which forces the
computation).  Contenders, all in one SparkSession, each with a fresh checkpoint dir:

* ``tstate``          tstate on Spark (``tstate.spark.Backend``), ``fold_bins``
* ``tws-row``         ``transformWithState`` (Row API), ValueState per key
* ``tws-pandas``      ``transformWithStateInPandas``, ValueState per key
* ``apply-pandas``    ``applyInPandasWithState``, GroupState per key
* ``native``          ``groupBy("key").count()``, outputMode update (JVM only)
* ``python``          plain Python for scale: pyarrow reads each file, a dict counts

Total = wall time from starting the query to ``awaitTermination`` returning; per-batch =
median of ``batchDuration`` over the query's progress reports.  Every contender's final
counts are checked against the plain-Python ones (and the number of emitted rows against
the keys touched per batch), so a broken contender cannot look fast.

    python -m benchmarks.spark_keyed_count [--files 10] [--rows-per-file 100000]
        [--keys 10000] [--only tstate,native] [--quick]

The last line is one JSON object: ``keyed_count_over_native`` (tstate with a key
function / native, total seconds; issue 25), ``keyed_count_col_over_native`` (with
``ts.col``), tstate's speed-ups ``keyed_count_over_tws_pandas``,
``keyed_count_over_apply_pandas``, ``keyed_count_over_tws_row`` (the contender's total /
tstate's: issue 25 asks >= 10x over both pandas APIs) and
``keyed_count_python_over_tstate`` (tstate's total / plain Python's), and the totals,
for :mod:`benchmarks.before_after`.

Targets (issue 6): tstate >= 10x faster than the pandas-based state APIs, >= 3x faster
than transformWithState, <= 1.5x the native JVM aggregation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
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

OUT_SCHEMA = "key string, count long"


class NotAvailable(Exception):
    """A contender that cannot run here (e.g. tstate.spark not written yet)."""


# ---------------------------------------------------------------- tstate on Spark


def run_tstate(
    spark: Any, source_dir: str, ckpt_dir: str, out: Collector | None = None, column: bool = False
) -> tuple[float, list[float]]:
    """tstate on Spark.  Returns (total seconds, per-batch seconds).  ``out``, when given,
    receives the emitted ``(key, count)`` pairs for the correctness check.  ``column``:
    key by ``ts.col("key")`` (bins computed in the JVM, one Python stage:
    :mod:`tstate.spark.colocated`) instead of a key function."""
    try:
        import tstate as ts
        from tstate.spark import Backend
    except (ImportError, NotImplementedError) as e:
        raise NotAvailable(f"import tstate.spark: {e}") from e

    flow = ts.Dataflow("keyed-count")
    events = flow.input("events")  # rows arrive as dicts of the row's columns

    @flow.fold_bins(events, key=ts.col("key") if column else (lambda r: r["key"]), state=int)
    def count(states: dict, records: Any, ctx: Any) -> None:  # per bin, the batch's records of that bin
        touched = {}
        for r in records:
            k = r["key"]
            states[k] = states.get(k, 0) + 1
            touched[k] = None
        for k in touched:
            ctx.emit((k, states[k]))

    # TODO(lead): the sink.  It must force the computation like the other contenders'
    # foreachBatch(collect) sink and, for the check, feed the pairs to ``out``.
    count.sink(lambda t, recs: out.add_pairs(recs) if out is not None else None)
    try:
        backend = Backend(spark, checkpoint=ckpt_dir, partitions=2)
        t0 = time.perf_counter()
        query = backend.start(flow, {"events": stream_source(spark, source_dir)}, trigger={"availableNow": True}).query
        query.awaitTermination()
        total = time.perf_counter() - t0
    except NotImplementedError as e:
        raise NotAvailable(f"tstate.spark: {e}") from e
    return total, batch_durations(query)


# ---------------------------------------------------------------- Spark's own APIs


def _write(df: Any, ckpt_dir: str, out: Collector) -> Callable[[], Any]:
    return lambda: (
        df.writeStream.outputMode("update")
        .foreachBatch(out.foreach_batch)
        .option("checkpointLocation", ckpt_dir)
        .trigger(availableNow=True)
        .start()
    )


def run_native(spark: Any, source_dir: str, ckpt_dir: str, out: Collector) -> tuple[float, list[float]]:
    df = stream_source(spark, source_dir).groupBy("key").count()
    total, per_batch, _ = run_query(_write(df, ckpt_dir, out))
    return total, per_batch


def _processors() -> tuple[type, type]:
    try:  # the transformWithState APIs talk to the JVM in protobuf; pyspark does not require it
        import pyspark.sql.streaming.proto.StateMessage_pb2  # noqa: F401
    except ImportError as e:
        raise NotAvailable(f"needs protobuf matching pyspark's gencode (pip install 'protobuf>=6.33,<7'): {e}") from e
    import pandas as pd
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class CountRows(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            n = 0
            for _ in rows:
                n += 1
            prev = self.count.get()
            total = (prev[0] if prev else 0) + n
            self.count.update((total,))
            yield Row(key=key[0], count=total)

        def close(self) -> None:
            pass

    class CountPandas(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            n = 0
            for pdf in rows:
                n += len(pdf)
            prev = self.count.get()
            total = (prev[0] if prev else 0) + n
            self.count.update((total,))
            yield pd.DataFrame({"key": [key[0]], "count": [total]})

        def close(self) -> None:
            pass

    return CountRows, CountPandas


def run_tws_row(spark: Any, source_dir: str, ckpt_dir: str, out: Collector) -> tuple[float, list[float]]:
    CountRows, _ = _processors()
    df = stream_source(spark, source_dir).groupBy("key").transformWithState(
        CountRows(), outputStructType=OUT_SCHEMA, outputMode="Update", timeMode="None"
    )
    total, per_batch, _ = run_query(_write(df, ckpt_dir, out))
    return total, per_batch


def run_tws_pandas(spark: Any, source_dir: str, ckpt_dir: str, out: Collector) -> tuple[float, list[float]]:
    _, CountPandas = _processors()
    df = stream_source(spark, source_dir).groupBy("key").transformWithStateInPandas(
        CountPandas(), outputStructType=OUT_SCHEMA, outputMode="Update", timeMode="None"
    )
    total, per_batch, _ = run_query(_write(df, ckpt_dir, out))
    return total, per_batch


def _apply_count(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    n = 0
    for pdf in pdfs:
        n += len(pdf)
    total = (state.get[0] if state.exists else 0) + n
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "count": [total]})


def run_apply_pandas(spark: Any, source_dir: str, ckpt_dir: str, out: Collector) -> tuple[float, list[float]]:
    from pyspark.sql.streaming.state import GroupStateTimeout

    df = stream_source(spark, source_dir).groupBy("key").applyInPandasWithState(
        _apply_count,
        outputStructType=OUT_SCHEMA,
        stateStructType="count long",
        outputMode="Update",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    total, per_batch, _ = run_query(_write(df, ckpt_dir, out))
    return total, per_batch


# ---------------------------------------------------------------- plain Python


def run_python(paths: list[str], out: Collector) -> tuple[float, list[float], list[int]]:
    """pyarrow reads each file; a dict keeps the counts; per file, emit the touched keys."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    per_batch, touched_per_batch = [], []
    t0 = time.perf_counter()
    for p in paths:
        b0 = time.perf_counter()
        keys = pq.read_table(p, columns=["key"]).column("key").to_pylist()
        touched: dict[str, None] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
            touched[k] = None
        out.add_pairs([(k, counts[k]) for k in touched])
        per_batch.append(time.perf_counter() - b0)
        touched_per_batch.append(len(touched))
    return time.perf_counter() - t0, per_batch, touched_per_batch


# ---------------------------------------------------------------- driver

SPARK_CONTENDERS: dict[str, tuple[str, Callable[..., tuple[float, list[float]]]]] = {
    "tstate": ("tstate on Spark (fold_bins)", run_tstate),
    "tstate-col": ("tstate on Spark (fold_bins, ts.col key)", lambda *a, **k: run_tstate(*a, **k, column=True)),
    "tws-row": ("transformWithState (Row)", run_tws_row),
    "tws-pandas": ("transformWithStateInPandas", run_tws_pandas),
    "apply-pandas": ("applyInPandasWithState", run_apply_pandas),
    "native": ("native groupBy().count()", run_native),
}
ALL = list(SPARK_CONTENDERS) + ["python"]


def _warmup(spark: Any, source_dir: str, tmp: TempDirs, rounds: int = 2) -> None:
    """JIT, class loading, the state store and the Python worker pool: untimed native
    queries over the whole input, so the first timed contender does not pay for them.
    One small query is not enough: measured here, native groupBy().count() took 10.7 s
    after a one-file warm-up and 4.4 s once the JVM had run a few full queries."""
    for i in range(rounds):
        run_native(spark, source_dir, tmp.new(f"warmup{i}"), Collector())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--rows-per-file", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="smoke test: 3 files x 20k rows")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(ALL)}")
    ap.add_argument("--data-dir", default="", help="where the parquet files go (default: a temp dir per size)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed native queries over the input first (0: none)")
    ap.add_argument("--no-warmup-each", action="store_true",
                    help="skip each contender's untimed one-file run before its first timed one")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per Spark contender (median total)")
    ap.add_argument("--out", default=None,
                    help="results file (default benchmarks/results/spark_keyed_count.txt, none with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.rows_per_file = 3, 20_000
    if args.out is None:
        args.out = "" if args.quick else os.path.join("benchmarks", "results", "spark_keyed_count.txt")
    only = [s.strip() for s in args.only.split(",") if s.strip()] or ALL
    unknown = [s for s in only if s not in ALL]
    if unknown:
        ap.error(f"unknown contender(s) {unknown}; choose from {ALL}")
    rows = args.files * args.rows_per_file
    load_before = os.getloadavg()[0]

    data_dir = args.data_dir or default_data_dir(args.files, args.rows_per_file, args.keys)
    paths = generate(data_dir, args.files, args.rows_per_file, args.keys)

    # The plain-Python run is the reference for every check, so it always runs.
    ref = Collector()
    py_total, py_batches, touched = run_python(paths, ref)
    reference, touched_total = dict(ref.latest), sum(touched)
    assert sum(reference.values()) == rows

    results: dict[str, dict[str, Any]] = {}
    if "python" in only:
        results["python"] = {"label": "plain Python (pyarrow + dict)", "total": py_total,
                             "batch": median(py_batches), "status": "ok"}

    spark_names = [n for n in SPARK_CONTENDERS if n in only]
    tmp = TempDirs()
    spark = None
    try:
        if spark_names:
            spark = spark_session("spark-keyed-count")
            if args.warmup:
                _warmup(spark, data_dir, tmp, args.warmup)
        one_file_dir = ""
        if spark_names and not args.no_warmup_each:
            import shutil

            one_file_dir = tmp.new("one-file")
            os.makedirs(one_file_dir)
            shutil.copy(paths[0], one_file_dir)
        # --repeat R: R rounds, round-robin over the contenders so machine noise hits all
        # alike; a contender's total is the median of its rounds, per-batch the median of
        # all its batches.
        runs: dict[str, list[tuple[float, list[float]]]] = {n: [] for n in spark_names}
        for rnd in range(args.repeat):
            for name in spark_names:
                if name in results:  # not available / failed / wrong: not run again
                    continue
                label, fn = SPARK_CONTENDERS[name]
                if rnd == 0 and one_file_dir:  # its own one-time costs (Python workers, imports), untimed
                    try:
                        fn(spark, one_file_dir, tmp.new(name + "-warmup"), Collector())
                    except Exception as e:  # noqa: BLE001 -- the timed run reports it
                        print(f"  warm-up of {label} failed: {_short(e)}", file=sys.stderr)
                print(f"running {label} (round {rnd + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                out = Collector()
                try:
                    total, per_batch = fn(spark, data_dir, tmp.new(name), out)
                except NotAvailable as e:
                    results[name] = {"label": label, "total": None, "batch": None, "status": f"not available ({e})"}
                    continue
                except Exception as e:  # noqa: BLE001 -- a failing contender must not hide the others' figures
                    traceback.print_exc()
                    results[name] = {"label": label, "total": None, "batch": None, "status": f"failed: {_short(e)}"}
                    continue
                status = check(name, out, reference, touched_total, rows)
                if len(per_batch) != args.files:
                    status = ("" if status == "ok" else status + " ") + (
                        f"[{len(per_batch)} batches reported, expected {args.files}]")
                print(f"  {label}: {total:.1f} s, check {status}", file=sys.stderr, flush=True)
                if status != "ok":  # shown, but flagged: a wrong contender's time means nothing
                    results[name] = {"label": label, "total": total, "batch": median(per_batch),
                                     "status": status, "batches": per_batch}
                    continue
                runs[name].append((total, per_batch))
        for name in spark_names:
            if name in results or not runs[name]:
                continue
            totals = [t for t, _ in runs[name]]
            batches = [b for _, bs in runs[name] for b in bs]
            results[name] = {"label": SPARK_CONTENDERS[name][0], "total": statistics.median(totals),
                             "batch": median(batches), "status": "ok", "batches": batches, "totals": totals}
    finally:
        if spark is not None:
            spark.stop()
        tmp.cleanup()

    base = results.get("tstate", {}).get("total")
    table_rows = []
    for name in ALL:
        if name not in results:
            continue
        r = results[name]
        t, b = r["total"], r["batch"]
        if t is None:
            table_rows.append((r["label"], "not available" if r["status"].startswith("not") else "failed",
                               "-", "-", "-", r["status"]))
            continue
        table_rows.append((
            r["label"],
            f"{t:.1f}",
            f"{b:.2f}" if b is not None else "-",
            f"{t / base:.1f}x" if base else "-",
            f"{rows / t / 1e3:,.0f}k",
            r["status"],
        ))
    head = (
        f"spark keyed count: {args.files} parquet files x {args.rows_per_file:,} rows = {rows:,} events, "
        f"{args.keys:,} keys, maxFilesPerTrigger=1 (one micro-batch per file), local[2], "
        f"shuffle.partitions=2, RocksDB state store + changelog checkpointing, foreachBatch sink; "
        f"python {sys.version.split()[0]}, pyspark {_pyspark_version()}; "
        f"{args.warmup} untimed native warm-up queries"
        f"{'' if args.no_warmup_each else ' + an untimed one-file run of each contender'}, "
        f"median of {args.repeat} round(s); 1-min load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)"
    )
    text = head + "\n" + table(
        ["contender", "total s", "per-batch median s", "total vs tstate", "events/s", "check"], table_rows
    )
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
            for name, r in results.items():
                if r.get("totals"):
                    f.write(f"# {name} totals s: {', '.join(f'{x:.1f}' for x in r['totals'])}\n")
                if r.get("batches"):
                    f.write(f"# {name} per-batch s: {', '.join(f'{x:.2f}' for x in r['batches'])}\n")
        print(f"wrote {args.out}", file=sys.stderr)
    # the last line: the ratio (tstate on Spark, key function / native) and the totals
    figures: dict[str, float] = {}
    for name in ("tstate", "tstate-col", "native"):
        if results.get(name, {}).get("status") == "ok":
            figures[f"{name.replace('-', '_')}_s"] = round(results[name]["total"], 3)
    if "tstate_s" in figures and "native_s" in figures:
        figures["keyed_count_over_native"] = round(figures["tstate_s"] / figures["native_s"], 3)
    if "tstate_col_s" in figures and "native_s" in figures:
        figures["keyed_count_col_over_native"] = round(figures["tstate_col_s"] / figures["native_s"], 3)
    figures.update(speedups(results))
    if any(k in figures for k, _ in SPEEDUPS.values()):
        print("tstate (key function) speed-up, total seconds side by side: " + ", ".join(
            f"{SPARK_CONTENDERS[n][0] if n in SPARK_CONTENDERS else n} {figures[k]:.1f}x"
            for n, (k, _) in SPEEDUPS.items() if k in figures
        ) + " (issue 25: >= 10x over both pandas APIs)")
    print(json.dumps(figures))


#: contender -> (JSON key of tstate's speed-up over it, JSON key of its total seconds)
SPEEDUPS: dict[str, tuple[str, str]] = {
    "tws-pandas": ("keyed_count_over_tws_pandas", "tws_pandas_s"),
    "apply-pandas": ("keyed_count_over_apply_pandas", "apply_pandas_s"),
    "tws-row": ("keyed_count_over_tws_row", "tws_row_s"),
    "python": ("keyed_count_python_over_tstate", "python_s"),
}


def speedups(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """tstate's (key function) speed-up over each contender of :data:`SPEEDUPS` that ran
    and checked ok (its total / tstate's; for plain Python the other way round: how
    much faster the single-process baseline is), with the contenders' totals.

    >>> speedups({"tstate": {"status": "ok", "total": 2.0}, "tws-pandas": {"status": "ok", "total": 20.0}})
    {'keyed_count_over_tws_pandas': 10.0, 'tws_pandas_s': 20.0}
    """
    base = results.get("tstate", {})
    if base.get("status") != "ok" or not base.get("total"):
        return {}
    out: dict[str, float] = {}
    for name, (key, total_key) in SPEEDUPS.items():
        r = results.get(name, {})
        if r.get("status") != "ok" or not r.get("total"):
            continue
        ratio = r["total"] / base["total"] if name != "python" else base["total"] / r["total"]
        out[key] = round(ratio, 3)
        out[total_key] = round(r["total"], 3)
    return out


def _short(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else ""
    if "terminated with exception:" in msg:  # a StreamingQueryException: keep the cause
        msg = msg.split("terminated with exception:", 1)[1].strip()
    return f"{type(e).__name__}: {msg[:160]}"


def _pyspark_version() -> str:
    try:
        import pyspark

        return pyspark.__version__
    except ImportError:
        return "-"


if __name__ == "__main__":
    main()
