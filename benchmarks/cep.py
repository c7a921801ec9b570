"""CEP on the flight stream: the two app patterns as tstate dataflows (embedded engine,
one worker) side by side with the same matching without a dataflow, and with the
hand-written per-key baselines of :mod:`apps.cep.baseline`, in the same run.

    python -m benchmarks.cep [--rows N] [--path P] [--repeat R] [--default-gc]

Default input: all 3M rows of ``../shared/data/flights-3m.parquet`` when present,
else the bundled sample ``apps/data/flights-sample.parquet``.  Per pattern:

* ``tstate dataflow``: ``flight_source`` (hourly epochs) -> ``cep(...)`` keyed by
  origin, as ``python -m apps.cep`` runs it (timeouts reported, idle keys kept); the
  time covers everything from ``flow.start()`` to the end of the run, reading and
  decoding the file included;
* ``... no timeouts``: the same with ``report_timeouts=False``;
* ``matcher loop``: :class:`~apps.cep.matcher.Matcher` over the pre-loaded events in a
  dict-of-states loop, Flink's operator loop (``advance_time`` then ``process`` per
  event, timeouts reported; a key's windows close when its next event comes): the
  pattern matching alone, no dataflow, no file reading;
* ``baseline``: the hand-written per-key classes over the pre-loaded events (no
  timeouts);

and ``both patterns``: the app's dataflow (one source, two CEP operators).

``SQL over parquet`` (issue 24 item 5): one MATCH_RECOGNIZE query (:data:`FLIGHT_SQL`, a
rising delay run within three hours) through ``match_recognize(...).cep(flow,
ts.io.parquet(...))`` (dict rows, ``datetime`` times) side by side with the same pattern
written in the Pattern API (:func:`flight_pattern`) on the app's typed source, the two
run round-robin (``--repeat`` times, medians), their matches checked equal.  The JSON
object on the last line holds ``sql_parquet_over_pattern_api``: SQL CPU seconds / Pattern
API CPU seconds (target <= 1.2; CPU time, which a shared machine disturbs less), and
the app's dataflow speed (both patterns): ``both_patterns_events_per_s`` (wall) and
``both_patterns_cpu_events_per_s`` (CPU time).  ``--only sql`` runs this comparison alone.  The loading
of the events for the loops is timed separately (first line).  Peak state is sampled
between steps / every 20,000 events, outside the timed sections: partial matches (incl.
held matches), events held in state (buffered for the watermark + referenced by partial
matches), and the encoded size (``tstate.types.estimated_size``).  Events/s is wall
time (median of ``--repeat``); ``cpu ev/s`` uses the process' CPU time, which a busy,
shared machine disturbs less.  The garbage collector's generation-0 threshold is raised
as the app does (``--default-gc``: Python's default, 700), and the preloaded events are
frozen out of its full scans (``gc.freeze()``).  The matches of every engine
are checked equal, per key and in order.

Target (issue 7): >= 300k events/s per pattern on one worker.  Results and analysis:
``apps/cep/README.md`` (recovery ~300-335k, delay_cascade ~236-257k events/s).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import Any

import numpy  # noqa: F401  (imported up front: not timed)
import pyarrow.parquet  # noqa: F401

import tstate as ts
from apps.cep import Matcher
from apps.cep.__main__ import DEFAULT_INPUT, GC_THRESHOLD
from apps.cep.baseline import CascadeBaseline, RecoveryBaseline
from apps.cep.dataflow import cep
from apps.cep.flights import DATA_PATH, RISING_DELAYS_SQL, FlightEvent, delay_cascade, recovery
from apps.cep.pattern import AfterMatchSkip, Pattern
from apps.cep.source import flight_source
from apps.cep.sql import match_recognize
from benchmarks.common import table
from tstate.io.sinks import Sink
from tstate.types import estimated_size

PATTERNS: dict[str, tuple[Callable[[], Any], type]] = {
    "delay_cascade": (delay_cascade, CascadeBaseline),
    "recovery": (recovery, RecoveryBaseline),
}
CHUNK = 20_000
END = 10**12
by_origin = attrgetter("origin")
by_minute = attrgetter("minute")


#: the SQL side of the comparison (issue 24 item 5): the app's sample query
FLIGHT_SQL = RISING_DELAYS_SQL


def flight_pattern() -> Pattern:
    """:data:`FLIGHT_SQL` in the Pattern API over :class:`FlightEvent` (as Flink's
    planner translates the query)."""
    return (
        Pattern.begin("A", skip=AfterMatchSkip.skip_past_last_event())
        .where(lambda f: f.delay > 30)
        .next("B")
        .where(lambda f, ctx: f.delay > ctx.previous().delay)
        .times_or_more(2)
        .consecutive()
        .next("C")
        .where(lambda f, ctx: f.delay < ctx.previous().delay)
        .within(dt.timedelta(hours=3))
    )


HEADER = ["pattern", "engine", "events/s", "cpu ev/s", "seconds", "matches", "timeouts",
          "peak partial", "peak events", "peak state"]  # fmt: skip


class Peak:
    """Running maxima of the state measures."""

    def __init__(self) -> None:
        self.partial = 0
        self.events = 0
        self.bytes: int | None = 0

    def update(self, partial: int, events: int, nbytes: int | None) -> None:
        self.partial = max(self.partial, partial)
        self.events = max(self.events, events)
        if nbytes is None:
            self.bytes = None
        elif self.bytes is not None:
            self.bytes = max(self.bytes, nbytes)


class Keep(Sink):
    """Collects ``(time, key, value)`` (matches) or only counts (timeouts, late)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.items: list[tuple[Any, Any, Any]] = []
        self.count = 0

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.count += len(records)
        if self.keep:
            self.items.extend((time, k, v) for k, v in records)


