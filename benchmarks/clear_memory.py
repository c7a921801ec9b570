"""Memory and checkpoint bytes follow live state: ``ctx.clear()`` frees what a key held.

A session-like workload: every key gets two records, one epoch apart (``--per-epoch``
new keys per epoch, string keys ``"session-<n>"``, an ``int`` state).  With ``clear``
the second record ends the session (``ctx.clear()``); with ``keep`` it only updates the
state.  After the last keys' second records, a few empty epochs let a checkpoint commit
past everything; then the process's RSS and the newest checkpoint are measured.  With
``clear`` no key is live at the end: RSS growth and checkpoint bytes should stay flat
however many distinct keys went by; with ``keep`` they grow with the keys.

Each (variant, keys) pair runs in its own process (a clean RSS), 2 workers (records
cross an exchange: its key memo is part of the picture), checkpoints every 2 epochs
(``mode="sync"``, ``retain=2``).  Columns: distinct keys seen; live keys at the end;
RSS at the end and its growth over the process's RSS before the first record; the
stateful operators' per-key map entries (the key -> bin memo each operator's workers
share) and the routers' key memos' entries at the end; the newest checkpoint's data bytes and files,
and the directory's bytes on disk.  The last line is JSON (figures and clear / keep
ratios at the largest size).

    python -m benchmarks.clear_memory [--sizes 250000,500000,1000000,2000000] [--per-epoch 50000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import tstate as ts
from tstate.plan import Stateful
from benchmarks.common import table


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _du(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(directory) for f in fs)


def one(variant: str, keys: int, per_epoch: int, directory: str) -> dict[str, Any]:
    clear = variant == "clear"
    flow = ts.Dataflow("sessions")
    inp = flow.input("events")

    @flow.stateful(inp, key=lambda r: r[0], state=int, bins=256)
    def session(n: int, r: Any, ctx: ts.Context) -> int:
        if r[1] and clear:  # the session's last record
            ctx.clear()
        return n + 1

    probe = session.probe()
    cfg = ts.Checkpoints(directory, every_epochs=2, mode="sync", retain=2, resume=False)
    ex = flow.start(2, checkpoint=cfg)
    gc.collect()
    rss0 = _rss_mb()
    epochs = -(-keys // per_epoch)
    t0 = time.perf_counter()

    def step(epoch: int, records: list[Any]) -> None:
        inp.send(records)
        inp.advance_to(epoch + 1)
        while probe.less_than(epoch + 1):
            ex.step()

    prev: list[str] = []
    for e in range(epochs):
        fresh = [f"session-{i}" for i in range(e * per_epoch, min(keys, (e + 1) * per_epoch))]
        step(e, [(k, 0) for k in fresh] + [(k, 1) for k in prev])
        prev = fresh
    step(epochs, [(k, 1) for k in prev])
    del prev, fresh
    last = epochs
    while not ex.coordinator.committed or ex.coordinator.committed[-1] <= epochs:
        last += 1
        step(last, [])
    seconds = time.perf_counter() - t0
    gc.collect()
    rss = _rss_mb()
    ops = [op for ops in ex.operators for op in ops if isinstance(op.node, Stateful)]
    live = sum(len(b.states) for op in ops for b in op.bins.values())
    # the stateful operators' key -> bin memos (one per operator, shared by its workers)
    maps = sum(len(m) for m in ex.key_bins.values())
    memos = sum(len(r.bins._memo) for r in ex._routers.values())
    store = ex.coordinator.store
    m = store.latest()
    inp.close()
    ex.run()
    return {
        "variant": variant, "keys": keys, "live": live, "rss_mb": rss, "rss_growth_mb": rss - rss0,
        "map_entries": maps, "memo_entries": memos, "ckpt_bytes": m.total_size if m else 0,
        "ckpt_files": m.file_count if m else 0, "dir_bytes": _du(directory), "seconds": seconds,
    }


def _sub(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.clear_memory", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="250000,500000,1000000,2000000", help="distinct keys per run, comma-separated")
    ap.add_argument("--per-epoch", type=int, default=50_000, help="new keys per epoch")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--keys", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.keys, args.per_epoch, args.dir)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    base = tempfile.mkdtemp(prefix="tstate-clear-")
    results: list[dict[str, Any]] = []
    try:
        for keys in sizes:
            for variant in ("keep", "clear"):
                d = os.path.join(base, f"{variant}-{keys}")
                results.append(_sub("--one", variant, "--keys", str(keys), "--per-epoch", str(args.per_epoch), "--dir", d))
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = [
        (f"{r['keys']:,}", r["variant"], f"{r['live']:,}", f"{r['rss_mb']:,.0f}", f"{r['rss_growth_mb']:,.0f}",
         f"{r['map_entries']:,}", f"{r['memo_entries']:,}", f"{r['ckpt_bytes'] / 1e6:,.2f}", f"{r['ckpt_files']:,}",
         f"{r['dir_bytes'] / 1e6:,.2f}", f"{r['seconds']:.1f}")
        for r in results
    ]
    print(f"sessions: each key gets 2 records one epoch apart ({args.per_epoch:,} new keys per epoch), 2 workers, "
          f"a checkpoint every 2 epochs (sync, retain 2); one process per row; {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - started:.0f} s in all")
    print(table(["keys seen", "variant", "live keys", "RSS MB", "RSS growth MB", "runtime map entries",
                 "key memo entries", "checkpoint MB", "checkpoint files", "directory MB", "seconds"], rows))
    by = {(r["variant"], r["keys"]): r for r in results}
    top = sizes[-1]
    keep, clr = by["keep", top], by["clear", top]

    def ratio(a: float, b: float) -> float:
        return round(a / b, 4) if b else float("nan")

    summary = {
        "keys": sizes,
        "rss_growth_mb": {v: [round(by[v, k]["rss_growth_mb"], 1) for k in sizes] for v in ("keep", "clear")},
        "ckpt_bytes": {v: [by[v, k]["ckpt_bytes"] for k in sizes] for v in ("keep", "clear")},
        "ckpt_files": {v: [by[v, k]["ckpt_files"] for k in sizes] for v in ("keep", "clear")},
        "dir_bytes": {v: [by[v, k]["dir_bytes"] for k in sizes] for v in ("keep", "clear")},
        "map_entries": {v: [by[v, k]["map_entries"] for k in sizes] for v in ("keep", "clear")},
        "memo_entries": {v: [by[v, k]["memo_entries"] for k in sizes] for v in ("keep", "clear")},
        "clear_vs_keep_rss_growth": ratio(clr["rss_growth_mb"], keep["rss_growth_mb"]),
        "clear_vs_keep_ckpt_bytes": ratio(clr["ckpt_bytes"], keep["ckpt_bytes"]),
        "clear_rss_growth_largest_vs_smallest": ratio(clr["rss_growth_mb"], by["clear", sizes[0]]["rss_growth_mb"]),
        "keep_rss_growth_largest_vs_smallest": ratio(keep["rss_growth_mb"], by["keep", sizes[0]]["rss_growth_mb"]),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
