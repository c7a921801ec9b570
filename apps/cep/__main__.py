"""``python -m apps.cep``: delay cascades and recoveries in the flight stream, per airport.

Streams departures (default: the bundled two days of US flights,
``apps/data/flights-sample.parquet``) in hourly epochs, keyed by origin airport, through
two CEP operators (:mod:`apps.cep.dataflow`) with the patterns of
:mod:`apps.cep.flights`:

* **delay_cascade** -- a departure delayed more than 30 minutes, then two or more
  departures each delayed more than the previous one, within 3 hours;
* **recovery** -- a departure delayed more than 60 minutes, then an on-time departure
  within 2 hours, with no other delay over 60 minutes in between;

prints the first matches of each pattern and a summary (matches, timed-out partial
matches and late events per pattern; events and events/s of the run, which matches
both patterns in one pass over the input), with a progress bar on stderr.

    python -m apps.cep                                    # the bundled sample
    python -m apps.cep --input ../shared/data/flights-3m.parquet --limit 500000
    python -m apps.cep --workers 4 --checkpoint /tmp/cep-ckpt    # resumable

``--input`` takes Parquet or CSV with the columns ``date`` (timestamp), ``delay``
(integer minutes), ``origin`` and optionally ``distance``, ``destination``.  Rows out of
time order are matched if they are at most ``--lateness`` minutes behind the watermark
(the end of the previous hour), otherwise counted as late.  Bad input (a missing file or
column, a value of the wrong type, a null date/delay/origin, bytes that are not UTF-8, a
ragged or oversized CSV row) stops the app with a message naming the file, the row (as
a spreadsheet shows it: a CSV's header is row 1) and the column (exit status 1), before
anything runs (with ``--backend spark``: before Spark starts); a file without rows (a
header-only CSV) says "no rows".

Exit status (:mod:`apps.cli`; the same for ``python -m apps.graph`` and ``python -m
tstate``): 0 success, 1 bad input data or a runtime error (``error: ...`` on stderr),
2 a usage error (a bad option or option value, e.g. ``--epoch 90s``).

``--workers N`` runs N *logical* tstate workers in this one process: keys are routed to
them and their state can migrate between them, and the matches are the same on any
count -- but they share one Python interpreter, so more workers are slower, not faster.
For parallel speed use ``--backend spark``.

With ``--checkpoint DIR`` the run writes a checkpoint every ``--every`` epochs and a
later run with the same directory resumes from the last one (on any number of
workers); the counts then cover the resumed part only.  ``--output DIR`` writes every
match, timeout and late event as JSON lines (one file per pattern, output and epoch,
through tstate's exactly-once file sink): killed at any instant and resumed, the
directory ends up as after an uninterrupted run.

``--backend spark`` runs the same dataflow (:func:`build`) on Spark with
:class:`tstate.spark.Backend` in batch mode: Spark reads the table and computes each
row's epoch exactly as the embedded source stamps it (:mod:`apps.cep.spark_source`),
the first operator turns rows into :class:`~apps.cep.flights.FlightEvent`, each
micro-batch is ``--epochs-per-batch`` epochs (default: as many as fit about 1,000,000
flights per partition, so Spark's fixed cost per micro-batch is paid a few times) over
``--partitions`` partitions (default 2) of a ``--master`` session (default ``local[2]``; a session
already running in the process is reused and left running), with the state in
``--checkpoint`` (default: a temporary directory, removed afterwards; a directory
given resumes after its last committed micro-batch, and says so).  The summary's sinks
are fed on the driver after each micro-batch commits; the ``--output`` files are written
by Spark tasks from the batches' committed output (:mod:`tstate.spark.output`), the same
files as the embedded run's.  A progress bar per micro-batch goes to stderr
(``--no-progress``: none); ``--workers`` and ``--every`` are the embedded engine's
(every micro-batch commits).

    python -m apps.cep --backend spark --partitions 3

The run raises the garbage collector's generation-0 threshold (restored afterwards):
the dataflow allocates millions of short-lived objects, and the default threshold makes
the cyclic collector take about a third of the time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import heapq
import operator
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from apps.cli import EXIT_CODES, EXIT_ERROR, WORKERS_HELP
from tstate.io.sinks import Sink

DATA = Path(__file__).resolve().parent.parent / "data"
DEFAULT_INPUT = DATA / "flights-sample.parquet"
FULL_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "flights-3m.parquet"
SAMPLE_DAYS = 2
SAMPLE_MAX_ROWS = 50_000

GC_THRESHOLD = (50_000, 20, 20)

PATTERNS = {
    "delay_cascade": "delay > 30 min, then >= 2 departures each delayed more than the previous, within 3 h",
    "recovery": "delay > 60 min, then an on-time departure within 2 h, no other delay > 60 in between",
}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m apps.cep",
        description="Complex event processing on the flight stream: delay cascades and recoveries per airport.",
        epilog=EXIT_CODES,
    )
    p.add_argument("--input", type=Path, default=None, help=f"Parquet or CSV flights (default: {DEFAULT_INPUT})")
    p.add_argument("--workers", type=int, default=1, metavar="N", help=WORKERS_HELP)
    p.add_argument("--limit", type=int, default=None, help="read only the first N rows")
    p.add_argument(
        "--checkpoint", type=str, default=None,
        help="checkpoint directory or s3://, gs://, abfs://, hdfs:// URL (resumes from it; on Spark, the state store: default a temporary directory)",
    )  # fmt: skip
    p.add_argument("--every", type=int, default=24, help="checkpoint every N epochs (default: 24)")
    p.add_argument(
        "--output", type=Path, default=None,
        help="also write every match, timeout and late event as JSON lines, one file per "
        "pattern/output/epoch, exactly once (DIR/<pattern>/<matches|timeouts|late>/epoch-*.jsonl)",
    )  # fmt: skip
    p.add_argument("--epoch", default="1h", help="dataflow epoch, whole minutes (default: 1h)")
    p.add_argument("--lateness", type=int, default=0, help="allowed lateness in minutes (default: 0)")
    p.add_argument("--show", type=int, default=5, help="matches to print per pattern (default: 5)")
    p.add_argument(
        "--backend", choices=("embedded", "spark"), default="embedded",
        help="run on the embedded engine (default) or on Spark (tstate.spark, batch mode)",
    )  # fmt: skip
    spark = p.add_argument_group("--backend spark")
    spark.add_argument("--partitions", type=int, default=2, help="Spark partitions the state is spread over (default: 2)")
    spark.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    spark.add_argument(
        "--epochs-per-batch", type=int, default=None,
        help="epochs per Spark micro-batch (default: as many as fit about 1,000,000 flights per partition; "
        "the matches are the same for any value)",
    )  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--stats", type=Path, default=None, metavar="FILE",
        help="also write the run's figures as JSON to FILE (seconds, events, micro-batches, bytes written, "
        "this process's peak memory): what benchmarks.spark_apps reads",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be >= 1")
    if args.limit is not None and args.limit < 0:
        p.error("--limit must be >= 0")
    if args.partitions < 1:
        p.error("--partitions must be >= 1")
    if args.epochs_per_batch is not None and args.epochs_per_batch < 1:
        p.error("--epochs-per-batch must be >= 1")
    if args.every < 1:
        p.error("--every must be >= 1")
    from apps.cep.spark_source import epoch_minutes
    from tstate.errors import ConfigurationError

    try:
        epoch_minutes(args.epoch)
    except ConfigurationError as exc:
        p.error(f"--epoch: {exc}")
    if args.lateness < 0:
        p.error("--lateness must be >= 0")
    if args.show < 0:
        p.error("--show must be >= 0")
    return args


def ensure_sample(path: Path = DEFAULT_INPUT, source: Path = FULL_DATA) -> Path:
    """The bundled sample; if it is absent, write it from the first two days (at most
    50,000 rows) of ``flights-3m.parquet``."""
    if path.exists() or not source.exists():
        return path
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    batches = []
    n = 0
    for b in pq.ParquetFile(source).iter_batches(batch_size=SAMPLE_MAX_ROWS):
        batches.append(b.slice(0, SAMPLE_MAX_ROWS - n))
        n += batches[-1].num_rows
        if n >= SAMPLE_MAX_ROWS:
            break
    table = pa.Table.from_batches(batches)
    first = table.column("date")[0].as_py()
    end = dt.datetime(first.year, first.month, first.day) + dt.timedelta(days=SAMPLE_DAYS)
    table = table.filter(pc.less(table.column("date"), end))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


class Summary(Sink):
    """A sink that counts records and keeps the ``keep`` earliest, by (epoch, key, first
    event time) -- deterministic on any number of workers."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.count = 0
        self._heap: list[tuple[Any, ...]] = []  # max-heap by negated order
        self._seq = 0

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.count += len(records)
        if not self.keep:
            return
        for k, m in records:
            order = (time, k, getattr(m, "first_time", 0))
            item = (_Neg(order), self._seq, time, k, m)
            self._seq += 1
            if len(self._heap) < self.keep:
                heapq.heappush(self._heap, item)
            elif order < self._heap[0][0].v:
                heapq.heapreplace(self._heap, item)

    def first(self) -> list[tuple[Any, Any, Any]]:
        return [(t, k, m) for _, _, t, k, m in sorted(self._heap, key=lambda x: (x[0].v, x[1]))]