def run_dataflow(path: str, rows: int | None, names: list[str], report: bool, sample: bool) -> dict[str, Any]:
    flow = ts.Dataflow("cep-bench")
    src = flow.source(flight_source(path, epoch="1h", limit=rows), name="flights")
    ops = {}
    sinks = {}
    for name in names:
        out = cep(
            flow, src, PATTERNS[name][0](), key=by_origin, time=by_minute, epoch=60, event_type=FlightEvent,
            report_timeouts=report, keep_idle_keys=True, name=name,
        )  # fmt: skip
        ops[name] = out.operator
        sinks[name] = (Keep(True), Keep(False), Keep(False))
        for stream, sink, what in zip(out, sinks[name], ("matches", "timeouts", "late")):
            flow.sink(stream, sink, name=f"{name}.{what}.sink")
    peaks = {n: Peak() for n in names}
    wall = cpu = 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    ex = flow.start(workers=1)
    steps = 0
    while True:
        more = ex.step()
        steps += 1
        if sample and steps % 25 == 0:  # measure the state outside the timed sections
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
            for name, op in ops.items():
                _sample_dataflow(ex, op, peaks[name])
            w0, c0 = time.perf_counter(), time.process_time()
        if not more:
            break
    ex.run()  # finishes (flushes the sinks)
    wall += time.perf_counter() - w0
    cpu += time.process_time() - c0
    return {"wall": wall, "cpu": cpu, "sinks": sinks, "peaks": peaks}


def _sample_dataflow(ex: Any, op: Any, peak: Peak) -> None:
    # the operator's bins on every worker (read-only; tstate has no cheap public
    # "iterate the live states" call: flow.state() copies every state through the codec)
    partial = events = nbytes = 0
    for w in range(ex.workers):
        for b in ex.operators[w][op.node].bins.values():
            for s in b.states.values():
                partial += len(s.nfa.runs) + len(s.nfa.held)
                events += len(s.buffer) + len(s.nfa.events)
                nbytes += estimated_size(s)
    peak.update(partial, events, nbytes)


