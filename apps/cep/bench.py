"""Throughput of the matching engine on the flight patterns, against the hand-written
baseline.

    python -m apps.cep.bench [--rows 500000] [--repeat 3]

Reads the first ``--rows`` rows of ``flights-3m.parquet``, keys them by origin (a dict
of per-key states, as the dataflow operator will) and times the per-event calls only
(loading the data is not timed).  Each configuration runs ``--repeat`` times; the best
run is reported.  Configurations:

* ``process``: ``Matcher.process`` per event (which applies window expiry itself), with
  timed-out partial matches not reported (``report_timeouts=False``);
* ``advance+process``: ``advance_time(t)`` before every ``process`` (Flink's operator
  loop), timeouts not reported;
* ``+timeouts``: the same with timed-out partial matches reported (materialized as
  :class:`~apps.cep.matcher.TimedOut` values);
* ``baseline``: :mod:`apps.cep.baseline` (reports no timeouts).

It also checks that the engine and the baseline find the same matches.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from apps.cep.baseline import CascadeBaseline, RecoveryBaseline
from apps.cep.flights import (
    DATA_PATH,
    delay_cascade,
    read_flights,
    recovery,
    time_minutes,
)
from apps.cep.matcher import Matcher


def _nfa(
    pattern_fn: Callable, flights: list, times: list, *, report: bool, advance: bool
) -> tuple[float, list]:
    m: Matcher[Any] = Matcher(pattern_fn(), report_timeouts=report)
    proc = m.process
    adv = m.advance_time
    new = m.new_state
    states: dict[str, Any] = {}
    out: list = []
    t0 = time.perf_counter()
    for f, t in zip(flights, times):
        st = states.get(f.origin)
        if st is None:
            st = states[f.origin] = new()
        if advance:
            r, _ = adv(st, t)
            if r:
                out.extend((f.origin, x) for x in r)
        r = proc(st, f, t)
        if r:
            out.extend((f.origin, x) for x in r)
    dt = time.perf_counter() - t0
    return dt, out


def _baseline(cls: type, flights: list, times: list) -> tuple[float, list]:
    states: dict[str, Any] = {}
    out: list = []
    t0 = time.perf_counter()
    for f, t in zip(flights, times):
        st = states.get(f.origin)
        if st is None:
            st = states[f.origin] = cls()
        r = st.process(f, t)
        if r:
            out.extend((f.origin, x) for x in r)
    dt = time.perf_counter() - t0
    return dt, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--path", default=DATA_PATH)
    args = ap.parse_args(argv)
    flights = read_flights(args.path, 0, args.rows)
    times = [time_minutes(f) for f in flights]
    n = len(flights)
    print(
        f"{n:,} flights, keyed by origin ({len({f.origin for f in flights})} keys); best of {args.repeat}"
    )
    print(
        f"{'pattern':10} {'engine':18} {'events/s':>12} {'us/event':>9} {'matches':>8}"
    )
    for name, pattern_fn, cls in (
        ("cascade", delay_cascade, CascadeBaseline),
        ("recovery", recovery, RecoveryBaseline),
    ):
        runs: dict[str, tuple[float, list]] = {}
        configs: list[tuple[str, Callable[[], tuple[float, list]]]] = [
            ("process", partial(_nfa, pattern_fn, flights, times, report=False, advance=False)),
            ("advance+process", partial(_nfa, pattern_fn, flights, times, report=False, advance=True)),
            ("+timeouts", partial(_nfa, pattern_fn, flights, times, report=True, advance=True)),
            ("baseline", partial(_baseline, cls, flights, times)),
        ]
        for label, fn in configs:
            best = min((fn() for _ in range(args.repeat)), key=lambda r: r[0])
            runs[label] = best
            dt, out = best
            print(
                f"{name:10} {label:18} {n / dt:12,.0f} {dt / n * 1e6:9.2f} {len(out):8,}"
            )
        want = sorted((o, repr(m)) for o, m in runs["baseline"][1])
        for label in ("process", "advance+process", "+timeouts"):
            got = sorted((o, repr(m.to_dict())) for o, m in runs[label][1])
            assert got == want, f"{name}/{label}: the engine and the baseline disagree"
    print("engine and baseline agree on every match")


if __name__ == "__main__":
    main()