class _Neg:
    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: "_Neg") -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Neg) and self.v == other.v


def _flight(f: Any) -> list[Any]:
    return [f.minute, f.delay, f.distance, f.destination]


def _match_json(r: tuple[Any, Any]) -> dict[str, Any]:
    k, m = r
    return {
        "key": k, "first": m.first_time, "last": m.last_time,
        "events": {stage: [_flight(f) for f in evs] for stage, evs in m.items()},
    }  # fmt: skip


def _timeout_json(r: tuple[Any, Any]) -> dict[str, Any]:
    k, t = r
    d = _match_json((k, t.partial))
    d["timeout"] = t.timeout_time
    return d


def _late_json(r: tuple[Any, Any]) -> dict[str, Any]:
    return {"key": r[0], "flight": _flight(r[1])}


#: how ``--output`` writes each output: JSON objects, flights as [minute, delay, distance, destination]
_JSON = {"matches": _match_json, "timeouts": _timeout_json, "late": _late_json}


def _hm(minute: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M")


def render(key: Any, m: Any) -> str:
    """``ATL 2001-01-01 06:12  first 45 | rise 50 (06:40), 62 (07:10)``"""
    parts = []
    for stage, events in m.items():
        evs = ", ".join(f"{e.delay:+d} ({_hm(e.minute)[11:]})" for e in events)
        parts.append(f"{stage} {evs}")
    return f"{key:<4} {_hm(m.first_time)}  " + " | ".join(parts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    old_gc = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        return _run_spark(args) if args.backend == "spark" else _run(args)
    finally:
        gc.set_threshold(*old_gc)


Sinks = dict[str, tuple[Summary, Summary, Summary]]


def build(
    flow: Any, flights: Any, *, epoch_minutes: int, lateness: int, show: int, output: Optional[Path] = None
) -> tuple[Sinks, dict[str, Any]]:
    """The app's dataflow on ``flights`` (a stream of :class:`FlightEvent`), the same on
    both backends: both patterns keyed by origin (a column key: on Spark the flights
    and the operators are one stage, :mod:`tstate.spark.colocated`), each output into a :class:`Summary`
    (and, with ``output``, JSON-lines files).  Returns pattern -> (matches, timeouts,
    late) summaries, and pattern -> its :class:`~apps.cep.dataflow.CepStreams` (to
    attach more sinks)."""
    import tstate as ts
    from apps.cep.dataflow import cep
    from apps.cep.flights import FlightEvent, delay_cascade, recovery

    sinks: Sinks = {}
    ops: dict[str, Any] = {}
    for name, pattern in (("delay_cascade", delay_cascade()), ("recovery", recovery())):
        streams = cep(
            flow, flights, pattern, key=ts.col("origin"), time=operator.attrgetter("minute"),
            epoch=epoch_minutes, lateness=lateness, event_type=FlightEvent, name=name,
            keep_idle_keys=True,  # a few hundred airports, active all day
        )  # fmt: skip
        ops[name] = streams
        sinks[name] = (Summary(show), Summary(0), Summary(0))
        for stream, sink, what in zip(streams, sinks[name], ("matches", "timeouts", "late")):
            flow.sink(stream, sink, name=f"{name}.{what}.summary")
            if output is not None:
                stream.map(_JSON[what], name=f"{name}.{what}.json").sink(
                    ts.io.files(str(output / name / what)), name=f"{name}.{what}.files"
                )
    return sinks, ops


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import tstate as ts
    from apps.cep.source import count_rows, flight_source
    from tstate.engine.checkpointing.coordinator import Checkpoints
    from tstate.errors import TstateError

    path = args.input if args.input is not None else ensure_sample()
    total = count_rows(path)
    if total is not None and args.limit is not None:
        total = min(total, args.limit)
    bar = tqdm(total=total, unit="flights", unit_scale=True, file=sys.stderr, disable=args.no_progress, leave=False)
    read = [0]

    def progress(n: int) -> None:
        read[0] += n
        bar.update(n)

    try:
        source = flight_source(path, epoch=args.epoch, limit=args.limit, progress=progress)
        flow = ts.Dataflow("cep-flights")
        flights = flow.source(source, name="flights")
        sinks, _ = build(
            flow, flights, epoch_minutes=source.epoch_minutes, lateness=args.lateness, show=args.show,
            output=args.output,
        )  # fmt: skip
        checkpoint = Checkpoints(str(args.checkpoint), every_epochs=args.every) if args.checkpoint else None
        import numpy  # noqa: F401  (imported by the source when it opens: not timed)
        import pyarrow.csv  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        t0 = time.perf_counter()
        ex = flow.start(workers=args.workers, checkpoint=checkpoint)
        resumed = ex.restored
        start_row = int(resumed.positions.get("flights") or 0) if resumed is not None else 0
        if start_row:
            bar.update(start_row)
        ex.run()
        seconds = time.perf_counter() - t0
    except TstateError as exc:
        bar.close()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        bar.close()
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    bar.close()
    resumed_line = None
    if resumed is not None:
        resumed_line = (
            f"resumed from checkpoint {resumed.id} at epoch {resumed.time} (row {start_row:,}); "
            "the counts below cover the rest of the input"
        )
    report(
        args, path, sinks, read[0], seconds, f"{args.workers} worker(s)", start_row + read[0], resumed_line
    )
    write_stats(args, sinks, seconds=seconds, events=read[0])
    if args.checkpoint:
        done = ex.coordinator.committed if ex.coordinator is not None else []
        print(f"checkpoints committed in {args.checkpoint}: {len(done)}")
    return 0


def _run_spark(args: argparse.Namespace) -> int:
    """The same dataflow on Spark (:class:`tstate.spark.Backend`, batch mode): the table
    read by Spark (:mod:`apps.cep.spark_source`), one micro-batch per
    ``--epochs-per-batch`` epochs, state in ``--checkpoint`` (default: a temporary
    directory), the sinks on the driver."""
    import shutil
    import tempfile

    from apps.cep.source import flight_source
    from tstate.errors import TstateError

    path = args.input if args.input is not None else ensure_sample()
    try:  # the input first: a missing file, column or bad row is reported before Spark starts
        flight_source(path, epoch=args.epoch, limit=args.limit).check()
    except TstateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR

    import tstate as ts
    from apps.cep.spark_source import SPARK_SETTINGS, epoch_minutes, flight_frame, spark_events
    from tstate.spark.session import require_pyspark

    try:
        require_pyspark()
        from pyspark import SparkContext

        from tstate.spark import Backend, local_session
    except ImportError as exc:
        print(f"error: --backend spark: {exc}", file=sys.stderr)
        return EXIT_ERROR
    # a session already running in this process (a notebook, a test) is reused, not stopped
    owned = SparkContext._active_spark_context is None
    directory = str(args.checkpoint) if args.checkpoint is not None else tempfile.mkdtemp(prefix="cep-spark-")
    temp = directory if args.checkpoint is None else None  # removed afterwards
    frame = None
    try:
        t_begin = time.perf_counter()
        spark = local_session(args.master, app_name="apps.cep", **(SPARK_SETTINGS if owned else {}))
        try:
            minutes = epoch_minutes(args.epoch)
            t_session = time.perf_counter()
            frame = flight_frame(
                spark, path, epoch=args.epoch, limit=args.limit, partitions=spark.sparkContext.defaultParallelism,
                by_origin=args.lateness > 0,  # (records held back: the input is not placed by key)
            )
            flow = ts.Dataflow("cep-flights")
            flights = flow.input("flights")  # FlightEvent records, built from the columns
            sinks, _ = build(
                flow, flights, epoch_minutes=minutes, lateness=args.lateness, show=args.show, output=args.output
            )
            backend = Backend(
                spark, checkpoint=directory, partitions=args.partitions, progress=not args.no_progress
            )
            head = backend.store.latest()
            resumed = head.meta["spark"] if head is not None and "spark" in head.meta else None
            t0 = time.perf_counter()
            backend.run(flow, {"flights": spark_events(frame)}, epochs_per_batch=args.epochs_per_batch)
            seconds = time.perf_counter() - t0
            # the flights read: every batch counts its input rows (a resumed run: the rest)
            events = sum(b.records for b in backend.metrics.batches)
        finally:
            if owned:
                spark.stop()
    except TstateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    resumed_line = None
    if resumed is not None:
        at = "the end of the input" if resumed["frontier"] is None else f"epoch {resumed['frontier']}"
        resumed_line = (
            f"resumed from micro-batch {resumed['batch']} at {at}; the counts below cover the rest of the input"
        )
    where = f"Spark {args.master}, {args.partitions} partition(s)"
    report(args, path, sinks, events, seconds, where, events, resumed_line)
    batches = backend.metrics.batches
    write_stats(
        args, sinks, seconds=seconds, events=events, batches=len(batches),
        setup_seconds=round(t0 - t_begin, 3),  # the session, reading and partitioning the input
        session_seconds=round(t_session - t_begin, 3),  # of which starting the Spark session
        cut_seconds=round(backend.metrics.cut_seconds, 3),  # of the run: reading the input, cutting it into batches
        driver_share=round(sum(b.driver_own_seconds for b in batches) / seconds, 4) if seconds else 0.0,
        output_share=round(sum(b.output_seconds for b in batches) / seconds, 4) if seconds else 0.0,
        bytes_written=sum(b.bytes_written for b in batches),
        batch_seconds=[round(b.seconds, 3) for b in batches],
        phase_seconds={  # where the batches' time went (tstate.spark.BatchMetrics)
            "spark_jobs": round(sum(b.spark_seconds for b in batches), 3),
            "driver": round(sum(b.driver_seconds for b in batches), 3),
            "commit": round(sum(b.commit_seconds for b in batches), 3),
            "output": round(sum(b.output_seconds for b in batches), 3),
        },
    )  # fmt: skip
    if args.checkpoint:
        print(f"micro-batches committed in {args.checkpoint}: {len(backend.metrics.batches)}")
    return 0


def write_stats(args: argparse.Namespace, sinks: Sinks, **figures: Any) -> None:
    """``--stats FILE``: the run's figures and what it found, as one JSON object."""
    if args.stats is None:
        return
    import json
    import resource

    found = {
        name: {"matches": m.count, "timeouts": t.count, "late": late.count} for name, (m, t, late) in sinks.items()
    }
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    args.stats.write_text(json.dumps({**figures, "found": found, "peak_rss_mb": round(peak, 1)}) + "\n")


def report(
    args: argparse.Namespace, path: Path, sinks: Sinks, events: int, seconds: float, where: str, rows: int,
    resumed: Optional[str],
) -> None:
    """The summary both backends print: the first matches of each pattern, then the
    counts table."""
    out = sys.stdout
    print(
        f"{Path(path).name}: {rows:,} flights in epochs of {args.epoch}, keyed by origin; "
        f"{where}; lateness {args.lateness} min",
        file=out,
    )
    if resumed is not None:
        print(resumed, file=out)
    for name, (matches, _, _) in sinks.items():
        print(f"\n{name}: {PATTERNS[name]}  (first {min(args.show, matches.count)} of {matches.count:,})", file=out)
        for _t, k, m in matches.first():
            print("  " + render(k, m), file=out)
    rate = events / seconds if seconds > 0 else 0.0
    rows_ = [[name, f"{m.count:,}", f"{t.count:,}", f"{late.count:,}"] for name, (m, t, late) in sinks.items()]
    print("", file=out)
    print(table(["pattern", "matches", "timeouts", "late events"], rows_), file=out)
    # one dataflow matches both patterns in one pass over the input: one time for both
    print(
        f"\nboth patterns in one pass: {events:,} events in {seconds:.2f} s ({rate:,.0f} events/s)", file=out
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text (markdown) table; the first column left-aligned, the others right."""
    cells = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_ERROR)