def run_sql(path: str, rows: int | None) -> list[tuple[Any, ...]]:
    """FLIGHT_SQL over ``ts.io.parquet`` (or ``ts.io.csv``): (origin, start minute,
    stop minute, rises) per match."""
    flow = ts.Dataflow("cep-sql-bench")
    table_source = ts.io.csv if path.lower().endswith((".csv", ".csv.gz")) else ts.io.parquet
    src = flow.source(table_source(path, time="date", epoch="1h", columns=["date", "delay", "origin"], limit=rows), name="rows")
    out = match_recognize(FLIGHT_SQL).cep(flow, src)
    got = out.rows.collect()
    flow.run(workers=1)
    minute = dt.timedelta(minutes=1)

    def at(d: dt.datetime) -> int:
        return (d - dt.datetime(1970, 1, 1)) // minute

    return [(r["origin"], at(r["start"]), at(r["stop"]), r["rises"]) for _, r in got.items]


def run_pattern_api(path: str, rows: int | None) -> list[tuple[Any, ...]]:
    """:func:`flight_pattern` on the app's typed source: the same tuples as :func:`run_sql`."""
    flow = ts.Dataflow("cep-api-bench")
    src = flow.source(flight_source(path, epoch="1h", limit=rows), name="flights")
    out = cep(flow, src, flight_pattern(), key=by_origin, name="pattern_api")
    got = out.matches.collect()
    flow.run(workers=1)
    return [(k, m["A"][0].minute, m["C"][0].minute, len(m["B"])) for _, (k, m) in got.items]


def compare_sql(path: str, rows: int | None, repeat: int, n: int) -> tuple[list[list[Any]], dict[str, float]]:
    """The SQL-over-parquet rows of the table and the ratio (see the module docs): the
    two run round-robin, medians of wall and of CPU seconds; the ratio is of CPU
    seconds (a shared machine disturbs it less; one process, one thread)."""
    cases = {"sql": partial(run_sql, path, rows), "api": partial(run_pattern_api, path, rows)}
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    got: dict[str, list[tuple[Any, ...]]] = {}
    for _ in range(repeat):
        for k, fn in cases.items():
            w0, c0 = time.perf_counter(), time.process_time()
            got[k] = fn()
            wall[k].append(time.perf_counter() - w0)
            cpu[k].append(time.process_time() - c0)
    assert sorted(got["sql"]) == sorted(got["api"]), "SQL over parquet and the Pattern API disagree"
    med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in cases}
    table_rows = [
        ["rising delays (SQL)", engine, n / med[k][0], n / med[k][1], med[k][0], len(got[k]), "", "", "", ""]
        for k, engine in (("sql", "match_recognize over ts.io.parquet"), ("api", "Pattern API, typed source"))
    ]
    return table_rows, {"sql_parquet_over_pattern_api": round(med["sql"][1] / med["api"][1], 3)}


def count_flights(path: str, rows: int | None) -> int:
    """How many rows the runs read."""
    from apps.cep.source import count_rows

    total = count_rows(path)
    if total is None:  # (a CSV)
        total = len(load(path, rows)[0])
    return total if rows is None else min(rows, total)


def load(path: str, rows: int | None) -> tuple[list[FlightEvent], float]:
    t0 = time.perf_counter()
    r = flight_source(path, epoch="1h", limit=rows).open()
    out: list[FlightEvent] = []
    while (b := r.next_batch()) is not None:
        out += b[1]
    return out, time.perf_counter() - t0


