"""Where a checkpoint's time goes on the RocksDB backend (issue 28,
``rocksdb_ckpt_p99_over_none``): the dataflow of :mod:`benchmarks.large_state` with
``state=ts.RocksDB(...)``, async checkpoints every epoch, against none, with every
stage of a checkpoint timed on the thread that runs it.

Stages (wall and thread CPU seconds, per call):

- processing thread: ``freeze`` (resident states written back into the cache, timers
  as records), ``write_back`` (the cache's batch: encode + ``db.write``; an epoch's end
  or the cut's), ``capture`` (the cut: write-back, then the database's writes held),
  ``begin`` (the checkpoint store's writer, under its lock);
- cut thread: ``_checkpoint`` (all of it), ``flush`` (memtables to SST files, GIL
  free), ``link_checkpoint`` (each attempt to link the checkpoint GIL free, a compaction
  running or not: hard_links.py), ``create_checkpoint`` (RocksDB's checkpoint, holding
  the GIL: its own flush, a no-op after ours, hard links, copies of the small files,
  fsyncs; only after LINK_ATTEMPTS failed attempts), ``deferred``
  (the write-backs postponed while the cut held the database, applied after it);
- processing thread also: ``write_batch`` (the database write of a write-back, or its
  queueing), ``settle``;
- upload thread: ``read``, ``hash``, ``write`` of each new SST file; commit, GC.

Per epoch: latency, processing-thread CPU, the cyclic GC's time, whether the epoch
captured a checkpoint, and how long the cut / upload threads ran inside the epoch
(the GIL they hold is time the processing thread waits: wall - CPU).

    python -m benchmarks.large_state_ckpt_profile [--keys N] [--epochs E] [--cprofile] [--variant V]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any, Callable

import tstate as ts
from benchmarks import common
from benchmarks.large_state import _epochs, _p99, heap_dataflow

EVENTS: list[tuple[str, str, float, float, float]] = []  # (thread, stage, t0, t1, cpu)
EPOCHS: list[tuple[float, float, float, float]] = []  # (t0, t1, cpu, gc)
#: per epoch, the processing thread's seconds runnable but not running (waiting for a
#: CPU: /proc/thread-self/schedstat's run-queue time): wall - CPU - this is the time it
#: was blocked -- on the GIL, a lock or I/O
RUNQ: list[float] = []
STATS: list[str] = []  # each database's L0 files and write stalls when closed


class _TimedRocksdict:
    """rocksdict with ``Checkpoint.create_checkpoint`` timed as its own stage (the
    rest passed through)."""

    def __init__(self, mod: Any) -> None:
        self._mod = mod

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mod, name)

    def Checkpoint(self, rdb: Any) -> Any:  # noqa: N802 - rocksdict's name
        ck = self._mod.Checkpoint(rdb)

        class Timed:
            create_checkpoint = staticmethod(_timed("create_checkpoint", ck.create_checkpoint))

        return Timed()


def _db_stats(ldb: Any) -> str:
    """A database's per-family level-0 files, compactions and write stalls."""
    lines = []
    for name, fam in ldb._families.items():
        st = fam.rdict.property_value("rocksdb.cfstats-no-file-histogram") or ""
        stall = next((ln for ln in st.splitlines() if ln.startswith("Write Stall")), "")
        comp = next((ln for ln in st.splitlines() if ln.startswith("Cumulative compaction")), "")
        l0 = fam.rdict.property_int_value("rocksdb.num-files-at-level0")
        total = ", ".join(f"{k}: {v}" for k, v in (kv.split(": ") for kv in stall.split(": ", 1)[-1].split(", ")) if k.startswith("total"))
        lines.append(f"  {os.path.basename(os.path.dirname(ldb.path))} {name!r}: L0 files {l0}; {comp}; stalls {total}")
    return "\n".join(lines)


