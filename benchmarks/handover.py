"""The hand-over of live rescaling 4 -> 8 workers, per strategy and state size (issue 16).

For each state size (``--sizes``, default 250k, 1M and 4M keys; each key a ``list[int]``
of 8 ints) and each strategy (all-at-once, batched, fluid, precopy), in its own process:
preload the keys, checkpoint every ``--every`` epochs (``mode="async"``, the default),
run ``--steady`` epochs of 1% churn (``--churn``: that share of the keys updated per
epoch), rescale 4 -> 8 workers (4096 bins, half of them move), run epochs until the
last bin has moved, and ``--after`` more.  Epoch latency = wall time from closing the
epoch's input to the output frontier passing it (:class:`benchmarks.common.EpochDriver`).

Each process also runs a *twin* (the same dataflow, preload and churn on 4 workers that
never move, its epochs interleaved with the migrating run's, every epoch during the
steady phases and short moves, every 4th during moves longer than 64 epochs), as
``benchmarks.migration`` does: the **steady p99** is the twin's p99 over the same span
of epochs (the same heap ageing and machine load, no move), and ``max / steady p99`` is
the migrating run's worst epoch from the rescale call (planning it is on the processing
thread: its time counts in the first epoch) to the last hand-over, over it.

**Bytes at the hand-over** are the bytes handed from old to new owners at the moves
(``Metrics.bytes_moved``: whole encoded bins for all-at-once, batched and fluid; the
deltas for precopy, whose bins were read from the checkpoint before their step);
**moved state** is the encoded size of the bins that moved (``encode_bin`` of each,
right after the migration).  For precopy also: bins preloaded and bytes read from the
checkpoint store, copies re-based on a newer checkpoint, fallbacks to whole bins.

Prints a table, writes it to ``benchmarks/results/handover.txt`` (``--out``), plots
epoch latency over time for the 1M-key case (``--png``: every strategy and precopy's
twin); the last line is JSON with ``precopy_handover_bytes_ratio`` and
``precopy_max_over_steady_p99`` at 1M keys (``--ratio-size``), the same per size
(``..._<size>``) and per strategy (``<s>_max_over_steady_p99_<size>``,
``<s>_handover_bytes_ratio_<size>``).

    python -m benchmarks.handover [--quick] [--sizes 250000,1000000,4000000]
                                  [--strategies all-at-once,batched,fluid,precopy]
                                  [--skip-at-largest fluid]

``--quick``: 20k, 50k and 100k keys, fewer epochs (a check that it runs, not figures).
Every run's measurements are kept in ``--raw`` (``benchmarks/results/handover.json``) as
they come; ``--reuse`` takes the runs found there instead of running them again (the
sizes can be measured in separate invocations, the last one printing the whole table).
``--skip-at-largest``: strategies not run at the largest size (fluid moves one bin per
epoch: 2,048 epochs at 4M keys take long on a shared machine); ``--skip
fluid:1000000,...``: strategy and size pairs not run; the table's first line says which.
The checkpoints go to ``/dev/shm`` where it exists (tmpfs: the syncs of a shared VM
disk would otherwise time the disk).

Targets (issue 16): precopy's hand-over bytes <= 10% of the moved state's bytes, its
worst epoch <= 1.5x the steady p99, nearly flat from 250k to 4M keys.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import tstate as ts
from benchmarks.common import EpochDriver, table
from tstate.metrics import plot_latency

WIDTH = 8
STRATEGIES = ("all-at-once", "batched", "fluid", "precopy")


def _update(values: list[int], rec: tuple[int, int], ctx: ts.Context) -> None:
    if not values:
        values.extend(range(rec[1], rec[1] + WIDTH))
    else:
        values[rec[1] % WIDTH] += 1


class Run:
    """One execution on 4 of 8 workers with checkpoints, driven epoch by epoch."""

    def __init__(self, keys: int, bins: int, every: int, directory: str) -> None:
        flow = ts.Dataflow("handover")
        inp = flow.input("updates", batch_size=4096)
        self.op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=bins, name="state")(_update)
        self.inp = inp
        probe = self.op.probe()
        self.ex = flow.start(4, max_workers=8, checkpoint=ts.Checkpoints(directory, every_epochs=every))
        files = self.ex.coordinator.capturer.files
        if files is not None:  # the writer process takes the files and commits once started:
            files.ready.wait(120)  # until then a thread does, starved by the busy processing loop
        self.driver = EpochDriver(inp, probe, self.ex)
        self.lat: list[tuple[int, float, str]] = []
        self.driver.preload(keys, chunk=200_000)

    def epoch(self, records: list[Any], phase: str, extra: float = 0.0) -> float:
        wall = self.driver.run(records) + extra
        self.lat.append((self.driver.epoch, wall, phase))
        return wall

    def settled(self) -> bool:
        c = self.ex.coordinator
        return c.capturer.active is None and not c.uncommitted

    def moving(self) -> bool:
        ex = self.ex
        return ex.precopy.pending or any(ex.operators[w][self.op.node].moves.outgoing for w in range(ex.workers))


def one(strategy: str, keys: int, bins: int, churn: float, steady: int, after: int, every: int) -> dict[str, Any]:
    from tstate.state.payload import encode_bin

    # checkpoints on tmpfs where there is one: a shared VM disk's syncs would time the
    # disk (the writer process falls behind and the processing thread waits for it)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="tstate-handover-", dir=shm)
    try:
        started = time.perf_counter()
        run = Run(keys, bins, every, os.path.join(base, "run"))
        twin = Run(keys, bins, every, os.path.join(base, "twin"))
        rate = max(1, int(keys * churn))
        rng = random.Random(1)

        def records() -> list[tuple[int, int]]:
            return [(rng.randrange(keys), rng.randrange(1000)) for _ in range(rate)]

        for _ in range(60):  # warm up: the preload's checkpoints written and committed
            recs = records()
            run.driver.run(recs)
            twin.driver.run(recs)
            if run.driver.epoch >= 12 and run.settled() and twin.settled():
                break
            time.sleep(0.05)  # (the writer's acknowledgements need the interpreter lock now and then)
        preloaded = time.perf_counter() - started
        for _ in range(steady):
            recs = records()
            run.epoch(recs, "steady")
            twin.epoch(recs, "steady")
        ex, node = run.ex, run.op.node
        first = len(run.lat)
        twin_first = len(twin.lat)
        t0 = time.perf_counter()
        steps = ex.rescale(8, at=run.driver.epoch + 1, strategy=strategy)
        call = time.perf_counter() - t0
        last = max(t for times in steps.values() for t in times)
        n_steps = len({t for times in steps.values() for t in times})
        sample = 1 if n_steps <= 64 else 4
        i = 0
        recs = records()
        run.epoch(recs, "move", call)
        twin.epoch(recs, "move")
        while run.driver.epoch <= last or run.moving():
            recs = records()
            run.epoch(recs, "move")
            i += 1
            if i % sample == 0:
                twin.epoch(recs, "move")
        move = [r[1] for r in run.lat[first:]]
        move_epochs = len(move)
        for _ in range(after):
            recs = records()
            run.epoch(recs, "after")
            twin.epoch(recs, "after")
        moved = sorted({m.bin for m in ex.metrics.moves})
        owners = ex.configs[node].final()
        moved_bytes = 0
        for b in moved:
            rt: Any = ex.operators[owners[b]][node]
            moved_bytes += len(encode_bin(rt.bin(b), rt.codec, rt.name))
        steady_lat = [r[1] for r in run.lat[:first]]
        twin_lat = [r[1] for r in twin.lat]  # steady phase, the move's span and after: it never moves
        twin_move = [r[1] for r in twin.lat[twin_first:] if r[2] == "move"]
        pc = ex.precopy.stats
        out: dict[str, Any] = {
            "strategy": strategy,
            "keys": keys,
            "rate": rate,
            "steps": n_steps,
            "move_epochs": move_epochs,
            "move_seconds": sum(move),
            "rescale_call_s": call,
            "max": max(move),
            "move_p50": statistics.median(move),
            "steady_p50": statistics.median(twin_lat),
            "steady_p99": statistics.quantiles(twin_lat, n=100)[98],
            "own_steady_p99": statistics.quantiles(steady_lat, n=100)[98],
            "twin_move_max": max(twin_move) if twin_move else 0.0,
            "bins_moved": len(moved),
            "handover_bytes": ex.metrics.bytes_moved,
            "moved_state_bytes": moved_bytes,
            "precopy": {
                "handovers": pc.handovers, "fallbacks": pc.fallbacks, "fallback_reasons": pc.fallback_reasons,
                "preloaded": pc.preloaded, "preload_bytes": pc.preload_bytes, "preload_s": pc.preload_seconds,
                "late": pc.late, "rebased": pc.rebased, "rebase_bytes": pc.rebase_bytes, "delta_keys": pc.delta_keys,
                "handover_s": pc.handover_seconds, "undecoded": pc.undecoded,
            },
            "checkpoints_skipped": len(ex.coordinator.skipped),
            # how far commits lag behind captures at the end (a writer that cannot keep up)
            "uncommitted_at_end": len(ex.coordinator.uncommitted),
            "commit_lag_epochs": (ex.coordinator.last_time or 0) - (ex.coordinator.committed[-1] if ex.coordinator.committed else 0),
            "preload_s": preloaded,
            "total_s": time.perf_counter() - started,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "latency": [(e, s) for e, s, _ in run.lat],
            "twin_latency": [(e, s) for e, s, _ in twin.lat],
        }
        out["max_over_steady_p99"] = out["max"] / out["steady_p99"]
        out["handover_bytes_ratio"] = out["handover_bytes"] / moved_bytes if moved_bytes else 0.0
        for r in (run, twin):  # done: the writer processes are stopped, not waited for
            files = r.ex.coordinator.capturer.files
            if files is not None and getattr(files, "_proc", None) is not None:
                files._proc.kill()
        return out
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="250000,1000000,4000000")
    ap.add_argument("--bins", type=int, default=4096)
    ap.add_argument("--churn", type=float, default=0.01, help="share of the keys updated per epoch")
    ap.add_argument("--steady", type=int, default=20, help="steady epochs before the rescale")
    ap.add_argument("--after", type=int, default=5, help="epochs after the last move")
    ap.add_argument("--every", type=int, default=4, help="a checkpoint every this many epochs")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--skip-at-largest", default="", help="strategies not run at the largest size (comma-separated)")
    ap.add_argument("--skip", default="", help="strategy:keys pairs not run (comma-separated), e.g. fluid:1000000")
    ap.add_argument("--quick", action="store_true", help="small sizes, fewer epochs: does it run")
    ap.add_argument("--ratio-size", type=int, default=1_000_000, help="the size the headline ratios are taken at")
    ap.add_argument("--out", default=os.path.join("benchmarks", "results", "handover.txt"))
    ap.add_argument("--png", default=os.path.join("benchmarks", "results", "handover.png"))
    ap.add_argument("--raw", default=os.path.join("benchmarks", "results", "handover.json"),
                    help="every run's measurements, kept as they come (JSON)")
    ap.add_argument("--reuse", action="store_true",
                    help="take the runs already in --raw (same strategy and size) instead of running them again")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.steady, args.after = "20000,50000,100000", 10, 2
        if args.ratio_size == 1_000_000:
            args.ratio_size = 50_000
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.one:  # child process: one strategy and size, JSON on stdout
        r = one(args.one, sizes[0], args.bins, args.churn, args.steady, args.after, args.every)
        print(json.dumps(r), flush=True)
        os._exit(0)  # (nothing left to wait for: the executions are not finished on purpose)
    strategies = args.strategies.split(",")
    skipped = [s for s in args.skip_at_largest.split(",") if s]
    pairs = {(p.split(":")[0], int(p.split(":")[1])) for p in args.skip.split(",") if p}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    if args.reuse and os.path.exists(args.raw):
        with open(args.raw) as f:
            raw = json.load(f)
    for n in sizes:
        for s in strategies:
            if (n == max(sizes) and s in skipped) or (s, n) in pairs:
                continue
            if f"{s}@{n}" in raw:
                results.append(raw[f"{s}@{n}"])
                print(f"  {_size(n)} {s}: reused from {args.raw}", file=sys.stderr, flush=True)
                continue
            cmd = [sys.executable, "-m", "benchmarks.handover", "--one", s, "--sizes", str(n), "--bins", str(args.bins),
                   "--churn", str(args.churn), "--steady", str(args.steady), "--after", str(args.after),
                   "--every", str(args.every)]
            t = time.perf_counter()
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            raw[f"{s}@{n}"] = results[-1]
            os.makedirs(os.path.dirname(args.raw) or ".", exist_ok=True)
            with open(args.raw + ".tmp", "w") as f:
                json.dump(raw, f)
            os.replace(args.raw + ".tmp", args.raw)
            print(f"  {_size(n)} {s}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    ms = lambda x: x * 1000  # noqa: E731
    lines = [
        f"rescale 4 -> 8 workers, {args.bins} bins, {args.churn:.0%} of the keys updated per epoch, a checkpoint every "
        f"{args.every} epochs (async); one process per strategy and size, each with a twin that never moves "
        f"(load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, {time.perf_counter() - started:.0f} s)"
        + (f"; not run at {_size(max(sizes))}: {', '.join(skipped)}" if skipped else "")
        + (f"; not run: {', '.join(f'{s} at {_size(n)}' for s, n in sorted(pairs))}" if pairs else ""),
        "",
        table(
            ["keys", "strategy", "steps", "move epochs", "steady p50 ms", "steady p99 ms", "max ms", "max / steady p99",
             "twin max (move) ms", "hand-over MB", "moved state MB", "hand-over / moved", "precopy: preloaded, late, "
             "re-based, fallbacks", "peak RSS MB"],
            [
                (
                    _size(r["keys"]), r["strategy"], r["steps"], r["move_epochs"], f"{ms(r['steady_p50']):.1f}",
                    f"{ms(r['steady_p99']):.1f}", f"{ms(r['max']):.1f}", f"{r['max_over_steady_p99']:.2f}",
                    f"{ms(r['twin_move_max']):.1f}", f"{r['handover_bytes'] / 1e6:.2f}",
                    f"{r['moved_state_bytes'] / 1e6:.2f}", f"{r['handover_bytes_ratio']:.3f}",
                    (f"{r['precopy']['preloaded']}, {r['precopy']['late']}, {r['precopy']['rebased']}, "
                     f"{r['precopy']['fallbacks']}" if r["strategy"] == "precopy" else ""),
                    f"{r['peak_rss_mb']:.0f}",
                )
                for r in results
            ],
        ),
    ]
    ratios: dict[str, float] = {}
    for r in results:
        tag = _size(r["keys"])
        ratios[f"{r['strategy']}_max_over_steady_p99_{tag}"] = r["max_over_steady_p99"]
        ratios[f"{r['strategy']}_handover_bytes_ratio_{tag}"] = r["handover_bytes_ratio"]
        if r["strategy"] == "precopy":
            ratios[f"precopy_max_over_steady_p99_{tag}"] = r["max_over_steady_p99"]
            ratios[f"precopy_handover_bytes_ratio_{tag}"] = r["handover_bytes_ratio"]
            if r["keys"] == args.ratio_size:
                ratios["precopy_max_over_steady_p99"] = r["max_over_steady_p99"]
                ratios["precopy_handover_bytes_ratio"] = r["handover_bytes_ratio"]
    pre = [r for r in results if r["strategy"] == "precopy"]
    if len(pre) > 1:
        lo, hi = min(pre, key=lambda r: r["keys"]), max(pre, key=lambda r: r["keys"])
        ratios["precopy_max_ms_largest_over_smallest"] = hi["max"] / lo["max"]
        ratios["precopy_max_over_steady_p99_largest_over_smallest"] = hi["max_over_steady_p99"] / lo["max_over_steady_p99"]
        lines.append("")
        lines.append(
            f"precopy from {_size(lo['keys'])} to {_size(hi['keys'])} keys: worst epoch x"
            f"{ratios['precopy_max_ms_largest_over_smallest']:.2f} in ms, max / steady p99 x"
            f"{ratios['precopy_max_over_steady_p99_largest_over_smallest']:.2f}"
        )
    for r in pre:
        p = r["precopy"]
        lines.append(
            f"precopy {_size(r['keys'])}: {p['handovers']} bins handed over as deltas ({p['delta_keys']:,} keys, "
            f"{r['handover_bytes'] / 1e6:.2f} MB, {p['handover_s'] * 1000:.0f} ms in all), {p['fallbacks']} whole "
            f"{p['fallback_reasons'] or ''}; {p['preloaded']} preloaded ({p['preload_bytes'] / 1e6:.1f} MB read, "
            f"{p['preload_s']:.2f} s, {p['late']} at the hand-over), {p['rebased']} re-based "
            f"({p['rebase_bytes'] / 1e6:.2f} MB); checkpoints skipped {r['checkpoints_skipped']}"
        )
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n\n" + json.dumps({k: round(v, 4) for k, v in ratios.items()}) + "\n")
    plotted = [r for r in results if r["keys"] == args.ratio_size]
    if plotted:
        series = {r["strategy"]: r["latency"] for r in plotted}
        twin = [r for r in plotted if r["strategy"] == "precopy"] or plotted
        series["no migration (twin)"] = twin[0]["twin_latency"]
        plot_latency(series, args.png, title=f"epoch latency, rescale 4 -> 8 ({_size(args.ratio_size)} keys, {args.bins} bins)")
        print(f"plot: {args.png}")
    print(json.dumps({k: round(v, 4) for k, v in ratios.items()}))


if __name__ == "__main__":
    main()