def run_matcher(events: list[FlightEvent], name: str, sample: bool) -> dict[str, Any]:
    m: Matcher[Any] = Matcher(PATTERNS[name][0](), event_type=FlightEvent)
    proc, adv, new = m.process, m.advance_time, m.new_state
    states: dict[str, Any] = {}
    matches: list[tuple[Any, Any]] = []
    timeouts = 0
    peak = Peak()
    wall = cpu = 0.0
    for i in range(0, len(events), CHUNK):
        w0, c0 = time.perf_counter(), time.process_time()
        for f in events[i : i + CHUNK]:
            st = states.get(f.origin)
            if st is None:
                st = states[f.origin] = new()
            ms, tos = adv(st, f.minute)  # Flink's operator loop: advance, then process
            if ms:
                matches.extend((f.origin, x) for x in ms)
            if tos:
                timeouts += len(tos)
            r = proc(st, f, f.minute)
            if r:
                matches.extend((f.origin, x) for x in r)
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        if sample:
            peak.update(
                sum(len(s.runs) + len(s.held) for s in states.values()),
                sum(len(s.events) for s in states.values()),
                sum(estimated_size(s) for s in states.values()),
            )
    w0, c0 = time.perf_counter(), time.process_time()
    for k, st in states.items():
        ms, tos = m.advance_time(st, END)
        matches.extend((k, x) for x in ms)
        timeouts += len(tos)
    wall += time.perf_counter() - w0
    cpu += time.process_time() - c0
    return {"wall": wall, "cpu": cpu, "matches": matches, "timeouts": timeouts, "peak": peak}


def run_baseline(events: list[FlightEvent], name: str, sample: bool) -> dict[str, Any]:
    cls = PATTERNS[name][1]
    states: dict[str, Any] = {}
    matches: list[tuple[Any, Any]] = []
    peak = Peak()
    wall = cpu = 0.0
    for i in range(0, len(events), CHUNK):
        w0, c0 = time.perf_counter(), time.process_time()
        for f in events[i : i + CHUNK]:
            st = states.get(f.origin)
            if st is None:
                st = states[f.origin] = cls()
            r = st.process(f, f.minute)
            if r:
                matches.extend((f.origin, x) for x in r)
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        if sample:
            partial = held = 0
            for s in states.values():
                if isinstance(s, CascadeBaseline):
                    partial += len(s.open) + len(s.held)
                    held += len({id(f) for c in s.open for f in c[2]} | {id(f) for h in s.held for f in h[2]})
                elif s.pending is not None:
                    partial += 1
                    held += 1
            peak.update(partial, held, None)
    w0, c0 = time.perf_counter(), time.process_time()
    for k, st in states.items():
        matches.extend((k, x) for x in st.advance_time(END))
    wall += time.perf_counter() - w0
    cpu += time.process_time() - c0
    return {"wall": wall, "cpu": cpu, "matches": matches, "timeouts": None, "peak": peak}


def per_key(pairs: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for k, m in pairs:
        out.setdefault(k, []).append(m if isinstance(m, dict) else m.to_dict())
    return out


def median_run(fn: Callable[[bool], dict[str, Any]], repeat: int) -> dict[str, Any]:
    """``fn(sample)`` ``repeat`` times (the first also samples the state): the median
    wall and CPU times, the first run's results."""
    runs = [fn(i == 0) for i in range(repeat)]
    first = runs[0]
    first["wall"] = statistics.median(r["wall"] for r in runs)
    first["cpu"] = statistics.median(r["cpu"] for r in runs)
    return first


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None, help="rows to read (default: all)")
    ap.add_argument("--path", default=None, help=f"input (default: {DATA_PATH} if present, else the bundled sample)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration; the median is reported")
    ap.add_argument("--default-gc", action="store_true", help="keep Python's default GC thresholds")
    ap.add_argument("--only", choices=["sql"], default=None, help="run only the SQL-over-parquet comparison")
    args = ap.parse_args(argv)
    path = args.path or (DATA_PATH if os.path.exists(DATA_PATH) else str(DEFAULT_INPUT))
    old_gc = gc.get_threshold()
    if not args.default_gc:
        gc.set_threshold(*GC_THRESHOLD)
    try:
        if args.only == "sql":
            n = count_flights(path, args.rows)
            rows_out, ratios = compare_sql(path, args.rows, max(1, args.repeat), n)
            print(table(HEADER, rows_out))
            print(json.dumps(ratios))
        else:
            _bench(path, args.rows, max(1, args.repeat), args.default_gc)
    finally:
        gc.set_threshold(*old_gc)


