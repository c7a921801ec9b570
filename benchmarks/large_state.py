"""State larger than memory (issue 28): the heap backend against the RocksDB keyed-state
store (``tstate/state/rocksdb/``), side by side in one run.

What is measured, and how (a struct of three ints per key, 1% of the keys touched per
epoch, unless said otherwise):

- **heap bytes per key**: RSS growth of a heap dataflow (1 worker) holding ``--keys``
  keys, over the keys;
- **throughput** at ``--keys`` keys: the heap dataflow's events/s over the touch epochs;
  the same events through the state layers alone -- a dict of states per bin (what the
  heap bin is) and the RocksDB ``KeyedStore`` (get, change, put; one write-back batch
  per epoch); Bytewax's ``stateful_map`` (if installed) over the same events.  The
  same dataflow with ``state=ts.RocksDB(..., cache_bytes=--cache-mb)`` is measured
  through the engine beside the heap's (``rocksdb_over_heap_events_per_s``;
  ``rocksdb_over_bytewax`` is that ratio times the heap dataflow's over Bytewax's);
- **checkpoint overhead** on the dataflow: the same dataflow with
  ``state=ts.RocksDB(...)``, async checkpoints every epoch against none, the same
  input -- p99 epoch latency over the p99 without (``rocksdb_ckpt_p99_over_none``),
  and the processing thread's CPU time per epoch likewise
  (``rocksdb_ckpt_p99_cpu_over_none``: what the checkpoints cost that thread,
  whatever else the machine runs).  At a checkpoint the processing thread writes the
  changed states back and cuts the database; the flush, hard links, upload and commit
  run on other threads.  A checkpoint due while the last cut (flush + hard links) is
  still being made is skipped rather than waited for, as the async mode does with
  encodings (``rocksdb_checkpoints_made`` / ``..._skipped``);
- **migration in the engine**: the dataflow with ``state=ts.RocksDB(...)`` on 2
  workers, checkpoints every epoch, rescaled to 4 (``--migration-keys``): bytes moved
  over the moved bins' stored bytes, all at once and by pre-copy at 1% churn
  (``rocksdb_engine_migration_bytes_over_state[_precopy]``);
- **migration** (store layer): bins moved to another store as SST files, bytes moved over the bins'
  stored bytes: all at once (the bin's export, ``rocksdb_migration_bytes_over_state``)
  and by pre-copy (the bin's copy from the latest checkpoint's files ingested before;
  at the move only the 1% of keys changed since, ``..._precopy``);
- **recovery**: time to the first state read from a checkpoint's files (open + one
  get, nothing decoded) at ``--recovery-keys`` and ten times as many, the files local
  (``rocksdb_recovery_10x_over_1x``) and fetched from the checkpoint store with every
  checksum checked (``rocksdb_recovery_from_store_10x_over_1x``: proportional to the
  bytes, by design of verified recovery);
- **peak RSS** of a separate process holding ``--rss-keys`` keys in the store with
  ``--cache-mb`` of cache (``rocksdb_peak_rss_gb``).  The issue's N (heap > 24 GB) is
  computed from the heap's bytes per key and printed; running it takes hours on this
  machine, so the default runs a scaled N and says so (``rss_keys_scaled``);
- **list appended to per epoch** (heap backend): one key's ``list[int]`` of
  ``--list-items`` items, one item appended per epoch, a sync checkpoint every epoch:
  the delta bytes per epoch (``list_append_delta_bytes_per_epoch``) against the
  snapshot's (item 5: proportional to the append).

Prints a table, writes ``benchmarks/results/large_state.png`` (the dataflow's epoch
latency with and without checkpoints, both backends), and ends with one JSON line.

    python -m benchmarks.large_state [--quick]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

from attrs import define

import tstate as ts
from benchmarks.common import EpochDriver, table
from tstate.checkpoint.settings import Checkpoints
from tstate.errors import CheckpointSkippedWarning
from tstate.keys import bin_of, key_hash

BINS = 256


@define
class Three:
    a: int = 0
    b: int = 0
    c: int = 0


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _touch(three: Three, rec: tuple[int, int], ctx: ts.Context) -> None:
    three.a += 1
    three.b += rec[1]
    three.c = rec[1]


def _epochs(keys: int, epochs: int, seed: int = 7) -> list[list[tuple[int, int]]]:
    rng = random.Random(seed)
    n = max(1, keys // 100)
    return [[(rng.randrange(keys), rng.randrange(1000)) for _ in range(n)] for _ in range(epochs)]


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


# ---------------------------------------------------------------------- heap dataflow


def heap_dataflow(
    keys: int, epochs: list[list[tuple[int, int]]], directory: str | None, state: Any = None
) -> dict[str, Any]:
    """Preload ``keys`` keys, then run the touch epochs (checkpoints every epoch, async,
    into ``directory`` if given) with keyed state in ``state`` (None: the heap;
    ``ts.RocksDB(...)``: the RocksDB store through the engine)."""
    flow = ts.Dataflow("large_state")
    inp = flow.input("events", batch_size=8192)
    op = flow.stateful(inp, key=lambda r: r[0], state=Three, bins=BINS, name="state")(_touch)
    probe = op.probe()
    cfg = None if directory is None else Checkpoints(directory, every_epochs=1, mode="async", retain=2, resume=False)
    rss0 = _rss_mb()
    ex = flow.start(1, checkpoint=cfg, state=state)
    driver = EpochDriver(inp, probe, ex)
    t0 = time.perf_counter()
    driver.preload(keys)
    preload_s = time.perf_counter() - t0
    rss1 = _rss_mb()
    coord = getattr(ex, "coordinator", None)
    deadline = time.monotonic() + 120
    while coord is not None and (coord.uncommitted or coord.files is not None and coord.files.cutting()):
        if time.monotonic() > deadline:  # (the preload's checkpoints done: the touch epochs start from a steady state)
            break
        ex.step()
        time.sleep(0.001)
    first = driver.epoch  # checkpoints after the preload's epochs are counted
    lat, cpu = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointSkippedWarning)  # counted below
        for e in epochs:
            lat.append(driver.run(e))
            cpu.append(driver.cpu)
        events = sum(len(e) for e in epochs)
        inp.close()
        ex.run()  # the last checkpoints committed (an execution left open leaves its commit thread waiting)
    made = sum(1 for t in coord.committed if first < t <= driver.epoch) if coord is not None else 0
    skipped = len(epochs) - made if coord is not None else 0  # one due per touch epoch
    files = getattr(coord, "files", None)
    ex.close()  # the RocksDB stores, if any
    return {
        "bytes_per_key": (rss1 - rss0) * 1e6 / keys,
        "events_per_s": events / sum(lat),
        # per second of the processing thread's CPU: what the events cost this process,
        # whatever else the machine runs (RocksDB's flushes and compactions run on its
        # own threads, beside it)
        "events_per_cpu_s": events / sum(cpu),
        "all_events_per_s": (keys + events) / (preload_s + sum(lat)),  # preload + touches (as Bytewax is timed)
        "latency": lat,
        "cpu": cpu,  # the processing thread's CPU seconds per epoch (whatever the machine's load)
        "checkpoints": made,
        "skipped": skipped,
        # RocksDB: bytes of new SST (and small) files uploaded / unchanged SST files referenced, per checkpoint
        "uploaded_bytes": files.files.uploaded_bytes / max(1, made) if files is not None else 0.0,
        "referenced_bytes": files.files.referenced_bytes / max(1, made) if files is not None else 0.0,
    }


# ---------------------------------------------------------------------- state layers


def _bins(epochs: list[list[tuple[int, int]]]) -> list[list[tuple[int, int, int]]]:
    """``(bin, key, value)`` per event: the bin found before timing (the engine keeps a
    key -> bin memo, so neither layer pays the hash per event)."""
    return [[(bin_of(key_hash(k), BINS), k, v) for k, v in e] for e in epochs]


def dict_layer(keys: int, epochs: list[list[tuple[int, int, int]]]) -> float:
    """Events/s through a dict of states per bin (the heap bin's states)."""
    bins: list[dict[int, Three]] = [{} for _ in range(BINS)]
    for k in range(keys):
        bins[bin_of(key_hash(k), BINS)][k] = Three(1, k % 1000, 0)
    t0 = time.perf_counter()
    for e in epochs:
        for b, k, v in e:
            states = bins[b]
            s = states.get(k)
            if s is None:
                s = states[k] = Three()
            s.a += 1
            s.b += v
            s.c = v
    return sum(len(e) for e in epochs) / (time.perf_counter() - t0)


def _load_store(path: str, keys: int, cache_bytes: int) -> Any:
    from tstate.state.rocksdb.settings import RocksDB
    from tstate.state.rocksdb.worker import WorkerStore
    from tstate.types import StateCodec

    w = WorkerStore.create(path, RocksDB(path, cache_bytes=cache_bytes))
    store = w.store("state", StateCodec(Three))
    chunk = 100_000
    for i in range(0, keys, chunk):
        for k in range(i, min(keys, i + chunk)):
            store.put(bin_of(key_hash(k), BINS), k, Three(1, k % 1000, 0))
        w.end_epoch()
    return w, store


def _store_epoch(w: Any, store: Any, events: list[tuple[int, int, int]]) -> None:
    from tstate.state.rocksdb.store import MISSING

    for b, k, v in events:
        s = store.get(b, k)
        if s is MISSING:
            s = Three()
        s.a += 1
        s.b += v
        s.c = v
        store.put(b, k, s)
    w.end_epoch()


def rocksdb_layer(root: str, keys: int, epochs: list[list[tuple[int, int, int]]], cache_bytes: int) -> dict[str, Any]:
    """The store at ``keys`` keys: throughput, then one checkpoint of files
    (:class:`tstate.checkpoint.sst_files.FileCheckpoints` into a CheckpointStore) for
    the pre-copy to load from, and bins moved all at once and by pre-copy.  (The
    checkpoints' cost is measured on the dataflow: :func:`heap_dataflow` with
    ``state=ts.RocksDB(...)`` and checkpoints every epoch.)"""
    from tstate.checkpoint.sst_files import FileCheckpoints
    from tstate.checkpoint.store import CheckpointStore

    w, store = _load_store(os.path.join(root, "db"), keys, cache_bytes)
    lat_none = []
    for e in epochs:
        t0 = time.perf_counter()
        _store_epoch(w, store, e)
        lat_none.append(time.perf_counter() - t0)
    rate = sum(len(e) for e in epochs) / sum(lat_none)
    ck_store = CheckpointStore(os.path.join(root, "store"), retain=2, fsync=False)
    fc = FileCheckpoints(ck_store, os.path.join(root, "scratch"))
    fc.capture(ck_store.begin(1), {0: w}, commit=True).result()
    fc.close()
    moves = migration(root, w, store, ck_store)
    w.close()
    return {"events_per_s": rate, "latency_none": lat_none, **moves}


def migration(root: str, w: Any, store: Any, ck_store: Any, bins: int = 4) -> dict[str, float]:
    """Bins moved to another worker's store as files: all at once (the bin's SST
    export), and by pre-copy (the bin's copy from the latest checkpoint's files
    ingested before the move; at the move only the keys changed since -- 1% of the
    bin's keys -- travel); bytes moved at the move over the bin's stored bytes."""
    from tstate.checkpoint.sst_files import restore_worker, worker_files
    from tstate.state.rocksdb.keyed_bin import RocksBin
    from tstate.state.rocksdb.moving import hand_over, preload, ship_bin
    from tstate.state.rocksdb.settings import RocksDB
    from tstate.state.rocksdb.worker import WorkerStore
    from tstate.types import StateCodec

    latest = ck_store.latest()
    copy_path = os.path.join(root, "copy")
    copy = restore_worker(ck_store, worker_files(latest)[0], copy_path, RocksDB(copy_path))
    other = WorkerStore.create(os.path.join(root, "other"))
    dst = other.store("state", StateCodec(Three))
    moves = os.path.join(root, "moves")
    state = whole = pre = delta = 0
    rng = random.Random(3)
    for b in range(bins):
        state += store.stored_bytes(b)
        pre += preload(copy.store("state", StateCodec(Three)), dst, b, moves)
        keys = list(store.keys(b))
        rb = RocksBin(b, store)
        changed = rng.sample(keys, max(1, len(keys) // 100))
        for k in changed:  # 1% churn since the checkpoint
            s = rb.get(k)
            s.a += 1
            rb.put(k, s, track=False)
        rb.write_back()
        _moved, size = hand_over(rb, store, dst, changed, moves)
        delta += size
    for b in range(bins, 2 * bins):  # all at once: other bins, the same size on average
        state_b = store.stored_bytes(b)
        _moved, size = ship_bin(RocksBin(b, store), store, dst, moves)
        whole += size / max(1, state_b) * (state / bins)
    copy.close()
    other.close()
    return {
        "migration_bytes_over_state": whole / max(1, state),
        "precopy_bytes_over_state": delta / max(1, state),
        "precopy_preload_over_state": pre / max(1, state),
    }


def engine_migration(root: str, keys: int, epochs: int, cache_bytes: int, strategy: str) -> dict[str, float]:
    """The dataflow with ``state=ts.RocksDB(...)`` on 2 workers, checkpoints every 2
    epochs, rescaled to 4 by ``strategy`` (half the bins move; pre-copy moves one bin
    per epoch), 1% of the keys touched per epoch throughout -- a bin moves one or two
    epochs after the checkpoint it is preloaded from: bytes moved over the moved bins' stored bytes
    (``precopy``: the bins' files preloaded from the latest committed checkpoint, only
    the keys changed since -- 1% churn -- handed over; ``all-at-once``: each bin's SST
    export)."""
    from tstate.migration.commands import Rescale

    flow = ts.Dataflow("large_state_move")
    inp = flow.input("events", batch_size=8192)
    op = flow.stateful(inp, key=lambda r: r[0], state=Three, bins=BINS, name="state")(_touch)
    probe = op.probe()
    first = -(-keys // 100_000)  # the preload's epochs (at times 0 .. first - 1)
    epochs += (first + epochs) % 2 == 0  # the move at an odd time: checkpoints every 2 epochs, the last at
    data = _epochs(keys, epochs, seed=11)  # the time before, so one epoch's changes (1% of the keys) since
    at = first + epochs
    cfg = Checkpoints(os.path.join(root, f"ck-{strategy}"), every_epochs=2, mode="sync", retain=2, resume=False)
    ex = flow.start(2, max_workers=4, checkpoint=cfg, state=ts.RocksDB(os.path.join(root, f"db-{strategy}"), cache_bytes=cache_bytes),
                    reconfigure=[(at, Rescale(4, strategy=strategy))])
    driver = EpochDriver(inp, probe, ex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointSkippedWarning)
        driver.preload(keys)
        for e in data:
            driver.run(e)
        rng = random.Random(5)
        for _ in range(4 * BINS):  # touches go on while the bins move (pre-copy: one bin per epoch)
            driver.run([(rng.randrange(keys), rng.randrange(1000)) for _ in range(max(1, keys // 100))])
            if not ex.precopy.pending and driver.epoch > at:
                break
        inp.close()
        ex.run()
    node = next(i for i, o in enumerate(ex.operators[0]) if getattr(o, "name", None) == "state")
    moves = ex.metrics.moves
    state = sum(ex.operators[m.target][node].store.stored_bytes(m.bin) for m in moves)
    st = ex.precopy.stats
    ex.close()
    return {
        "moved_bins": len(moves),
        "bytes_over_state": sum(m.bytes for m in moves) / max(1, state),
        "fallbacks": st.fallbacks,
        "preload_over_state": st.preload_bytes / max(1, state),
    }


def recovery(root: str, keys: int, cache_bytes: int) -> tuple[float, float]:
    """Seconds to the first state read (best of three) from a checkpoint's files: (a)
    local (open + one get: nothing decoded), (b) from the checkpoint store (every file
    fetched and its xxh64 checked, then open + one get)."""
    from tstate.checkpoint.sst_files import FileCheckpoints, restore_worker, worker_files
    from tstate.checkpoint.store import CheckpointStore
    from tstate.state.rocksdb.settings import RocksDB
    from tstate.state.rocksdb.worker import WorkerStore
    from tstate.types import StateCodec

    w, _store = _load_store(os.path.join(root, f"src-{keys}"), keys, cache_bytes)
    ck = os.path.join(root, f"ck-{keys}")
    w.checkpoint(ck)
    ck_store = CheckpointStore(os.path.join(root, f"store-{keys}"), fsync=False)
    fc = FileCheckpoints(ck_store, os.path.join(root, f"scratch-{keys}"))
    fc.capture(ck_store.begin(1), {0: w}, commit=True).result()
    fc.close()
    w.close()
    latest = ck_store.latest()
    assert latest is not None
    wf = worker_files(latest)[0]
    best_local = best_store = float("inf")
    k = keys // 2
    for i in range(3):
        dest = os.path.join(root, f"restored-{keys}-{i}")
        t0 = time.perf_counter()
        back = WorkerStore.restore(ck, dest, RocksDB(dest, cache_bytes=cache_bytes))
        back.store("state", StateCodec(Three)).get(bin_of(key_hash(k), BINS), k)
        best_local = min(best_local, time.perf_counter() - t0)
        back.close()
        shutil.rmtree(dest, ignore_errors=True)
        t0 = time.perf_counter()
        back = restore_worker(ck_store, wf, dest, RocksDB(dest, cache_bytes=cache_bytes))
        back.store("state", StateCodec(Three)).get(bin_of(key_hash(k), BINS), k)
        best_store = min(best_store, time.perf_counter() - t0)
        back.close()
        shutil.rmtree(dest, ignore_errors=True)
    return best_local, best_store


# ---------------------------------------------------------------------- bytewax


def bytewax_rate(keys: int, epochs: list[list[tuple[int, int]]]) -> float | None:
    """Events/s of Bytewax's stateful_map over the preload of ``keys`` keys and the
    touch events (one run; compared with the heap dataflow's rate over the same)."""
    try:
        import bytewax.operators as op
        from bytewax.dataflow import Dataflow
        from bytewax.testing import TestingSink, TestingSource, run_main
    except ImportError:
        return None

    def run(events: list[tuple[int, int]]) -> float:
        flow = Dataflow("bw")
        s = op.input("in", flow, TestingSource(events, batch_size=8192))
        keyed = op.key_on("key", s, lambda e: str(e[0]))

        def mapper(state: Any, e: tuple[int, int]) -> tuple[Any, Any]:
            if state is None:
                state = [0, 0, 0]
            state[0] += 1
            state[1] += e[1]
            state[2] = e[1]
            return state, None

        out = op.stateful_map("sm", keyed, mapper)
        sink: list[Any] = []
        op.output("out", op.filter("none", out, lambda kv: kv[1] is not None), TestingSink(sink))
        t0 = time.perf_counter()
        run_main(flow)
        return time.perf_counter() - t0

    events = [(k, k % 1000) for k in range(keys)] + [r for e in epochs for r in e]
    return len(events) / run(events)


# ---------------------------------------------------------------------- peak RSS


def rss_child(path: str, keys: int, cache_mb: int, epochs: int) -> None:
    """(In its own process) hold ``keys`` keys in the store, touch 1% per epoch; print
    the peak RSS in GB."""
    w, store = _load_store(path, keys, cache_mb << 20)
    rng = random.Random(7)  # (the events of _epochs(keys, epochs), made one epoch at a time: the
    n = max(1, keys // 100)  # input held at once is one epoch's, not every epoch's twice over)
    for _ in range(epochs):
        _store_epoch(w, store, _bins([[(rng.randrange(keys), rng.randrange(1000)) for _ in range(n)]])[0])
    w.checkpoint(path + "-ck")
    w.close()
    print(_peak_rss_kb() / 1e6)


def _peak_rss_kb() -> float:
    """This process's peak RSS in kB: ``VmHWM`` (Linux), else ``ru_maxrss``.  Not
    ``ru_maxrss`` on Linux: it is kept across ``exec``, so a child started by a parent
    that holds a large heap reports the parent's peak (this benchmark's RSS child
    reported 1.74 GB at 2M keys for its own 0.33 GB)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_gb(root: str, keys: int, cache_mb: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.large_state", "--rss-child", os.path.join(root, "rss"), str(keys), str(cache_mb)],
        check=True, capture_output=True, text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- list appends


def list_appends(root: str, items: int, epochs: int) -> dict[str, Any]:
    """One key's list of ``items`` items, one appended per epoch, a sync checkpoint each
    epoch: the snapshot's bytes and the deltas' bytes."""
    flow = ts.Dataflow("appends")
    inp = flow.input("events")

    def grow(values: list[int], rec: tuple[int, int], ctx: ts.Context) -> None:
        if rec[1] < 0:
            values.extend(range(items))
        else:
            values.append(rec[1])

    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=4, name="lists")(grow)
    probe = op.probe()
    cfg = Checkpoints(root, every_epochs=1, mode="sync", retain=epochs + 2, compact_after=epochs + 2, resume=False)
    ex = flow.start(1, checkpoint=cfg)
    driver = EpochDriver(inp, probe, ex)
    driver.run([(0, -1)])
    for t in range(epochs):
        driver.run([(0, t)])
    driver.run([])
    snaps = [os.path.getsize(p) for p in glob.glob(os.path.join(root, "**", "*-snap.bin"), recursive=True)]
    deltas = [os.path.getsize(p) for p in glob.glob(os.path.join(root, "**", "*-delta.bin"), recursive=True)]
    return {"snapshot_bytes": max(snaps) if snaps else 0, "delta_bytes": sorted(deltas), "deltas": len(deltas)}


# ---------------------------------------------------------------------- main


def _plot(path: str, heap: list[float], rocks: list[float], heap_none: list[float], rocks_none: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([x * 1e3 for x in heap], color="C0", label="heap, async checkpoint every epoch")
    ax.plot([x * 1e3 for x in heap_none], color="C0", linestyle=":", label="heap, no checkpoints")
    ax.plot([x * 1e3 for x in rocks], color="C1", label="RocksDB, checkpoint of files every epoch")
    ax.plot([x * 1e3 for x in rocks_none], color="C1", linestyle=":", label="RocksDB, no checkpoints")
    ax.set_xlabel("epoch")
    ax.set_ylabel("epoch latency (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("dataflow epoch latency, 1% of keys touched per epoch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--recovery-keys", type=int, default=200_000)
    ap.add_argument("--migration-keys", type=int, default=200_000)
    ap.add_argument("--rss-keys", type=int, default=5_000_000)
    ap.add_argument("--cache-mb", type=int, default=256)
    ap.add_argument("--list-items", type=int, default=10_000_000)
    ap.add_argument("--rss-child", nargs=3, metavar=("PATH", "KEYS", "CACHE_MB"), help=argparse.SUPPRESS)
    ap.add_argument("--png", default=os.path.join(os.path.dirname(__file__), "results", "large_state.png"))
    a = ap.parse_args(argv)
    if a.rss_child:
        rss_child(a.rss_child[0], int(a.rss_child[1]), int(a.rss_child[2]), 5)
        return
    if a.quick:
        a.keys, a.epochs, a.recovery_keys, a.rss_keys, a.cache_mb, a.list_items = 50_000, 10, 10_000, 100_000, 32, 200_000
        a.migration_keys = 50_000
    epochs = _epochs(a.keys, a.epochs)
    root = tempfile.mkdtemp(prefix="large_state-")
    try:
        heap = heap_dataflow(a.keys, epochs, None)
        heap_ck = heap_dataflow(a.keys, epochs, os.path.join(root, "heap-ck"))
        dict_rate = dict_layer(a.keys, _bins(epochs))
        rocks = rocksdb_layer(os.path.join(root, "rocks"), a.keys, _bins(epochs), a.cache_mb << 20)
        rocks_run = heap_dataflow(a.keys, epochs, None, ts.RocksDB(os.path.join(root, "engine"), cache_bytes=a.cache_mb << 20))
        # the same dataflow, checkpoints of files every epoch (async): the checkpoints' cost
        rocks_ck = heap_dataflow(
            a.keys, epochs, os.path.join(root, "rocks-ck"), ts.RocksDB(os.path.join(root, "engine-ck"), cache_bytes=a.cache_mb << 20)
        )
        bw = bytewax_rate(a.keys, epochs)
        moved_whole = engine_migration(os.path.join(root, "move"), a.migration_keys, 6, a.cache_mb << 20, "all-at-once")
        moved_pre = engine_migration(os.path.join(root, "move"), a.migration_keys, 6, a.cache_mb << 20, "precopy")
        rec1, rec1_store = recovery(os.path.join(root, "rec"), a.recovery_keys, a.cache_mb << 20)
        rec10, rec10_store = recovery(os.path.join(root, "rec"), 10 * a.recovery_keys, a.cache_mb << 20)
        rss = peak_rss_gb(root, a.rss_keys, a.cache_mb)
        lists = list_appends(os.path.join(root, "lists"), a.list_items, 8)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # the RocksDB store in the engine, measured: the same dataflow with state=ts.RocksDB(...)
    rocks_engine = rocks_run["events_per_s"]
    n_beyond = int(24e9 / max(1.0, heap["bytes_per_key"])) + 1
    deltas = lists["delta_bytes"]
    delta_med = deltas[len(deltas) // 2] if deltas else 0
    rows = [
        ["heap bytes/key (RSS growth)", f"{heap['bytes_per_key']:.0f}", f"at {a.keys:,} keys"],
        ["heap dataflow events/s", f"{heap['events_per_s']:,.0f}", "measured"],
        ["dict layer events/s", f"{dict_rate:,.0f}", "measured (the heap bin's states)"],
        ["RocksDB store layer events/s", f"{rocks['events_per_s']:,.0f}", f"measured, cache {a.cache_mb} MB"],
        ["RocksDB in the engine events/s", f"{rocks_engine:,.0f}", f"measured, state=ts.RocksDB(cache {a.cache_mb} MB)"],
        ["heap / RocksDB engine events per CPU s", f"{heap['events_per_cpu_s']:,.0f} / {rocks_run['events_per_cpu_s']:,.0f}",
         "the processing thread's CPU time"],
        ["heap dataflow events/s, preload + touches", f"{heap['all_events_per_s']:,.0f}", "measured"],
        ["Bytewax stateful_map events/s, same", "not installed" if bw is None else f"{bw:,.0f}", "measured"],
        ["heap p99 epoch, none / ckpt (ms)", f"{_p99(heap['latency']) * 1e3:.1f} / {_p99(heap_ck['latency']) * 1e3:.1f}", "dataflow"],
        ["RocksDB p99 epoch, none / ckpt (ms)", f"{_p99(rocks_run['latency']) * 1e3:.1f} / {_p99(rocks_ck['latency']) * 1e3:.1f}",
         f"dataflow; {rocks_ck['checkpoints']} checkpoints made, {rocks_ck['skipped']} skipped (the last cut still being made)"],
        ["RocksDB p99 epoch CPU, none / ckpt (ms)", f"{_p99(rocks_run['cpu']) * 1e3:.1f} / {_p99(rocks_ck['cpu']) * 1e3:.1f}",
         "the processing thread's CPU time (load-independent)"],
        ["RocksDB bytes/ckpt uploaded / referenced", f"{rocks_ck['uploaded_bytes']:,.0f} / {rocks_ck['referenced_bytes']:,.0f}", "new SST files + small files / unchanged SST files"],
        ["migration bytes / bin state, all at once", f"{rocks['migration_bytes_over_state']:.2f}", "the bin's SST export"],
        ["migration bytes / bin state, pre-copy", f"{rocks['precopy_bytes_over_state']:.3f}", f"1% churn; pre-loaded from the checkpoint: {rocks['precopy_preload_over_state']:.2f}"],
        ["engine migration bytes / bin state, all at once / pre-copy", f"{moved_whole['bytes_over_state']:.3f} / {moved_pre['bytes_over_state']:.4f}",
         f"dataflow, {a.migration_keys:,} keys, 2 -> 4 workers ({moved_pre['moved_bins']} bins), 1% churn; "
         f"pre-copy fallbacks {moved_pre['fallbacks']}, pre-loaded {moved_pre['preload_over_state']:.2f}"],
        ["recovery to first read 1x / 10x (ms)", f"{rec1 * 1e3:.1f} / {rec10 * 1e3:.1f}", f"{a.recovery_keys:,} / {10 * a.recovery_keys:,} keys, local files"],
        ["... from the checkpoint store (ms)", f"{rec1_store * 1e3:.1f} / {rec10_store * 1e3:.1f}", "every file fetched + xxh64 checked"],
        ["RocksDB peak RSS (GB)", f"{rss:.2f}", f"{a.rss_keys:,} keys (SCALED; heap > 24 GB needs {n_beyond:,})"],
        ["list snapshot bytes", f"{lists['snapshot_bytes']:,}", f"{a.list_items:,} items"],
        ["list delta bytes/epoch (median)", f"{delta_med:,}", f"{lists['deltas']} deltas, 1 item appended each"],
    ]
    print(table(["figure", "value", "how"], rows))
    os.makedirs(os.path.dirname(a.png), exist_ok=True)
    _plot(a.png, heap_ck["latency"], rocks_ck["latency"], heap["latency"], rocks_run["latency"])
    print(f"plot: {a.png}")
    print(json.dumps({
        "keys": a.keys,
        "heap_bytes_per_key": round(heap["bytes_per_key"], 1),
        "rocksdb_over_heap_events_per_s": round(rocks_engine / heap["events_per_s"], 3),
        "rocksdb_over_heap_events_per_s_modelled": False,
        "rocksdb_over_heap_events_per_cpu_s": round(rocks_run["events_per_cpu_s"] / heap["events_per_cpu_s"], 3),
        "rocksdb_store_over_dict_events_per_s": round(rocks["events_per_s"] / dict_rate, 3),
        "rocksdb_over_bytewax": None if bw is None else round(rocks_engine / heap["events_per_s"] * heap["all_events_per_s"] / bw, 3),
        "heap_over_bytewax": None if bw is None else round(heap["all_events_per_s"] / bw, 3),
        "rocksdb_ckpt_p99_over_none": round(_p99(rocks_ck["latency"]) / _p99(rocks_run["latency"]), 3),
        "rocksdb_ckpt_p99_cpu_over_none": round(_p99(rocks_ck["cpu"]) / _p99(rocks_run["cpu"]), 3),
        "heap_ckpt_p99_over_none": round(_p99(heap_ck["latency"]) / _p99(heap["latency"]), 3),
        "rocksdb_checkpoints_made": rocks_ck["checkpoints"],
        "rocksdb_checkpoints_skipped": rocks_ck["skipped"],
        "rocksdb_migration_bytes_over_state": round(rocks["migration_bytes_over_state"], 3),
        "rocksdb_migration_bytes_over_state_precopy": round(rocks["precopy_bytes_over_state"], 4),
        "rocksdb_engine_migration_bytes_over_state": round(moved_whole["bytes_over_state"], 3),
        "rocksdb_engine_migration_bytes_over_state_precopy": round(moved_pre["bytes_over_state"], 4),
        "rocksdb_engine_precopy_fallbacks": moved_pre["fallbacks"],
        "rocksdb_recovery_10x_over_1x": round(rec10 / rec1, 3),
        "rocksdb_recovery_from_store_10x_over_1x": round(rec10_store / rec1_store, 3),
        "rocksdb_peak_rss_gb": round(rss, 3),
        "rss_keys_scaled": a.rss_keys,
        "keys_beyond_24gb_heap": n_beyond,
        "list_items": a.list_items,
        "list_snapshot_bytes": lists["snapshot_bytes"],
        "list_append_delta_bytes_per_epoch": delta_med,
    }))


if __name__ == "__main__":
    main()