def _runq() -> float:
    """The calling thread's seconds spent waiting on a run queue so far (0 where
    /proc/thread-self/schedstat is not available)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _timed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        c0, t0 = time.thread_time(), time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            EVENTS.append((threading.current_thread().name, stage, t0, time.perf_counter(), time.thread_time() - c0))

    return wrapper


def _patch() -> None:
    from tstate.checkpoint import sst_files, store
    from tstate.engine.checkpointing import file_capture
    from tstate.state.rocksdb import cache, checkpoint_dirs, db, worker

    patches = [
        (file_capture.FileCapture, "freeze"), (file_capture.FileCapture, "capture"),
        (cache.StateCache, "write_back"), (worker.WorkerStore, "cut"),
        (db.LocalDB, "flush"), (db.LocalDB, "_checkpoint"),
        (sst_files, "_read"), (sst_files, "checksum"), (sst_files, "_write"),
        (store.CheckpointStore, "begin"), (store.CheckpointStore, "_commit"),
        (store.CheckpointStore, "_collect_guarded"),
    ]
    for owner, name in patches:
        if hasattr(owner, name):
            setattr(owner, name, _timed(name, getattr(owner, name)))
    for name in ("write_batch", "settle"):
        setattr(db.LocalDB, name, _timed(name, getattr(db.LocalDB, name)))
    checkpoint_dirs.rocksdict = _TimedRocksdict(checkpoint_dirs.rocksdict)  # type: ignore[assignment]
    # (the checkpoint linked GIL free: hard_links.py)
    checkpoint_dirs.link_checkpoint = _timed("link_checkpoint", checkpoint_dirs.link_checkpoint)
    close = db.LocalDB.close

    def close_with_stats(self: Any) -> None:
        if not self._closed and self._db is not None:
            STATS.append(_db_stats(self) + f"\n  checkpoints linked again {self.checkpoints.retries}, "
                         f"by create_checkpoint {self.checkpoints.fallbacks}")
        close(self)

    db.LocalDB.close = close_with_stats  # type: ignore[method-assign]
    if hasattr(db.LocalDB, "_apply_deferred"):
        db.LocalDB._apply_deferred = _timed("deferred", db.LocalDB._apply_deferred)  # type: ignore[method-assign]
    run = common.EpochDriver.run

    def timed_run(self: Any, records: list[Any]) -> float:
        q0 = _runq()
        t0 = time.perf_counter()
        took = run(self, records)
        EPOCHS.append((t0, time.perf_counter(), self.cpu, self.gc))
        RUNQ.append(_runq() - q0)
        return took

    common.EpochDriver.run = timed_run  # type: ignore[method-assign]


def _variant(spec: str) -> None:
    """An experiment on RocksDB's background work, applied to both runs (A/B against
    ``none``, alternating runs: under load one run says little):
    ``l0-trigger-N`` (compact L0 at N files, not 4: fewer compactions of the base
    level, which every checkpoint's small flush overlaps, so fewer new SST files to
    upload; gets that miss the cache probe more L0 files), ``nice-compactions-N``
    (RocksDB's compaction threads ``rocksdb:low`` at nice N: what
    ``Env::LowerThreadPoolCPUPriority`` does, which rocksdict does not expose),
    ``universal`` (universal compaction), ``link-attempts-N`` (checkpoint_dirs.LINK_ATTEMPTS = N: how
    many times a cut links the files GIL free before it makes the checkpoint with
    rocksdict's create_checkpoint, holding the GIL; 0: always create_checkpoint),
    ``poll-S`` (checkpoint_dirs._POLL = S seconds: the pause between two attempts)."""
    if spec == "none":
        return
    import rocksdict

    from tstate.state.rocksdb import checkpoint_dirs, db

    if spec.startswith("link-attempts-"):
        checkpoint_dirs.LINK_ATTEMPTS = int(spec.rsplit("-", 1)[1])
        return
    if spec.startswith("poll-"):
        checkpoint_dirs._POLL = float(spec.rsplit("-", 1)[1])
        return

    if spec.startswith("nice-compactions-"):
        nice = int(spec.rsplit("-", 1)[1])
        init = db.LocalDB.__init__

        def renice(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **k)
            for t in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{t}/comm") as f:
                        if f.read().startswith("rocksdb:low"):
                            os.setpriority(os.PRIO_PROCESS, int(t), nice)
                except OSError:
                    pass

        db.LocalDB.__init__ = renice  # type: ignore[method-assign]
        return
    options = db._options

    def changed(settings: Any, cache: Any) -> Any:
        o = options(settings, cache)
        if spec.startswith("l0-trigger-"):
            n = int(spec.rsplit("-", 1)[1])
            o.set_level_zero_file_num_compaction_trigger(n)
            o.set_level_zero_slowdown_writes_trigger(max(20, 3 * n))
            o.set_level_zero_stop_writes_trigger(max(36, 5 * n))
        elif spec == "universal":
            o.set_compaction_style(rocksdict.DBCompactionStyle.universal())
        else:
            raise SystemExit(f"unknown --variant {spec!r}")
        return o

    db._options = changed  # type: ignore[assignment]


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _summary(label: str, lat: list[float], cpu: list[float]) -> str:
    return (f"{label}: p99 {_p99(lat) * 1e3:.1f} ms, median {statistics.median(lat) * 1e3:.1f} ms; "
            f"CPU p99 {_p99(cpu) * 1e3:.1f} ms, median {statistics.median(cpu) * 1e3:.1f} ms")


def _stage_cpu(events: list[tuple[str, str, float, float, float]], epochs: list[tuple[float, float, float, float]],
               label: str, keep: Callable[[int], bool]) -> str:
    """The processing thread's CPU per epoch (median over the epochs ``keep`` selects by
    index), in total and in the write-back and its database write."""
    tot, wb, wr = [], [], []
    for i, (t0, t1, cpu, _g) in enumerate(epochs):
        if not keep(i):
            continue
        mine = [e for e in events if e[0] == "MainThread" and t0 <= e[2] < t1]
        tot.append(cpu)
        wb.append(sum(e[4] for e in mine if e[1] == "write_back"))
        wr.append(sum(e[4] for e in mine if e[1] == "write_batch"))
    if not tot:
        return ""
    med = statistics.median
    return (f"  {label:34s} ({len(tot):2d}): CPU {med(tot) * 1e3:6.1f} ms; in write_back {med(wb) * 1e3:5.1f}"
            f" (its db writes {med(wr) * 1e3:5.1f}); outside write_back {med([t - w for t, w in zip(tot, wb)]) * 1e3:6.1f}")


def _waits(label: str, epochs: list[tuple[float, float, float, float]], runq: list[float]) -> str:
    """Where the processing thread's wall - CPU went, median and at the slowest epoch:
    waiting for a CPU (run queue) or blocked (the GIL, a lock, I/O)."""
    rows = [(t1 - t0, cpu, rq, max(0.0, t1 - t0 - cpu - rq)) for (t0, t1, cpu, _g), rq in zip(epochs, runq)]
    if not rows:
        return ""
    slow = max(rows)
    med = statistics.median
    return (f"{label}: wall - CPU median {med([r[0] - r[1] for r in rows]) * 1e3:.1f} ms = run queue {med([r[2] for r in rows]) * 1e3:.1f}"
            f" + blocked {med([r[3] for r in rows]) * 1e3:.1f} (medians); slowest epoch {slow[0] * 1e3:.1f} ms = CPU {slow[1] * 1e3:.1f}"
            f" + run queue {slow[2] * 1e3:.1f} + blocked {slow[3] * 1e3:.1f}")


def report(n_touch: int) -> str:
    out = io.StringIO()
    epochs = EPOCHS[-n_touch:]
    t_first = epochs[0][0]
    ev = [e for e in EVENTS if e[3] >= t_first]
    stages: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for th, st, t0, t1, c in ev:
        kind = "processing" if th == "MainThread" else ("cut" if "cut" in th else "upload" if "upload" in th else th.split("-")[0] if th.startswith("tstate") else th)
        stages.setdefault((kind, st), []).append((t1 - t0, c))
    print("stage (thread): calls, median wall / CPU ms, max wall ms, total wall s", file=out)
    for (kind, st), xs in sorted(stages.items()):
        walls = [w for w, _ in xs]
        cpus = [c for _, c in xs]
        print(f"  {st:18s} ({kind:10s}) {len(xs):4d}  {statistics.median(walls) * 1e3:8.2f} / {statistics.median(cpus) * 1e3:8.2f}"
              f"  max {max(walls) * 1e3:8.2f}  total {sum(walls):6.2f}", file=out)
    print("\nper epoch: lat ms, CPU ms, GC ms, captured?, processing write_back ms, cut-thread ms inside, upload-thread ms inside,"
          " processing CPU ms in the stages above (outermost calls), commit+GC-thread ms inside,"
          " run-queue ms (runnable, no CPU), blocked ms (wall - CPU - run queue: the GIL, locks, I/O)", file=out)
    main = [e for e in ev if e[0] == "MainThread"]
    outer = [e for e in main if not any(o is not e and o[2] <= e[2] and e[3] <= o[3] and (o[2], o[3]) != (e[2], e[3]) for o in main)]
    rows = []
    runq = RUNQ[-len(epochs):] if len(RUNQ) >= len(epochs) else [0.0] * len(epochs)
    for (t0, t1, cpu, g), rq in zip(epochs, runq):
        inside = [e for e in ev if _overlap(t0, t1, e[2], e[3]) > 0]
        cap = any(e[1] == "capture" and t0 <= e[2] < t1 for e in inside)
        wb = sum(e[3] - e[2] for e in inside if e[1] == "write_back" and e[0] == "MainThread" and t0 <= e[2] < t1)
        cutt = sum(_overlap(t0, t1, e[2], e[3]) for e in inside if "cut" in e[0] and e[1] in ("_checkpoint", "deferred"))
        upl = sum(_overlap(t0, t1, e[2], e[3]) for e in inside if "upload" in e[0] and e[1] in ("_read", "checksum", "_write"))
        staged = sum(e[4] for e in outer if t0 <= e[2] < t1)
        com = sum(_overlap(t0, t1, e[2], e[3]) for e in inside if e[1] in ("_commit", "_collect_guarded"))
        blocked = max(0.0, t1 - t0 - cpu - rq)
        rows.append((t1 - t0, cpu, g, cap, wb, cutt, upl, staged, com, rq, blocked))
        print(f"  {(t1 - t0) * 1e3:7.1f} {cpu * 1e3:7.1f} {g * 1e3:6.1f} {'C' if cap else '-'} {wb * 1e3:7.1f} {cutt * 1e3:7.1f} {upl * 1e3:7.1f}"
              f" {staged * 1e3:7.1f} {com * 1e3:7.1f} {rq * 1e3:7.1f} {blocked * 1e3:7.1f}", file=out)
    cap_rows = [r for r in rows if r[3]]
    other = [r for r in rows if not r[3]]
    for label, rs in (("capture epochs", cap_rows), ("other epochs", other)):
        if rs:
            print(_summary(f"{label} ({len(rs)})", [r[0] for r in rs], [r[1] for r in rs])
                  + f"; write-back median {statistics.median([r[4] for r in rs]) * 1e3:.1f} ms"
                  + f"; wall - CPU median {statistics.median([r[0] - r[1] for r in rs]) * 1e3:.1f} ms"
                  + f" (run queue {statistics.median([r[9] for r in rs]) * 1e3:.1f}, blocked {statistics.median([r[10] for r in rs]) * 1e3:.1f})"
                  + f"; CPU in the stages median {statistics.median([r[7] for r in rs]) * 1e3:.1f} ms, outside them"
                  f" {statistics.median([r[1] - r[7] for r in rs]) * 1e3:.1f} ms", file=out)
    for label, idx in (("the cut thread", 5), ("the upload thread", 6), ("a commit", 8)):
        busy = [r for r in rows if r[idx] > 0]
        idle = [r for r in rows if r[idx] == 0]
        if busy and idle:
            print(f"epochs overlapping {label} ({len(busy)}): wall - CPU median "
                  f"{statistics.median([r[0] - r[1] for r in busy]) * 1e3:.1f} ms; others ({len(idle)}): "
                  f"{statistics.median([r[0] - r[1] for r in idle]) * 1e3:.1f} ms", file=out)
    with_cut: list[Any] = []
    without = [r for r in rows if r[5] == 0]
    if with_cut and without:
        print(f"epochs overlapping the cut thread ({len(with_cut)}): wall - CPU median "
              f"{statistics.median([r[0] - r[1] for r in with_cut]) * 1e3:.1f} ms; others ({len(without)}): "
              f"{statistics.median([r[0] - r[1] for r in without]) * 1e3:.1f} ms", file=out)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--cache-mb", type=int, default=256)
    ap.add_argument("--cprofile", action="store_true", help="also cProfile the processing thread of the checkpointed run")
    ap.add_argument("--variant", default="none", help="an experiment on RocksDB's background work, in both runs: "
                    "l0-trigger-N, nice-compactions-N, universal (see _variant)")
    a = ap.parse_args(argv)
    _variant(a.variant)
    _patch()
    epochs = _epochs(a.keys, a.epochs)
    root = tempfile.mkdtemp(prefix="ckpt_profile-")
    prof = cProfile.Profile() if a.cprofile else None
    try:
        none = heap_dataflow(a.keys, epochs, None, ts.RocksDB(os.path.join(root, "engine"), cache_bytes=a.cache_mb << 20))
        none_events, none_epochs, none_runq = list(EVENTS), EPOCHS[-a.epochs:], RUNQ[-a.epochs:]
        EVENTS.clear()
        if prof is not None:
            prof.enable()
        ck = heap_dataflow(a.keys, epochs, os.path.join(root, "ck"),
                           ts.RocksDB(os.path.join(root, "engine-ck"), cache_bytes=a.cache_mb << 20))
        if prof is not None:
            prof.disable()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{a.keys:,} keys, {a.epochs} epochs of {max(1, a.keys // 100):,} events, cache {a.cache_mb} MB, load {os.getloadavg()[0]:.1f}"
          f", variant {a.variant}")
    print(_summary("no checkpoints", none["latency"], none["cpu"]))
    print(_summary("checkpoints every epoch", ck["latency"], ck["cpu"]) + f"; {ck['checkpoints']} made, {ck['skipped']} skipped;"
          f" uploaded {ck['uploaded_bytes'] / 1e6:.1f} MB / referenced {ck['referenced_bytes'] / 1e6:.1f} MB per checkpoint")
    print(f"ratio p99 {_p99(ck['latency']) / _p99(none['latency']):.3f}, CPU p99 {_p99(ck['cpu']) / _p99(none['cpu']):.3f}")
    print(_waits("no checkpoints", none_epochs, none_runq))
    print(_waits("checkpoints every epoch", EPOCHS[-a.epochs:], RUNQ[-a.epochs:]))
    print()
    print(report(a.epochs))
    ck_epochs = EPOCHS[-a.epochs:]
    captured = {i for i, (t0, t1, _c, _g) in enumerate(ck_epochs) if any(e[1] == "capture" and t0 <= e[2] < t1 for e in EVENTS)}
    print("the processing thread's CPU per epoch, median (write_back: the cache's batches, encoding + db.write;"
          " a batch deferred by a cut is written on the cut thread):")
    print(_stage_cpu(none_events, none_epochs, "no checkpoints", lambda i: True))
    print(_stage_cpu(EVENTS, ck_epochs, "checkpoints: capture epochs", lambda i: i in captured))
    print(_stage_cpu(EVENTS, ck_epochs, "checkpoints: other epochs", lambda i: i not in captured))
    print("RocksDB at the end of each run (no checkpoints, then checkpoints):")
    print("\n".join(STATS))
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue())


if __name__ == "__main__":
    main()
