"""Live rescaling 4 -> 8 -> 4 workers of a keyed state of 1M keys, per strategy.

For each strategy (all-at-once, fluid, batched), in its own process (for its peak
memory): preload ``--keys`` keys (a list of 25 ints each, ~100 B encoded), run a steady
input of ``--rate`` updates per epoch, rescale 4 -> 8, let the migration finish, run
steady again, rescale 8 -> 4, and so on.  Epoch latency = wall time from closing the
epoch's input to the output frontier passing it; the processing thread's CPU time for
the same span is recorded too (on a shared machine it is what the dataflow itself
spent, without the time other processes took the CPU).  The ``rescale`` call itself
(planning the steps) runs on the processing thread between two epochs: its time is
added to the first epoch of the migration, and shown on its own.

Each process also runs a *twin*: the same dataflow, preload and input on 4 workers that
never move, its epochs interleaved with the migrating one's (epoch for epoch), so both
see the same load and the same ageing of the heap.  Epochs get slower as the run goes
on without any migration (the update ``values[i] += 1`` puts every new int somewhere
else in a 1 GB heap: later epochs miss the CPU caches more), the load of a shared
machine comes and goes, and the maximum of a thousand epochs is further out in the
tail than the p99 of a hundred: the twin shows all three without a move (its maximum
over the migration's epochs over its steady p99; its throughput after over before), and
``÷ twin`` divides them out.  After the last phase, epochs whose keys all lie in bins
that moved alternate with epochs whose keys lie in bins that never moved (``moved /
unmoved``: what moving left behind in the moved state itself).  Per strategy it also
prints where the processing thread's CPU time goes in the epochs before, during and
after the migrations, and in the worst epochs (:class:`Breakdown`).

Prints two tables; writes the latency plot (every strategy, and batched's twin) to
``benchmarks/results/migration.png``; the last line is JSON with the ratios, per
strategy: ``<s>_max_over_steady_p99`` and ``<s>_throughput_after_over_before`` (wall
time, as the targets say), the same in CPU time (``<s>_cpu_...``), the twin's
(``<s>_twin_...``) and divided by the twin's (``..._over_twin``),
``<s>_moved_over_unmoved_cpu``; ``fluid_seconds_over_issue`` (over the 136.3 s the
issue quotes) and ``fluid_seconds_over_steady_floor`` (over its epochs at the steady
p50).

    python -m benchmarks.migration [--keys N] [--bins B] [--rate R] [--steady E]

Targets (issues 4, 15): batched max latency <= 1/10 of all-at-once and <= 2x the
steady p99; throughput after the migration >= 0.9x before; fluid in a third of the
136 s it took when issue 15 was opened.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Optional

import tstate as ts
from benchmarks.common import EpochDriver, table
from tstate.metrics import plot_latency
from tstate.migration.planner import plan, rescale_map

WIDTH = 25


def _update(values: list[int], rec: tuple[int, int], ctx: ts.Context) -> None:
    if not values:
        values.extend(range(rec[1], rec[1] + WIDTH))
    else:
        values[rec[1] % WIDTH] += 1


PARTS = ("apply", "route", "progress", "encode", "decode", "hand-over")


class Breakdown:
    """The processing thread's CPU time in the parts of an epoch: ``apply`` (records
    applied to state), ``route`` (records split by key for the exchange), ``progress``
    (pointstamp propagation), ``encode`` / ``decode`` (a moving bin's payload),
    ``hand-over`` (the bin leaving its sender and installed at its receiver, with the
    records that waited for it); ``other`` is the rest of the epoch (the step loop,
    buffering, capabilities, the driver); ``gc`` (cyclic collections) is shown apart:
    it runs inside the others.  Measured by wrapping those functions (a few dozen calls
    per epoch)."""

    def __init__(self) -> None:
        import gc

        from tstate.engine.channels import ExchangeRouter
        from tstate.engine.execution import Execution
        from tstate.operators.stateful import StatefulRuntime
        from tstate.state import payload

        self.acc = dict.fromkeys([*PARTS, "gc"], 0.0)
        for owner, name, part in (
            (StatefulRuntime, "_apply", "apply"), (ExchangeRouter, "split", "route"),
            (Execution, "_propagate", "progress"), (payload, "encode_bin", "encode"), (payload, "decode_bin", "decode"),
            (StatefulRuntime, "remove_bin", "hand-over"), (StatefulRuntime, "receive_bin", "hand-over"),
        ):
            self._wrap(owner, name, part)
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _wrap(self, owner: object, name: str, part: str) -> None:
        f = getattr(owner, name)
        acc, clock = self.acc, time.thread_time

        def timed(*args: object, **kw: object) -> object:
            t0 = clock()
            try:
                return f(*args, **kw)
            finally:
                acc[part] += clock() - t0

        setattr(owner, name, timed)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            self.acc["gc"] += time.thread_time() - self._gc_start

    def snapshot(self) -> dict[str, float]:
        return dict(self.acc)

    def since(self, before: dict[str, float], total: float) -> dict[str, float]:
        out = {k: self.acc[k] - before[k] for k in PARTS}
        out["other"] = total - sum(out.values())
        out["gc (within)"] = self.acc["gc"] - before["gc"]
        return out


def _ms_parts(parts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * 1000:.1f}" for k, v in parts.items())


#: fluid's migration time when issue 15 was opened (benchmarks/results/migration.txt then)
FLUID_SECONDS_ISSUE = 136.3

STEADY = ("steady (4)", "steady (8)", "steady (4) after")


class Run:
    """One execution of the benchmark's dataflow on 4 of 8 workers, driven epoch by
    epoch; ``lat``: ``(epoch, wall s, CPU s, phase)`` per epoch, ``parts``: its CPU
    time per part (:class:`Breakdown`)."""

    def __init__(self, keys: int, bins: int, rate: int) -> None:
        flow = ts.Dataflow("migration")
        inp = flow.input("updates", batch_size=4096)
        self.op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=bins, name="state")(_update)
        self.inp = inp
        probe = self.op.probe()
        self.ex = flow.start(4, max_workers=8)
        self.driver = EpochDriver(inp, probe, self.ex)
        self.rng = random.Random(1)
        self.keys, self.rate = keys, rate
        self.lat: list[tuple[int, float, float, str]] = []
        self.parts: list[dict[str, float]] = []
        self.driver.preload(keys)

    def epoch(self, phase: str, breakdown: Breakdown, extra: tuple[float, float] = (0.0, 0.0)) -> None:
        rng, keys = self.rng, self.keys
        records = [(rng.randrange(keys), rng.randrange(1000)) for _ in range(self.rate)]
        p0 = breakdown.snapshot()
        c0 = time.thread_time()
        wall = self.driver.run(records)
        cpu = time.thread_time() - c0
        self.lat.append((self.driver.epoch, wall + extra[0], cpu + extra[1], phase))
        self.parts.append(breakdown.since(p0, cpu))
        if extra[1]:
            self.parts[-1]["rescale call"] = extra[1]

    def moving(self) -> bool:
        return any(self.ex.operators[w][self.op.node].moves.outgoing for w in range(8))

    def stats(self) -> dict[str, float]:
        """Latency (wall and CPU): steady p50 / p99, the maximum and p50 over the
        migrations' epochs; throughput (updates per second of epoch latency) before,
        in the middle and after."""
        out: dict[str, float] = {}
        for i, clock in ((1, ""), (2, "cpu_")):
            steady = [r[i] for r in self.lat if r[3] in STEADY]
            window = [r[i] for r in self.lat if "->" in r[3]]
            out[f"{clock}steady_p50"] = statistics.median(steady)
            out[f"{clock}steady_p99"] = statistics.quantiles(steady, n=100)[98]
            out[f"{clock}migration_p50"] = statistics.median(window)
            out[f"{clock}migration_max"] = max(window)
            for name, phase in (("before", STEADY[0]), ("mid", STEADY[1]), ("after", STEADY[2])):
                xs = [r[i] for r in self.lat if r[3] == phase]
                out[f"{clock}throughput_{name}"] = len(xs) * self.rate / sum(xs)
        return out

    def close(self) -> None:
        self.inp.close()
        self.ex.run()


def one(strategy: str, keys: int, bins: int, rate: int, steady: int) -> dict:
    breakdown = Breakdown()
    run, twin = Run(keys, bins, rate), Run(keys, bins, rate)
    ex, node = run.ex, run.op.node
    calls: list[tuple[float, float]] = []  # the rescale calls (wall s, CPU s)

    def epoch(phase: str, extra: tuple[float, float] = (0.0, 0.0)) -> None:
        run.epoch(phase, breakdown, extra)
        twin.epoch(phase, breakdown)

    def migrate(workers: int, phase: str) -> tuple[float, float, int]:
        """(wall s, CPU s, bins moved): the migrating run's epochs only"""
        moves_before = len(ex.metrics.moves)
        t0, c0 = time.perf_counter(), time.thread_time()
        steps = ex.rescale(workers, at=run.driver.epoch + 1, strategy=strategy)
        call = (time.perf_counter() - t0, time.thread_time() - c0)
        calls.append(call)
        last = max(t for ts_ in steps.values() for t in ts_)
        first = len(run.lat)
        epoch(phase, call)  # the epoch that waited for the call
        while run.driver.epoch <= last or run.moving():
            epoch(phase)
        mine = run.lat[first:]
        return sum(r[1] for r in mine), sum(r[2] for r in mine), len(ex.metrics.moves) - moves_before

    for _ in range(steady):
        epoch(STEADY[0])
    dur_out, cpu_out, moved_out = migrate(8, "4 -> 8")
    for _ in range(steady):
        epoch(STEADY[1])
    dur_in, cpu_in, moved_in = migrate(4, "8 -> 4")
    for _ in range(steady):
        epoch(STEADY[2])
    moved_bins = {m.bin for m in ex.metrics.moves}
    moved_over_unmoved = moved_vs_unmoved(run.driver, ex.key_bins[node], moved_bins, rate, steady, run.rng)
    run.close()
    twin.close()
    lat, parts = run.lat, run.parts
    out: dict[str, Any] = {
        "strategy": strategy,
        "migration_seconds": dur_out + dur_in,
        "migration_cpu_seconds": cpu_out + cpu_in,
        "migration_epochs": sum(1 for r in lat if "->" in r[3]),
        "bins_moved": moved_out + moved_in,
        "bytes_moved": ex.metrics.bytes_moved,
        "rescale_call_ms": [c[0] * 1000 for c in calls],
        "rescale_call_cpu_ms": [c[1] * 1000 for c in calls],
        "moved_over_unmoved_cpu": moved_over_unmoved,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "latency": [(e, s) for e, s, _, _ in lat],
        "twin_latency": [(e, s) for e, s, _, _ in twin.lat],
        **run.stats(),
        **{f"twin_{k}": v for k, v in twin.stats().items()},
    }
    before_i = [i for i, r in enumerate(lat) if r[3] == STEADY[0]]
    after_i = [i for i, r in enumerate(lat) if r[3] == STEADY[2]]
    mig_i = [i for i, r in enumerate(lat) if "->" in r[3]]
    mean = lambda idx: {k: statistics.fmean(parts[i].get(k, 0.0) for i in idx) for k in parts[0]}  # noqa: E731

    def epoch_parts(i: int) -> dict[str, Any]:
        return {"epoch": lat[i][0], "phase": lat[i][3], "wall": lat[i][1], "cpu": lat[i][2], "parts": parts[i]}

    out["breakdown"] = {
        "before_mean": mean(before_i), "migration_mean": mean(mig_i), "after_mean": mean(after_i),
        "worst_cpu": epoch_parts(max(mig_i, key=lambda i: lat[i][2])),
        "worst_wall": epoch_parts(max(mig_i, key=lambda i: lat[i][1])),
    }
    return out


def ratios_of(r: dict[str, Any]) -> dict[str, float]:
    """A strategy's ratios (see the module docstring)."""
    s = r["strategy"]
    out: dict[str, float] = {}
    for clock in ("", "cpu_"):
        mine = r[f"{clock}migration_max"] / r[f"{clock}steady_p99"]
        twin = r[f"twin_{clock}migration_max"] / r[f"twin_{clock}steady_p99"]
        thr = r[f"{clock}throughput_after"] / r[f"{clock}throughput_before"]
        thr_twin = r[f"twin_{clock}throughput_after"] / r[f"twin_{clock}throughput_before"]
        out[f"{s}_{clock}max_over_steady_p99"] = mine
        out[f"{s}_twin_{clock}max_over_steady_p99"] = twin
        out[f"{s}_{clock}throughput_after_over_before"] = thr
        out[f"{s}_twin_{clock}throughput_after_over_before"] = thr_twin
        out[f"{s}_{clock}throughput_after_over_before_over_twin"] = thr / thr_twin
    out[f"{s}_moved_over_unmoved_cpu"] = r["moved_over_unmoved_cpu"]
    out[f"{s}_seconds"] = r["migration_seconds"]
    out[f"{s}_cpu_seconds"] = r["migration_cpu_seconds"]
    return out


def moved_vs_unmoved(driver: EpochDriver, key_bins: dict, moved_bins: set[int], rate: int, n: int,
                     rng: random.Random) -> float:
    """After the migrations: the CPU time of epochs whose keys are all in bins that
    moved (out and back) over epochs whose keys are all in bins that never moved,
    ``n`` of each, interleaved (the same heap, the same load): what moving left
    behind in the moved state itself.  The control uses the bins batched would move."""
    pools: dict[bool, list[object]] = {True: [], False: []}
    for k, b in key_bins.items():
        pools[b in moved_bins].append(k)
    cost: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * n):
        side = i % 2 == 0
        pool = pools[side]
        records = [(pool[rng.randrange(len(pool))], rng.randrange(1000)) for _ in range(rate)]
        c0 = time.thread_time()
        driver.run(records)
        cost[side].append(time.thread_time() - c0)
    return statistics.median(cost[True]) / statistics.median(cost[False])


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bins", type=int, default=4096)
    ap.add_argument("--rate", type=int, default=5000, help="updates per epoch")
    ap.add_argument("--steady", type=int, default=40, help="steady epochs per phase")
    ap.add_argument("--strategies", default="all-at-once,fluid,batched")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--png", default=os.path.join("benchmarks", "results", "migration.png"))
    args = ap.parse_args(argv)
    if args.one:  # child process: one strategy, JSON on stdout
        print(json.dumps(one(args.one, args.keys, args.bins, args.rate, args.steady)))
        return
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    results = []
    for strategy in args.strategies.split(","):
        cmd = [sys.executable, "-m", "benchmarks.migration", "--one", strategy, "--keys", str(args.keys),
               "--bins", str(args.bins), "--rate", str(args.rate), "--steady", str(args.steady)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    load_after = os.getloadavg()[0]
    ratios: dict[str, float] = {}
    for r in results:
        ratios.update(ratios_of(r))
    ms = lambda s: s * 1000  # noqa: E731
    print(
        f"rescale 4 -> 8 -> 4 workers: {args.keys:,} keys, {args.bins} bins, {args.rate:,} updates/epoch, "
        f"{args.steady} epochs per steady phase (one process per strategy, each with a twin that never moves; "
        f"load average {load_before:.1f} before, {load_after:.1f} after, {time.perf_counter() - started:.0f} s)"
    )
    print("\nlatency (ms): max = the largest epoch latency during the migrations (the twin: over the same epochs)")
    print(table(
        ["strategy", "steady p50", "steady p99", "max", "max / steady p99", "twin: max / steady p99",
         "CPU: steady p99", "CPU: max", "CPU: max / steady p99", "twin CPU: max / steady p99", "rescale calls ms"],
        [
            (
                r["strategy"], f"{ms(r['steady_p50']):.1f}", f"{ms(r['steady_p99']):.1f}", f"{ms(r['migration_max']):.1f}",
                f"{ratios[s + '_max_over_steady_p99']:.2f}", f"{ratios[s + '_twin_max_over_steady_p99']:.2f}",
                f"{ms(r['cpu_steady_p99']):.1f}", f"{ms(r['cpu_migration_max']):.1f}",
                f"{ratios[s + '_cpu_max_over_steady_p99']:.2f}", f"{ratios[s + '_twin_cpu_max_over_steady_p99']:.2f}",
                " / ".join(f"{c:.0f}" for c in r["rescale_call_ms"]),
            )
            for r in results
            for s in [r["strategy"]]
        ],
    ))
    print("\nthroughput after / before (updates per second of epoch latency, the last steady phase over the first) "
          "and the cost of moving")
    print(table(
        ["strategy", "after/before", "twin", "÷ twin", "CPU: after/before", "CPU: twin", "CPU: ÷ twin",
         "CPU: moved / unmoved keys after", "migration s", "migration CPU s", "migration epochs", "bins moved",
         "MB moved", "peak RSS MB (both runs)"],
        [
            (
                s, f"{ratios[s + '_throughput_after_over_before']:.2f}",
                f"{ratios[s + '_twin_throughput_after_over_before']:.2f}",
                f"{ratios[s + '_throughput_after_over_before_over_twin']:.2f}",
                f"{ratios[s + '_cpu_throughput_after_over_before']:.2f}",
                f"{ratios[s + '_twin_cpu_throughput_after_over_before']:.2f}",
                f"{ratios[s + '_cpu_throughput_after_over_before_over_twin']:.2f}",
                f"{r['moved_over_unmoved_cpu']:.2f}", f"{r['migration_seconds']:.1f}",
                f"{r['migration_cpu_seconds']:.1f}", r["migration_epochs"], r["bins_moved"],
                f"{r['bytes_moved'] / 1e6:.1f}", f"{r['peak_rss_mb']:.0f}",
            )
            for r in results
            for s in [r["strategy"]]
        ],
    ))
    print("\nwhere the migrating run's CPU time goes, ms per epoch (see Breakdown):")
    for r in results:
        b = r["breakdown"]
        for phase in ("before", "migration", "after"):
            print(f"  {r['strategy']}: {phase} mean: {_ms_parts(b[phase + '_mean'])}")
        for which in ("worst_cpu", "worst_wall"):
            w = b[which]
            print(f"  {r['strategy']}: {which.replace('_', ' ')} epoch ({w['phase']}, epoch {w['epoch']}: wall "
                  f"{w['wall'] * 1000:.1f}, CPU {w['cpu'] * 1000:.1f}): {_ms_parts(w['parts'])}")
    by = {r["strategy"]: r for r in results}
    if "batched" in by and "all-at-once" in by:
        ratios["batched_max_over_all_at_once_max"] = by["batched"]["migration_max"] / by["all-at-once"]["migration_max"]
        print(f"batched max latency / all-at-once max latency = {ratios['batched_max_over_all_at_once_max']:.3f}")
    if "fluid" in by:
        f = by["fluid"]
        ratios["fluid_seconds_over_issue"] = f["migration_seconds"] / FLUID_SECONDS_ISSUE
        ratios["fluid_cpu_seconds_over_issue"] = f["migration_cpu_seconds"] / FLUID_SECONDS_ISSUE
        # one bin per step, one step per epoch: the epochs at the steady pace are a floor
        floor = f["migration_epochs"] * f["steady_p50"]
        cpu_floor = f["migration_epochs"] * f["cpu_steady_p50"]
        ratios["fluid_seconds_over_steady_floor"] = f["migration_seconds"] / floor
        ratios["fluid_cpu_seconds_over_steady_floor"] = f["migration_cpu_seconds"] / cpu_floor
        print(f"fluid: {f['migration_seconds']:.1f} s of epochs ({f['migration_cpu_seconds']:.1f} s CPU) = "
              f"{ratios['fluid_seconds_over_issue']:.2f} x ({ratios['fluid_cpu_seconds_over_issue']:.2f} x in CPU) the "
              f"{FLUID_SECONDS_ISSUE} s of issue 15: {f['bins_moved']:,} one-bin steps in {f['migration_epochs']:,} "
              f"epochs; those epochs at the steady p50 take {floor:.1f} s ({cpu_floor:.1f} s CPU): fluid takes "
              f"{ratios['fluid_seconds_over_steady_floor']:.2f} x ({ratios['fluid_cpu_seconds_over_steady_floor']:.2f} x "
              "in CPU) that floor")
    series = {r["strategy"]: r["latency"] for r in results}
    if "batched" in by:
        series["no migration (batched's twin)"] = by["batched"]["twin_latency"]
    plot_latency(series, args.png, title=f"epoch latency, rescale 4 -> 8 -> 4 ({args.keys:,} keys, {args.bins} bins)")
    print(f"plot: {args.png}")
    print(json.dumps({k: round(v, 4) for k, v in ratios.items()}))


if __name__ == "__main__":
    main()