def _bench(path: str, rows: int | None, repeat: int, default_gc: bool) -> None:
    events, load_s = load(path, rows)
    # the preloaded events (millions of tracked objects) would otherwise be scanned by
    # every full GC collection during the dataflow runs, which do not use them
    gc.collect()
    gc.freeze()
    try:
        _compare(path, rows, repeat, default_gc, events, load_s)
    finally:
        gc.unfreeze()


def _compare(
    path: str, rows: int | None, repeat: int, default_gc: bool, events: list[FlightEvent], load_s: float
) -> None:
    n = len(events)
    print(
        f"{os.path.basename(path)}: {n:,} flights keyed by origin ({len({f.origin for f in events})} keys), "
        f"hourly epochs, 1 worker; GC threshold {gc.get_threshold()}{' (default)' if default_gc else ''}; "
        f"median of {repeat}"
    )
    print(f"loading them as FlightEvent objects for the loops: {load_s:.2f} s ({n / load_s:,.0f} rows/s)\n")
    rows_out = []

    def row(pattern: str, engine: str, r: dict[str, Any], matches: int, timeouts: Any, peak: Peak) -> None:
        rows_out.append(
            [
                pattern, engine, n / r["wall"], n / r["cpu"], r["wall"], matches,
                "-" if timeouts is None else timeouts, peak.partial, peak.events,
                "-" if peak.bytes is None else f"{peak.bytes / 1024:,.0f} KiB",
            ]
        )  # fmt: skip

    for name in PATTERNS:
        df = median_run(partial(run_dataflow, path, rows, [name], True), repeat)
        df_nt = median_run(lambda s, nm=name: run_dataflow(path, rows, [nm], False, False), repeat)  # type: ignore[misc]
        mt = median_run(partial(run_matcher, events, name), repeat)
        bl = median_run(partial(run_baseline, events, name), repeat)
        m, t, late = df["sinks"][name]
        got = per_key([(k, v) for _, k, v in sorted(m.items, key=lambda x: x[0])])
        assert late.count == 0, "the file is in time order: nothing can be late"
        assert got == per_key(mt["matches"]) == per_key(bl["matches"]), f"{name}: the engines disagree"
        assert df_nt["sinks"][name][0].count == m.count
        row(name, "tstate dataflow", df, m.count, t.count, df["peaks"][name])
        row(name, "... no timeouts", df_nt, df_nt["sinks"][name][0].count, None, Peak())
        rows_out[-1][-3:] = ["", "", ""]
        row(name, "matcher loop", mt, len(mt["matches"]), mt["timeouts"], mt["peak"])
        row(name, "baseline", bl, len(bl["matches"]), None, bl["peak"])
    both = median_run(lambda s: run_dataflow(path, rows, list(PATTERNS), True, False), repeat)  # type: ignore[misc]
    rows_out.append(
        ["both patterns", "tstate dataflow", n / both["wall"], n / both["cpu"], both["wall"],
         sum(s[0].count for s in both["sinks"].values()), sum(s[1].count for s in both["sinks"].values()), "", "", ""]
    )  # fmt: skip
    sql_rows, ratios = compare_sql(path, rows, repeat, n)
    rows_out += sql_rows
    # the dataflows' own speed (events/s of wall and of CPU time): what a before/after
    # comparison of the engine reads (benchmarks.before_after)
    ratios["both_patterns_events_per_s"] = round(n / both["wall"])
    ratios["both_patterns_cpu_events_per_s"] = round(n / both["cpu"])
    print(table(HEADER, rows_out))
    print("\nevery engine found the same matches, per key and in order")
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
