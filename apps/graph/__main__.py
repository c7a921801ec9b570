"""``python -m apps.graph``: streaming analytics of the airport graph, epoch by epoch.

Reads an edge list (default: the bundled two days of US flights,
``apps/data/flights-sample.parquet``: one edge ``origin -> destination`` per flight),
cuts it into epochs (default: hours), keeps a sliding window (default: 24 epochs, one
day) and prints, for every epoch, the graph's size, the number of connected components
and the largest one's size, the triangle count and the top-10 PageRank vertices (joined
with their names from ``apps/data/airports.csv``), with a progress bar.

    python -m apps.graph                          # the bundled sample, 1 worker
    python -m apps.graph --workers 4 --epochs 12  # the first 12 hours on 4 workers
    python -m apps.graph --input edges.csv --window 0 --epoch 1d

Input and its bad rows (see :mod:`apps.graph.io` and :mod:`apps.graph.edges`):

- ``--input`` takes CSV or parquet with ``src,dst[,time][,delta]`` columns (or the
  flight columns ``origin,destination,date``); without a time column every
  ``--rows-per-epoch`` rows are an epoch; ``delta = -k`` retracts an edge explicitly.
- a file without a source or destination column, or without rows, is an error naming
  the file and the missing column (exit status 1);
- vertex ids are strings or integers: a float / bool / date id column is an error
  (exit status 1); an invalid row -- a missing value, a control character (NUL, ...) in
  an id, a time that is NaN, infinite or out of range (beyond +-2**53, or a timestamp
  beyond microseconds), a delta that is not an integer -- is skipped and counted by
  reason, the same for CSV and parquet (``--strict``: an error naming the file, the row
  and the column);
- self-loops and zero deltas are ignored (counted); duplicate edges are one edge of
  the graph, which stays until its last occurrence is retracted or leaves the window;
  retracting an absent edge does nothing (the occurrences it retracts are counted).
  The last line says what was ignored, by reason.

``--backend spark`` runs the same dataflow (:func:`apps.graph.stream.build`) on Spark
with :class:`tstate.spark.Backend` in batch mode (``--partitions``, ``--master``,
``--epochs-per-batch``, default 48): the edge file becomes a DataFrame with an epoch
column (a large one -- :data:`FILE_ROWS` rows or more -- through Parquet files in a
temporary directory, read by Spark's reader: :func:`updates_frame`), and the per-epoch lines are printed from the collected changes after the run --
the same lines as the embedded engine's.  The Spark layout spreads the work over the
partitions without loop rounds (``build(..., buckets=SPARK_BUCKETS, spread=True)``):
the edge counts in :data:`SPARK_BUCKETS` keys, and each algorithm's graph in one key
(``blocks=1``, an epoch's work in one timer) in bins that put the algorithms side by
side (on 2 partitions PageRank and degrees on one, components and triangles on the
other), so a micro-batch is a few Spark stages whatever its
epochs -- hence many epochs per batch (each batch costs about a second of Spark jobs
beyond its work).  (With ``blocks > 1`` the algorithms loop per vertex, in rounds
within each micro-batch, :mod:`tstate.spark.rounds`.)  The last line says what ran
(micro-batches, Spark stages and tasks, loop rounds if any) and the median seconds per
epoch (a progress bar per micro-batch on stderr meanwhile; ``--no-progress``: none).
``python -m benchmarks.graph --spark`` compares ``local[1]``, ``local[2]`` and the
embedded engine.

    python -m apps.graph --backend spark

``--workers N`` runs N *logical* tstate workers in this one process: keys are routed to
them and their state can migrate between them, and the output is the same on any count
-- but they share one Python interpreter, so more workers are slower, not faster.  For
parallel speed use ``--backend spark``.

Exit status (:mod:`apps.cli`; the same for ``python -m apps.cep`` and ``python -m
tstate``): 0 success, 1 bad input data or a runtime error (``error: ...`` on stderr,
naming the file, the row and the column), 2 a usage error (a bad option).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from apps.cli import EXIT_CODES, EXIT_ERROR, WORKERS_HELP

DATA = Path(__file__).resolve().parent.parent / "data"
DEFAULT_INPUT = DATA / "flights-sample.parquet"
DEFAULT_NAMES = DATA / "airports.csv"
#: ``--backend spark``: the edge counts in this many keys, spread over the partitions
#: (:func:`apps.graph.stream.build`'s ``buckets``; part of the state's layout)
SPARK_BUCKETS = 16


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m apps.graph",
        description="Streaming graph analytics (components, PageRank, triangles, degrees) on tstate.",
        epilog=EXIT_CODES,
    )
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="edge list, CSV or parquet (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help=WORKERS_HELP)
    p.add_argument("--epochs", type=int, default=None, help="process only the first N epochs")
    p.add_argument("--epoch", default="1h", help="epoch length for timestamp columns (default: 1h)")
    p.add_argument("--epoch-size", type=float, default=1.0, help="epoch length for numeric time columns (default: 1)")
    p.add_argument("--rows-per-epoch", type=int, default=1000, help="epoch size without a time column (default: 1000)")
    p.add_argument("--window", type=int, default=24, help="sliding window in epochs, 0 for none (default: 24)")
    p.add_argument("--top", type=int, default=10, help="how many PageRank vertices to print (default: 10)")
    p.add_argument("--tol", type=float, default=1e-10, help="PageRank L1 tolerance, >= 1e-12 (default: 1e-10)")
    p.add_argument("--names", type=Path, default=DEFAULT_NAMES, help="CSV with vertex names (iata,name,city,state,...)")
    p.add_argument("--backend", choices=("embedded", "spark"), default="embedded")
    spark = p.add_argument_group("--backend spark")
    spark.add_argument("--partitions", type=int, default=2, help="Spark partitions the state is spread over (default: 2)")
    spark.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    spark.add_argument("--epochs-per-batch", type=int, default=48, help="epochs per Spark micro-batch (default: 48)")
    spark.add_argument("--checkpoint", type=str, default=None, help="state store: a directory or an s3://, gs://, abfs://, hdfs:// URL (default: a temporary directory)")
    p.add_argument("--strict", action="store_true", help="stop at the first invalid row instead of skipping it")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--stats", type=Path, default=None, metavar="FILE",
        help="also write the run's figures as JSON to FILE (seconds, edge updates, micro-batches, bytes written, "
        "this process's peak memory): what benchmarks.spark_apps reads",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be >= 1")
    from apps.graph.io import parse_duration

    try:
        parse_duration(args.epoch)
    except ValueError as exc:
        p.error(f"--epoch: {exc}")
    if not args.epoch_size > 0:
        p.error("--epoch-size must be > 0")
    if args.epochs is not None and args.epochs < 1:
        p.error("--epochs must be >= 1")
    if args.window < 0:
        p.error("--window must be >= 0")
    if args.rows_per_epoch < 1:
        p.error("--rows-per-epoch must be >= 1")
    if not args.tol >= 1e-12:
        p.error("--tol must be >= 1e-12 (PageRank computes in float64)")
    if args.partitions < 1 or args.epochs_per_batch < 1:
        p.error("--partitions and --epochs-per-batch must be >= 1")
    return args


def load_names(path: Path) -> dict[str, str]:
    """Vertex id -> display name from a CSV with an id column (``iata``/``id``/first)
    and a ``name`` column (plus ``city``/``state`` when present)."""
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            return {}
        key = next((k for k in ("iata", "id", "vertex") if k in reader.fieldnames), reader.fieldnames[0])
        for row in reader:
            name = row.get("name") or ""
            where = ", ".join(x for x in (row.get("city"), row.get("state")) if x)
            out[row[key]] = f"{name} ({where})" if where else name
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from apps.graph.io import EdgeFile
    from tstate.errors import TstateError

    try:
        data = EdgeFile(
            args.input,
            epoch=args.epoch,
            epoch_size=args.epoch_size,
            rows_per_epoch=args.rows_per_epoch,
            on_invalid="raise" if args.strict else "skip",
        )
        names = load_names(args.names)
        return _run_spark(args, data, names) if args.backend == "spark" else _run(args, data, names)
    except TstateError as exc:  # EdgeFileError too
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _run(args: argparse.Namespace, data: Any, names: dict[str, str]) -> int:
    """The embedded engine (module docstring)."""
    from tqdm import tqdm

    from apps.graph.stream import GraphStream

    epochs = data.epochs if args.epochs is None else min(args.epochs, data.epochs)
    window = args.window or None
    g = GraphStream(
        workers=args.workers, window=window, horizon=epochs, validate=True, on_invalid="skip", tol=args.tol
    )
    out = sys.stdout
    if not args.quiet:
        unit = {
            "timestamp": args.epoch,
            "number": f"{args.epoch_size:g} time units",
            "rows": f"{args.rows_per_epoch} rows",
        }[data.time_kind]
        print(
            f"{args.input.name}: {data.rows:,} rows, {data.epochs} epochs of {unit}; "
            f"window {args.window or 'none'}; {args.workers} worker(s)",
            file=out,
        )
    batches = dict(data.batches(limit=epochs))
    inserted = sum(1 for recs in batches.values() for r in recs if r[2] > 0)
    updates = sum(len(r) for r in batches.values())
    expiries = 0
    if window:
        expiries = sum(1 for e, recs in batches.items() if e + window < epochs for r in recs if r[2] > 0)
    bar = tqdm(total=epochs, unit="epoch", disable=args.no_progress or args.quiet, file=sys.stderr, leave=False)
    t0 = time.perf_counter()
    view = g.view
    assert view is not None
    for e in range(epochs):
        g.advance(e, batches.get(e, []))
        bar.update(1)
        if args.quiet:
            continue
        bar.write(_epoch_lines(view, data.label(e), args, names), file=out)
    g.close()
    bar.close()
    dt = time.perf_counter() - t0
    st = g.stats
    total = updates + expiries
    print(
        f"{epochs} epochs, {updates:,} edge updates ({inserted:,} insertions) + {expiries:,} window expiries "
        f"in {dt:.2f} s ({total / dt if dt else 0:,.0f} updates/s); "
        f"ignored: {ignored(data, st)}",
        file=out,
    )
    _write_stats(args, seconds=dt, events=updates)
    return 0


def ignored(data: Any, stats: Any) -> str:
    """What the run did not apply, by reason: ``3 self-loops, 0 zero deltas, 1 retracted
    occurrences of absent edges, 2 invalid rows (1 missing src, 1 time infinite)``."""
    by = dict(data.invalid_by)
    if stats.invalid:
        by["malformed update"] = by.get("malformed update", 0) + stats.invalid
    invalid = data.invalid + stats.invalid
    detail = f" ({', '.join(f'{n} {r}' for r, n in by.items())})" if by else ""
    return (
        f"{stats.self_loops} self-loops, {stats.zero} zero deltas, {stats.absent} retracted occurrences of absent "
        f"edges, {invalid} invalid rows{detail}"
    )


def _epoch_lines(view: object, label: str, args: argparse.Namespace, names: dict[str, str]) -> str:
    """What is printed for one epoch (from the view of the results so far)."""
    degrees = view.degrees.data  # type: ignore[attr-defined]
    edges = sum(degrees.values()) // 2
    line = (
        f"{label}  vertices {len(degrees):>4}  edges {edges:>5}  "
        f"components {view.component_count():>3} (largest {view.largest_component():>4})  "  # type: ignore[attr-defined]
        f"triangles {view.triangle_total:>6}"  # type: ignore[attr-defined]
    )
    lines = [line]
    for i, (v, r) in enumerate(view.top_ranks(args.top), 1):  # type: ignore[attr-defined]
        lines.append(f"    {i:>2}. {v!s:<6} {r:.5f}  {names.get(str(v), '')}".rstrip())
    return "\n".join(lines)


#: at least this many update rows reach Spark as Parquet files read by Spark's reader
#: (:func:`updates_frame`), fewer as a driver-local relation
FILE_ROWS = 100_000


def updates_frame(
    spark: Any, rows: list[tuple[Any, Any, Any, int]], vtype: str, staging: Optional[str] = None,
    min_rows: int = FILE_ROWS,
) -> Any:
    """The ``(epoch, src, dst, delta)`` rows as a DataFrame (``epoch bigint, src VTYPE,
    dst VTYPE, delta bigint``; ``vtype``: ``"bigint"`` or ``"string"``), handed to Spark
    as one Arrow table: reading it is the JVM's work, as a file read would be (a
    DataFrame made from a Python list runs a Python worker task per partition each time
    a Spark job reads it).

    With ``staging`` (a directory of this machine, used on a local master only, where
    the executors read it) and at least ``min_rows`` rows, the table is written there
    as one Parquet file per core of the session (``defaultParallelism``) and read with
    Spark's own reader instead: a driver-local relation rides inside its tasks, so its
    first job (the run's cut) has the driver's JVM serialise every row into the tasks
    and each task deserialise them (660k rows, persisted and counted on ``local[2]``
    alone: 5.5-8.5 s from the Arrow table, 1.7-2.8 s from the files, measured under
    load; inside the graph run the cut's JVM CPU moved less, 9.5 to 8.9 s) where the
    files are read by the executors, one split each, in parallel.  Each call writes a directory of its own in
    ``staging``; the caller removes ``staging`` after the run.  The rows are the same
    either way."""
    import pyarrow as pa

    ids = pa.int64() if vtype == "bigint" else pa.string()
    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    table = pa.table({
        "epoch": pa.array(cols[0], pa.int64()), "src": pa.array(cols[1], ids),
        "dst": pa.array(cols[2], ids), "delta": pa.array(cols[3], pa.int64()),
    })  # fmt: skip
    if staging is None or len(rows) < min_rows or not _local_master(spark):
        return spark.createDataFrame(table)
    import pyarrow.parquet as pq

    import tempfile

    files = max(1, int(spark.sparkContext.defaultParallelism))
    os.makedirs(staging, exist_ok=True)
    into = tempfile.mkdtemp(prefix="updates-", dir=staging)  # (a frame of its own per call)
    n = table.num_rows
    for i in range(files):
        lo, hi = i * n // files, (i + 1) * n // files
        pq.write_table(table.slice(lo, hi - lo), os.path.join(into, f"part-{i:04d}.parquet"))
    return spark.read.schema(f"epoch bigint, src {vtype}, dst {vtype}, delta bigint").parquet(into)


def _local_master(spark: Any) -> bool:
    """Whether ``spark``'s executors run on this machine (``local``, ``local[N]``,
    ``local-cluster[...]``): they can read the driver's files."""
    try:
        return str(spark.sparkContext.master).startswith("local")
    except Exception:  # noqa: BLE001  (no SparkContext: Spark Connect)
        return False


def _run_spark(args: argparse.Namespace, data: Any, names: dict[str, str]) -> int:
    """The same dataflow on Spark (module docstring)."""
    import tempfile
    from operator import itemgetter

    from tstate.spark.session import require_pyspark

    try:
        require_pyspark()
        from pyspark import SparkContext

        from tstate.spark import Backend, Source, local_session
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency of the test extra
        print(f"error: --backend spark: {exc}", file=sys.stderr)
        return EXIT_ERROR
    import tstate as ts
    from apps.graph.stream import ALGORITHMS, EpochResult, InputStats, build
    from apps.graph.views import GraphView

    epochs = data.epochs if args.epochs is None else min(args.epochs, data.epochs)
    batches = dict(data.batches(limit=epochs))
    rows = [(e, s, d, k) for e, recs in sorted(batches.items()) for s, d, k in recs]
    ids = {type(x) for r in rows for x in r[1:3]}
    if len(ids) > 1:  # a Spark column has one type: mixed ids become strings
        rows = [(e, str(s), str(d), k) for e, s, d, k in rows]
    vtype = "string" if str in ids or not ids else "bigint"
    window = args.window or None
    owned = SparkContext._active_spark_context is None
    # without --checkpoint the state lives in a temporary directory, removed at the end
    directory = str(args.checkpoint) if args.checkpoint is not None else tempfile.mkdtemp(prefix="graph-spark-")
    staging = tempfile.mkdtemp(prefix="graph-spark-input-")  # large inputs as Parquet files (updates_frame)
    out = sys.stdout
    t0 = time.perf_counter()
    spark = local_session(args.master, app_name="apps.graph")
    try:
        flow = ts.Dataflow("graph")
        updates = flow.input("updates").map(itemgetter(1, 2, 3), name="edge")  # (epoch, src, dst, delta) rows
        analytics = build(
            flow, updates, ALGORITHMS, window, epochs, True, "skip", InputStats(), tol=args.tol,
            buckets=SPARK_BUCKETS, spread=True,
        )
        sinks = {name: stream.collect(name=f"out.{name}") for name, stream in analytics.outputs().items()}
        df = updates_frame(spark, rows, vtype, staging=os.path.join(staging, "input"))
        progress = not (args.no_progress or args.quiet)
        backend = Backend(spark, checkpoint=directory, partitions=args.partitions, progress=progress)
        if not args.quiet:
            print(
                f"{args.input.name}: {len(rows):,} edge updates, {epochs} epochs; window {args.window or 'none'}; "
                f"Spark {args.master}, {args.partitions} partition(s), {args.epochs_per_batch} epoch(s) per batch",
                file=out,
            )
        backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=args.epochs_per_batch)
    finally:
        if owned:
            spark.stop()
        if args.checkpoint is None:
            shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    dt = time.perf_counter() - t0
    view = GraphView()
    by_epoch: dict[int, dict[str, list[object]]] = {}
    for name, sink in sinks.items():
        for t, r in sink.items:
            by_epoch.setdefault(t, {}).setdefault(name, []).append(r)
    for e in range(epochs):
        res = EpochResult(e, {name: by_epoch.get(e, {}).get(name, []) for name in sinks})
        view.apply(e, res.changes)
        if not args.quiet:
            print(_epoch_lines(view, data.label(e), args, names), file=out)
    m = backend.metrics.batches
    rounds = sum(b.loop_rounds for b in m)
    print(spark_summary(m, epochs, len(rows), dt), file=out)
    _write_stats(
        args, seconds=dt, events=len(rows), batches=len(m), bytes_written=sum(b.bytes_written for b in m),
        loop_rounds=rounds,
    )
    return 0


