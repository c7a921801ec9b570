"""Checkpoint cost: epoch latency without checkpoints, with synchronous and with
asynchronous incremental checkpoints (on a background thread, and in a forked snapshot
process); bytes per incremental vs full checkpoint; recovery time from a cold start on
1 and 4 workers.

Keyed state of ``--keys`` keys (a list of 25 ints each, ~100 B encoded), ``--touch``
of the keys updated per epoch, a checkpoint every ``--every`` epochs.  Each mode runs
in its own process, one after the other, on the same workload and epochs:

- ``none``: no checkpoints (the reference);
- ``sync``: encoding and writing on the processing path (the baseline);
- ``async``: ``mode="async"``, the default: a copy-on-write freeze at the checkpoint,
  encoding in paced slices between steps, files written by a helper process;
- ``thread``: ``mode="thread"``, encoding and writing on a background thread;
- ``fork``: ``mode="fork"``, a forked snapshot process encodes and writes.

Besides latency it reports, per mode, the minor page faults per epoch (the fork mode's
copy-on-write shows there), and for fork mode the ``fork()`` time, the snapshot
processes' lifetime and the latency of the epochs that overlapped one.  The bytes of an
incremental checkpoint are measured twice: in the latency run (after ``--every``
epochs of changes) and in a separate run that checkpoints every epoch, so a checkpoint
follows exactly one epoch in which ``--touch`` of the keys changed (the target's
wording; in sync mode: the files are byte-identical in every mode).  Prints a table;
writes ``benchmarks/results/checkpoints.png``.

    python -m benchmarks.checkpoints [--keys N] [--touch 0.01] [--every 10] [--epochs 60]

Targets (issues 5, 15): asynchronous p99 <= 1.2x the no-checkpoint p99 with the
default mode; incremental checkpoint <= 5% of a full one when 1% of the keys changed.
For the async mode it also reports the slices (their count and length) and the
checkpoints skipped.  The last line is JSON with the ratios: ``async_p99_over_none``
(the default mode), and ``<mode>_p99_over_none`` for every mode run.
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
from tstate.engine.checkpointing.coordinator import Checkpoints
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


def _faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:  # not Linux
        return float("nan")


def one(mode: str, keys: int, touch: float, every: int, epochs: int, directory: str) -> dict:
    flow, inp, probe = build()
    cfg = None if mode == "none" else Checkpoints(directory, every_epochs=every, mode=mode, retain=2, resume=False)
    ex = flow.start(1, checkpoint=cfg)
    coord = ex.coordinator
    driver = EpochDriver(inp, probe, ex)
    run_epoch = driver.run
    driver.preload(keys)
    # let the first (full) checkpoint happen before measuring
    while coord is not None and not coord.committed:
        if driver.epoch < every + 1:
            run_epoch([])
        else:
            ex.step()
            time.sleep(0.005)
    rss = _rss_mb()
    rng = random.Random(3)
    n = int(keys * touch)
    lat, faults, overlap, parts = [], [], [], []
    for _ in range(epochs):
        records = [(rng.randrange(keys), rng.randrange(1000)) for _ in range(n)]
        busy = coord is not None and coord.writing > 0
        f0 = _faults()
        s0 = len(coord.slice_seconds) if coord is not None else 0
        c0 = len(coord.capture_seconds) if coord is not None else 0
        lat.append((driver.epoch, run_epoch(records)))
        faults.append(_faults() - f0)
        overlap.append(busy or (coord is not None and coord.writing > 0))
        # where the epoch's time went: [cpu, gc, slices, capture, slices count] (seconds)
        sl = coord.slice_seconds[s0:] if coord is not None else []
        slc = getattr(coord, "slice_cpu_seconds", [])[s0:] if coord is not None else []
        cap = coord.capture_seconds[c0:] if coord is not None else []
        parts.append([driver.cpu, driver.gc, sum(sl), sum(cap), len(sl), sum(slc)])
    inp.close()
    ex.run()
    result = {"mode": mode, "latency": lat, "faults": faults, "overlap": overlap, "rss_mb": rss, "parts": parts}
    if coord is not None:
        ms = coord.store.manifests()
        result["manifest_sizes"] = [m.total_size for m in ms]
        result["capture_seconds"] = coord.capture_seconds
        result["fork_seconds"] = coord.fork_seconds
        result["snapshot_seconds"] = coord.snapshot_seconds
        result["written"] = list(coord.written_bytes)
        result["committed"] = list(coord.committed)
        result["lost"] = list(coord.lost)
        result["skipped"] = list(coord.skipped)
        result["slice_seconds"] = list(coord.slice_seconds)
    return result


def one_epoch_bytes(keys: int, touch: float, epochs: int, directory: str) -> dict:
    """Bytes of checkpoints taken after exactly one epoch of changes: all keys in one
    epoch (its checkpoint is full), then ``epochs`` epochs touching ``touch`` of the
    keys, with a checkpoint after each."""
    flow, inp, probe = build()
    ex = flow.start(1, checkpoint=Checkpoints(directory, every_epochs=1, mode="sync", retain=2, resume=False))
    driver = EpochDriver(inp, probe, ex)
    driver.preload(keys, chunk=keys)
    rng = random.Random(5)
    n = int(keys * touch)
    changed = []
    for _ in range(epochs):
        records = [(rng.randrange(keys), rng.randrange(1000)) for _ in range(n)]
        changed.append(len({k for k, _ in records}))
        driver.run(records)
    inp.close()
    ex.run()
    coord = ex.coordinator
    return {"written": list(coord.written_bytes), "committed": list(coord.committed), "changed": changed}


def restore(directory: str, workers: int) -> float:
    flow, inp, probe = build()
    t0 = time.perf_counter()
    # every bin decoded before the first step (lazy recovery: benchmarks.recovery)
    ex = flow.start(workers, checkpoint=Checkpoints(directory, restore="eager"))
    took = time.perf_counter() - t0
    assert ex.restored is not None
    return took


def breakdown(results: dict) -> str:
    """Where the time of each mode's p99 epoch went (by wall time, and the p99 epoch by
    processing-thread CPU time): wall, CPU, encoding slices, capture (the freeze), the
    cyclic GC, and the rest (processing the records, copy-on-write copies, waiting for
    the CPU); the no-checkpoint run's p50 and p99 epochs for comparison."""
    rows = []
    for mode, r in results.items():
        lat = [s for _, s in r["latency"]]
        for by, vals in (("wall", lat), ("CPU", [p[0] for p in r["parts"]])):
            order = sorted(range(len(vals)), key=vals.__getitem__)
            picks = [("p99", order[min(len(order) - 1, int(0.99 * len(order)))])]
            if mode == "none" and by == "wall":
                picks.insert(0, ("p50", order[len(order) // 2]))
            for label, i in picks:
                cpu, g, sl, cap, nsl, slc = r["parts"][i]
                rows.append((f"{LABELS.get(mode, mode)}", f"{label} by {by}", r["latency"][i][0], f"{lat[i] * 1000:.1f}",
                             f"{cpu * 1000:.1f}", f"{sl * 1000:.1f} ({nsl})", f"{slc * 1000:.1f}", f"{cap * 1000:.1f}",
                             f"{g * 1000:.1f}", f"{(lat[i] - sl - cap - g) * 1000:.1f}", f"{(cpu - slc) * 1000:.1f}"))
    return "where the time of an epoch went (ms; CPU: the processing thread's):\n" + table(
        ["checkpoints", "epoch", "#", "wall", "CPU", "slices: wall (count)", "slices: CPU", "capture (wall)", "GC (wall)",
         "rest: wall", "rest: CPU"], rows)


MODES = ("none", "sync", "async", "thread", "fork")
LABELS = {"none": "none", "sync": "sync", "async": "async: slices (default)", "thread": "async: thread", "fork": "async: fork"}


def _sub(*args: str) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.checkpoints", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.1f} / {max(xs) * 1000:.1f}" if xs else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--touch", type=float, default=0.01)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, 'none' first")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-epoch-bytes", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--restore", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--png", default=os.path.join("benchmarks", "results", "checkpoints.png"))
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.keys, args.touch, args.every, args.epochs, args.dir)))
        return
    if args.one_epoch_bytes:
        print(json.dumps(one_epoch_bytes(args.keys, args.touch, 5, args.dir)))
        return
    if args.restore:
        print(json.dumps({"seconds": restore(args.dir, args.restore)}))
        return
    modes = args.modes.split(",")
    sizes = ["--keys", str(args.keys), "--touch", str(args.touch)]
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    started = time.perf_counter()
    base = tempfile.mkdtemp(prefix="tstate-bench-")
    try:
        results = {}
        for mode in modes:
            results[mode] = _sub("--one", mode, "--dir", os.path.join(base, mode), *sizes,
                                 "--every", str(args.every), "--epochs", str(args.epochs))
        recovered_from = "fork" if "fork" in results else modes[-1]
        recover = {w: _sub("--restore", str(w), "--dir", os.path.join(base, recovered_from))["seconds"] for w in (1, 4)}
        ckpt_bytes = sum(
            os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(base, recovered_from)) for f in fs
        )
        per_epoch = _sub("--one-epoch-bytes", "--dir", os.path.join(base, "one-epoch"), *sizes)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    base_p99 = None
    ratios: dict[str, float] = {}
    base_cpu_p99 = None
    for mode, r in results.items():
        lats = sorted(s for _, s in r["latency"])
        p99 = statistics.quantiles(lats, n=100)[98]
        cpus = sorted(p[0] for p in r["parts"])
        cpu_p99 = statistics.quantiles(cpus, n=100)[98]
        base_p99 = base_p99 or p99
        base_cpu_p99 = base_cpu_p99 or cpu_p99
        if mode != "none":
            ratios[f"{mode}_p99_over_none"] = round(p99 / base_p99, 3)
            ratios[f"{mode}_cpu_p99_over_none"] = round(cpu_p99 / base_cpu_p99, 3)
        rows.append((LABELS.get(mode, mode), f"{statistics.median(lats) * 1000:.1f}", f"{p99 * 1000:.1f}",
                     f"{max(lats) * 1000:.1f}", f"{p99 / base_p99:.2f}",
                     f"{statistics.median(cpus) * 1000:.1f}", f"{cpu_p99 * 1000:.1f}", f"{cpu_p99 / base_cpu_p99:.2f}",
                     len(r.get("committed", [])),
                     f"{statistics.median(r['faults']):,.0f}", _ms(r.get("capture_seconds", []))))
    print(f"{args.keys:,} keys, {args.touch:.0%} touched per epoch, checkpoint every {args.every} epochs, "
          f"{args.epochs} epochs measured (latency in ms; one process per mode, run one after the other; "
          f"{os.cpu_count()} CPUs, load average {load_before:.1f} before, {load_after:.1f} after, "
          f"{time.perf_counter() - started:.0f} s)")
    print(table(["checkpoints", "p50", "p99", "max", "p99 / none p99", "CPU p50", "CPU p99", "CPU p99 / none",
                 "committed", "minor faults / epoch", "on processing path at capture, median / max"], rows))
    print(breakdown(results))
    f = results.get("fork")
    if f is not None and f.get("fork_seconds"):
        inside = [s for (_, s), o in zip(f["latency"], f["overlap"]) if o]
        outside = [s for (_, s), o in zip(f["latency"], f["overlap"]) if not o]
        fo = [x for x, o in zip(f["faults"], f["overlap"]) if o]
        fn = [x for x, o in zip(f["faults"], f["overlap"]) if not o]
        print(f"fork mode: fork() {_ms(f['fork_seconds'])} ms (median / max) of a {f['rss_mb']:,.0f} MB process; "
              f"snapshot processes lived {statistics.median(f['snapshot_seconds']):.2f} s (median; "
              f"{len(f['snapshot_seconds'])} of them); lost: {len(f['lost'])}")
        print(f"fork mode: {len(inside)} of {len(f['latency'])} epochs overlapped a snapshot process: median "
              f"{statistics.median(inside) * 1000 if inside else float('nan'):.1f} ms, "
              f"{statistics.median(fo) if fo else float('nan'):,.0f} minor faults; the others "
              f"{statistics.median(outside) * 1000 if outside else float('nan'):.1f} ms, "
              f"{statistics.median(fn) if fn else float('nan'):,.0f} minor faults")
    a = results.get("async")
    if a is not None and a.get("slice_seconds"):
        sl = a["slice_seconds"]
        print(f"async mode: {len(sl)} slices of encoding between steps, median {statistics.median(sl) * 1000:.2f} ms, "
              f"max {max(sl) * 1000:.2f} ms; checkpoints skipped (the previous one still being encoded or written): "
              f"{len(a.get('skipped', []))}")
    src = results[recovered_from]
    print(f"checkpoint directory after the {recovered_from} run: {ckpt_bytes / 1e6:.1f} MB; "
          f"data referenced by the retained manifests: {[round(s / 1e6, 2) for s in src.get('manifest_sizes', [])]} MB")
    incr = src.get("written", [])
    if len(incr) > 1:
        full, deltas = incr[0], incr[1:]
        print(f"bytes written: full checkpoint {full / 1e6:.1f} MB; incremental after {args.every} epochs "
              f"({args.touch:.0%} touched each, ~{1 - (1 - args.touch) ** args.every:.1%} of the keys changed): median "
              f"{statistics.median(deltas) / 1e6:.2f} MB = {statistics.median(deltas) / full:.1%} of full")
    w = per_epoch["written"]
    if len(w) > 1:
        full, deltas = w[0], w[1:1 + len(per_epoch["changed"])]
        print(f"bytes written: incremental after exactly 1 epoch ({statistics.median(per_epoch['changed']) / args.keys:.2%} "
              f"of the keys changed; separate run, a checkpoint every epoch): median "
              f"{statistics.median(deltas) / 1e6:.2f} MB = {statistics.median(deltas) / full:.1%} of full "
              f"({full / 1e6:.1f} MB)")
    print(f"recovery from a cold start ({recovered_from} run's directory): 1 worker {recover[1]:.2f} s, "
          f"4 workers {recover[4]:.2f} s")
    plot_latency({LABELS.get(m, m): r["latency"] for m, r in results.items()}, args.png,
                 title=f"epoch latency with checkpoints every {args.every} epochs ({args.keys:,} keys)")
    print(f"plot: {args.png}")
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
