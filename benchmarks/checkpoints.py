"""Checkpoint cost: epoch latency without checkpoints, with synchronous and with
asynchronous incremental checkpoints; bytes per incremental vs full checkpoint;
recovery time from a cold start on 1 and 4 workers.

Keyed state of ``--keys`` keys (a list of 25 ints each, ~100 B encoded), ``--touch``
of the keys updated per epoch, a checkpoint every ``--every`` epochs.  Each mode runs
in its own process.  Prints a table; writes ``benchmarks/results/checkpoints.png``.

    python -m benchmarks.checkpoints [--keys N] [--touch 0.01] [--every 10] [--epochs 60]

Targets (issue 5): asynchronous p99 <= 1.2x the no-checkpoint p99; incremental
checkpoint <= 5% of a full one when 1% of the keys changed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tstate as ts
from benchmarks.common import EpochDriver, table
from tstate.checkpoint.coordinator import Checkpoints
from tstate.metrics import plot_latency

WIDTH = 25


def _update(values: list[int], rec: tuple[int, int], ctx: ts.Context) -> None:
    if not values:
        values.extend(range(rec[1], rec[1] + WIDTH))
    else:
        values[rec[1] % WIDTH] += 1


def build() -> tuple[ts.Dataflow, ts.InputStream, ts.Probe]:
    flow = ts.Dataflow("checkpoints")
    inp = flow.input("updates", batch_size=8192)
    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=1024, name="state")(_update)
    return flow, inp, op.probe()


def one(mode: str, keys: int, touch: float, every: int, epochs: int, directory: str) -> dict:
    flow, inp, probe = build()
    cfg = None if mode == "none" else Checkpoints(directory, every_epochs=every, mode=mode, retain=2, resume=False)
    ex = flow.start(1, checkpoint=cfg)
    driver = EpochDriver(inp, probe, ex)
    run_epoch = driver.run
    driver.preload(keys)
    # let the first (full) checkpoint happen before measuring
    while ex.coordinator is not None and not ex.coordinator.committed:
        if driver.epoch < every + 1:
            run_epoch([])
        else:
            ex.step()
            time.sleep(0.005)
    rng = random.Random(3)
    n = int(keys * touch)
    lat = []
    for _ in range(epochs):
        lat.append((driver.epoch, run_epoch([(rng.randrange(keys), rng.randrange(1000)) for _ in range(n)])))
    inp.close()
    ex.run()
    result = {"mode": mode, "latency": lat}
    if ex.coordinator is not None:
        ms = ex.coordinator.store.manifests()
        result["manifest_sizes"] = [m.total_size for m in ms]
        result["capture_seconds"] = ex.coordinator.capture_seconds
        result["written"] = list(ex.coordinator.written_bytes)
    return result


def restore(directory: str, workers: int) -> float:
    flow, inp, probe = build()
    t0 = time.perf_counter()
    ex = flow.start(workers, checkpoint=Checkpoints(directory))
    took = time.perf_counter() - t0
    assert ex.restored is not None
    return took


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--touch", type=float, default=0.01)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--restore", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--png", default=os.path.join("benchmarks", "results", "checkpoints.png"))
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.keys, args.touch, args.every, args.epochs, args.dir)))
        return
    if args.restore:
        print(json.dumps({"seconds": restore(args.dir, args.restore)}))
        return
    base = tempfile.mkdtemp(prefix="tstate-bench-")
    try:
        results = {}
        for mode in ("none", "sync", "async"):
            d = os.path.join(base, mode)
            cmd = [sys.executable, "-m", "benchmarks.checkpoints", "--one", mode, "--dir", d, "--keys", str(args.keys),
                   "--touch", str(args.touch), "--every", str(args.every), "--epochs", str(args.epochs)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[mode] = json.loads(out.strip().splitlines()[-1])
        recover = {}
        for w in (1, 4):
            cmd = [sys.executable, "-m", "benchmarks.checkpoints", "--restore", str(w), "--dir", os.path.join(base, "async")]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            recover[w] = json.loads(out.strip().splitlines()[-1])["seconds"]
        ckpt_bytes = sum(
            os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(base, "async")) for f in fs
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    base_p99 = None
    for mode, r in results.items():
        lats = sorted(s for _, s in r["latency"])
        p99 = statistics.quantiles(lats, n=100)[98]
        base_p99 = base_p99 or p99
        rows.append((mode, f"{statistics.median(lats) * 1000:.1f}", f"{p99 * 1000:.1f}", f"{max(lats) * 1000:.1f}",
                     f"{p99 / base_p99:.2f}"))
    print(f"{args.keys:,} keys, {args.touch:.0%} touched per epoch, checkpoint every {args.every} epochs "
          f"(latency in ms; one process per mode)")
    print(table(["checkpoints", "p50", "p99", "max", "p99 / none p99"], rows))
    sizes = results["async"].get("manifest_sizes", [])
    print(f"checkpoint directory after the async run: {ckpt_bytes / 1e6:.1f} MB; "
          f"data referenced by the retained manifests: {[round(s / 1e6, 2) for s in sizes]} MB")
    incr = results["async"].get("written", [])
    if incr:
        full, deltas = incr[0], incr[1:]
        if deltas:
            print(f"bytes written: full checkpoint {full / 1e6:.1f} MB, incremental median "
                  f"{statistics.median(deltas) / 1e6:.2f} MB = {statistics.median(deltas) / full:.1%} of full")
    print(f"recovery from a cold start: 1 worker {recover[1]:.2f} s, 4 workers {recover[4]:.2f} s")
    plot_latency({m: r["latency"] for m, r in results.items()}, args.png,
                 title=f"epoch latency with checkpoints every {args.every} epochs ({args.keys:,} keys)")
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