def spark_summary(batches: Sequence[Any], epochs: int, updates: int, seconds: float) -> str:
    """The last line of a Spark run: what ran (micro-batches, the operators' Spark
    stages and tasks, the loops' rounds and stages when there are any) and the median
    seconds per epoch (a batch's seconds over the epochs it completed; the last batch,
    which closes the input, completes the rest).  ``batches``: the run's :class:`tstate.metrics.BatchMetrics`.

    >>> from tstate.metrics import BatchMetrics
    >>> b = [BatchMetrics(i, f, 2.0, 2, 10, 0, 0, 0, 0, stages=2) for i, f in ((0, 12), (1, None))]
    >>> spark_summary(b, 12, 100, 5.0)
    '12 epochs, 100 edge updates on Spark in 5.00 s: 2 micro-batches of 2 partitions, 4 Spark stages (8 tasks), no loop rounds; median 0.17 s per epoch'
    >>> spark_summary(b[1:], 12, 100, 5.0)  # one batch, which also closed the input
    '12 epochs, 100 edge updates on Spark in 5.00 s: 1 micro-batch of 2 partitions, 2 Spark stages (4 tasks), no loop rounds; median 0.17 s per epoch'
    """
    rounds = sum(b.loop_rounds for b in batches)
    stages = sum(b.stages for b in batches)
    tasks = sum(b.stages * b.partitions for b in batches)
    parts = sorted({b.partitions for b in batches})
    ran = f"{len(batches)} micro-batch{'es' if len(batches) != 1 else ''} of {'/'.join(map(str, parts)) or 0} partitions, {stages} Spark stages ({tasks} tasks), "
    if rounds:
        loop_stages = sum(b.loop_stages for b in batches)
        ran += f"{rounds} loop rounds ({rounds / epochs:.1f} per epoch) in {loop_stages} more Spark stages"
    else:
        ran += "no loop rounds"
    per_epoch, lo = [], 0
    for b in batches:
        hi = epochs if b.frontier is None else b.frontier  # None: the batch closed the input
        if hi > lo:
            per_epoch.append(b.seconds / (hi - lo))
            lo = hi
    median = statistics.median(per_epoch) if per_epoch else 0.0
    return f"{epochs} epochs, {updates:,} edge updates on Spark in {seconds:.2f} s: {ran}; median {median:.2f} s per epoch"


def _write_stats(args: argparse.Namespace, **figures: object) -> None:
    """``--stats FILE``: the run's figures as one JSON object."""
    if args.stats is None:
        return
    import json
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    args.stats.write_text(json.dumps({**figures, "peak_rss_mb": round(peak, 1)}) + "\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
