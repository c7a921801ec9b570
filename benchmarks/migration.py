"""Live rescaling 4 -> 8 -> 4 workers of a keyed state of 1M keys, per strategy.

For each strategy (all-at-once, fluid, batched), in its own process (for its peak
memory): preload ``--keys`` keys (a list of 25 ints each, ~100 B encoded), run a steady
input of ``--rate`` updates per epoch, rescale 4 -> 8, let the migration finish, run
steady again, rescale 8 -> 4, and so on.  Epoch latency = wall time from closing the
epoch's input to the output frontier passing it.  Prints a table; writes the latency
plot (three strategies side by side) to ``benchmarks/results/migration.png``.

    python -m benchmarks.migration [--keys N] [--bins B] [--rate R] [--steady E]

Targets (issue 4): batched max latency <= 1/10 of all-at-once and <= 2x the steady
p99; throughput after the migration within 10% of before.
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

import tstate as ts
from benchmarks.common import EpochDriver, table
from tstate.metrics import plot_latency

WIDTH = 25


def _update(values: list[int], rec: tuple[int, int], ctx: ts.Context) -> None:
    if not values:
        values.extend(range(rec[1], rec[1] + WIDTH))
    else:
        values[rec[1] % WIDTH] += 1


def one(strategy: str, keys: int, bins: int, rate: int, steady: int) -> dict:
    flow = ts.Dataflow("migration")
    inp = flow.input("updates", batch_size=4096)
    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=bins, name="state")(_update)
    probe = op.probe()
    ex = flow.start(4, max_workers=8)
    rng = random.Random(1)
    driver = EpochDriver(inp, probe, ex)
    run_epoch = driver.run
    driver.preload(keys)
    lat: list[tuple[int, float, str]] = []  # (epoch, seconds, phase)

    def steady_phase(n: int, phase: str) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            lat.append((driver.epoch, run_epoch([(rng.randrange(keys), rng.randrange(1000)) for _ in range(rate)]), phase))
        return n * rate / (time.perf_counter() - t0)

    def migrate(workers: int, phase: str) -> tuple[float, int]:
        moves_before = len(ex.metrics.moves)
        steps = ex.rescale(workers, at=driver.epoch + 1, strategy=strategy)
        last = max(t for ts_ in steps.values() for t in ts_)
        t0 = time.perf_counter()
        while driver.epoch <= last or any(ex.operators[w][op.node].outgoing for w in range(8)):
            lat.append((driver.epoch, run_epoch([(rng.randrange(keys), rng.randrange(1000)) for _ in range(rate)]), phase))
        return time.perf_counter() - t0, len(ex.metrics.moves) - moves_before

    before = steady_phase(steady, "steady (4)")
    dur_out, moved_out = migrate(8, "4 -> 8")
    mid = steady_phase(steady, "steady (8)")
    dur_in, moved_in = migrate(4, "8 -> 4")
    after = steady_phase(steady, "steady (4) after")
    inp.close()
    ex.run()
    steady_lat = [s for _, s, p in lat if p.startswith("steady")]
    mig_lat = [s for _, s, p in lat if "->" in p]
    q = statistics.quantiles(steady_lat, n=100)
    return {
        "strategy": strategy,
        "steady_p50": statistics.median(steady_lat),
        "steady_p99": q[98],
        "migration_max": max(mig_lat) if mig_lat else 0.0,
        "migration_seconds": dur_out + dur_in,
        "bins_moved": moved_out + moved_in,
        "bytes_moved": ex.metrics.bytes_moved,
        "throughput_before": before,
        "throughput_after": after,
        "throughput_mid": mid,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "latency": [(e, s) for e, s, _ in lat],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
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
    results = []
    for strategy in args.strategies.split(","):
        cmd = [sys.executable, "-m", "benchmarks.migration", "--one", strategy, "--keys", str(args.keys),
               "--bins", str(args.bins), "--rate", str(args.rate), "--steady", str(args.steady)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    ms = lambda s: s * 1000  # noqa: E731
    rows = [
        (
            r["strategy"], f"{ms(r['steady_p50']):.1f}", f"{ms(r['steady_p99']):.1f}", f"{ms(r['migration_max']):.1f}",
            f"{r['migration_max'] / r['steady_p99']:.2f}", f"{r['migration_seconds']:.1f}", r["bins_moved"],
            f"{r['bytes_moved'] / 1e6:.1f}", f"{r['throughput_after'] / r['throughput_before']:.2f}",
            f"{r['peak_rss_mb']:.0f}",
        )
        for r in results
    ]
    print(
        f"rescale 4 -> 8 -> 4 workers: {args.keys:,} keys, {args.bins} bins, {args.rate:,} updates/epoch "
        "(latency in ms; one process per strategy)"
    )
    print(table(
        ["strategy", "steady p50", "steady p99", "max during migration", "max / steady p99", "migration s",
         "bins moved", "MB moved", "throughput after/before", "peak RSS MB"],
        rows,
    ))
    by = {r["strategy"]: r for r in results}
    if "batched" in by and "all-at-once" in by:
        print(f"batched max latency / all-at-once max latency = "
              f"{by['batched']['migration_max'] / by['all-at-once']['migration_max']:.3f}")
    plot_latency({r["strategy"]: r["latency"] for r in results}, args.png,
                 title=f"epoch latency, rescale 4 -> 8 -> 4 ({args.keys:,} keys, {args.bins} bins)")
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
