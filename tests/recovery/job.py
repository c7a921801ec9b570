"""A restartable job for the crash tests: ``python -m tests.recovery.job CKPT OUT ...``.

A deterministic source of keyed records (replayable by position), two stateful
operators (a keyed list with timers, a keyed count) and an exactly-once file sink.
``--crash-commit N`` / ``--crash-write N`` make the process die (``os._exit``) at the
N-th checkpoint commit / data write, to hit the dangerous instants on purpose;
``--crash-slice N`` in the middle of the N-th slice of an asynchronous checkpoint (after
its first bin was encoded and handed to the writer process, before the rest), and
``--crash-commit-sent N`` right after asking the writer process to commit the N-th
checkpoint (which it may or may not do before it dies with the run);
``--kill-snapshot N`` SIGKILLs, once, the snapshot process (``mode="fork"``) of
checkpoint N in the middle of its writes: the job must go on and finish.
``--precopy`` rescales with ``strategy="precopy"`` (to ``workers + 2`` at epoch 12, back
to ``workers`` at epoch 30: bins preloaded from checkpoints, deltas handed over);
``--crash-preload N`` dies right after the N-th bin is preloaded (mid-preload: copies
loaded, not handed over yet), ``--crash-handover N`` right after the N-th pre-copy
hand-over.  ``--rocksdb DIR`` keeps the keyed state in RocksDB (checkpoints of
files); ``--crash-ingest N`` dies right after the N-th SST file ingest (a restore's or a
move's: the bin ingested, not installed), ``--crash-upload N`` in the N-th upload of a
checkpoint's file (half of it written).  The last line
printed says where the run resumed from, how many checkpoints it lost and how many
child processes it left behind (always 0: children are reaped).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints


def batches(seed: int, epochs: int, per_epoch: int):
    rng = random.Random(seed)
    for t in range(epochs):
        yield t, [(rng.randrange(40), rng.randrange(100)) for _ in range(per_epoch)]


def build(out: str, seed: int, epochs: int, per_epoch: int) -> ts.Dataflow:
    flow = ts.Dataflow("crashy")
    src = flow.source(ts.io.from_batches(lambda: batches(seed, epochs, per_epoch)), name="events")

    @flow.stateful(src, key=lambda r: r[0], state=list[int], bins=16)
    def collect(values: list[int], r, ctx: ts.Context) -> None:
        values.append(r[1])
        if len(values) > 5:
            del values[0]
        ctx.notify_at(ctx.time + 2)

    @collect.on_notify
    def report(values: list[int], time, ctx: ts.Context) -> None:
        ctx.emit([ctx.key, time, sum(values)])

    @flow.stateful(collect, key=lambda r: r[1] % 7, state=int, bins=8)
    def count(n: int, r, ctx: ts.Context) -> int:
        ctx.emit(["count", ctx.key, ctx.time, n + 1])
        return n + 1

    flow.sink(collect.concat(count), ts.io.files(out), name="out")
    return flow


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--per-epoch", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--mode", default="async")
    ap.add_argument("--crash-commit", type=int, default=0)
    ap.add_argument("--crash-write", type=int, default=0)
    ap.add_argument("--kill-snapshot", type=int, default=0)
    ap.add_argument("--crash-slice", type=int, default=0)
    ap.add_argument("--crash-commit-sent", type=int, default=0)
    ap.add_argument("--precopy", action="store_true")
    ap.add_argument("--crash-preload", type=int, default=0)
    ap.add_argument("--crash-handover", type=int, default=0)
    ap.add_argument("--rocksdb", default="", help="keyed state in RocksDB under this directory")
    ap.add_argument("--crash-ingest", type=int, default=0)
    ap.add_argument("--crash-upload", type=int, default=0)
    args = ap.parse_args(argv)
    if args.crash_ingest:  # die right after the N-th SST file is ingested (a restore's or a move's)
        from tstate.state.rocksdb.store import KeyedStore

        ingest_bin, ingests = KeyedStore.ingest_bin, [0]

        def dying_ingest(self, exported, replace=True):
            ingest_bin(self, exported, replace)
            ingests[0] += 1
            if ingests[0] == args.crash_ingest:
                sys.stdout.flush()
                os._exit(9)

        KeyedStore.ingest_bin = dying_ingest
    if args.crash_upload:  # die in the N-th upload of a RocksDB checkpoint's file, half of it written
        from tstate.checkpoint import sst_files

        write, uploads = sst_files._write, [0]

        def dying_upload(fs, path, data):
            uploads[0] += 1
            if uploads[0] == args.crash_upload:
                full = os.path.join(fs.root, *path.split("/"))
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data[: len(data) // 2])
                os._exit(9)
            write(fs, path, data)

        sst_files._write = dying_upload
    if args.crash_preload or args.crash_handover:
        from tstate.engine.precopy import PreCopy

        done = {"preload": 0, "handover": 0}

        def dying(name: str, limit: int, fn):
            def wrapper(*a, **kw):
                out = fn(*a, **kw)
                if out:
                    done[name] += 1
                    if done[name] == limit:
                        sys.stdout.flush()
                        os._exit(9)
                return out

            return wrapper

        if args.crash_preload:
            PreCopy._load = dying("preload", args.crash_preload, PreCopy._load)
        if args.crash_handover:
            PreCopy.hand_over = dying("handover", args.crash_handover, PreCopy.hand_over)
    if args.crash_slice:
        from tstate.engine.checkpointing import slices

        encode_work = slices.encode_work
        seen = {"jobs": set(), "bins": 0}

        def crashing_work(w):
            # the N-th checkpoint job to encode anything: die at its second bin
            seen["jobs"].add(id(w.frozen))
            if len(seen["jobs"]) == args.crash_slice:
                seen["bins"] += 1
                if seen["bins"] == 2:
                    sys.stdout.flush()
                    os._exit(9)
            return encode_work(w)

        slices.encode_work = crashing_work
    if args.crash_commit_sent:
        from tstate.engine.checkpointing import writer as writer_module

        commit = writer_module.FileWriter.commit
        init = writer_module.FileWriter.__init__
        sent = [0]

        def started_init(self, location):
            # until the writer process is ready, checkpoints commit in this process:
            # wait for it, so that the N-th commit is the writer process's
            init(self, location)
            assert self.ready.wait(120)

        writer_module.FileWriter.__init__ = started_init
        write = writer_module.FileWriter.write

        def written_at_once(self, files):
            # each batch written before the run goes on: no checkpoint is skipped for
            # a writer behind (a loaded machine), so the N-th commit request comes
            fut = write(self, files)
            fut.result(timeout=120)
            return fut

        writer_module.FileWriter.write = written_at_once

        def crashing_commit(self, request):
            fut = commit(self, request)
            sent[0] += 1
            if sent[0] == args.crash_commit_sent:
                time.sleep(0.002)  # the feeder thread hands it over
                sys.stdout.flush()
                os._exit(9)
            return fut

        writer_module.FileWriter.commit = crashing_commit
    if args.kill_snapshot:
        import signal

        from tstate.checkpoint import store as store_module

        write_data_file = store_module.write_data_file
        marker = os.path.join(args.ckpt, f"killed-snapshot-{args.kill_snapshot}")

        def killing(fs, operator, bin, checkpoint_id, *rest):
            # runs in the snapshot process; once only (a retry may reuse the same id)
            ref = write_data_file(fs, operator, bin, checkpoint_id, *rest)
            if checkpoint_id == args.kill_snapshot and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return ref

        store_module.write_data_file = killing
    if args.crash_commit or args.crash_write:
        from tstate.checkpoint import store

        counts = {"commit": 0, "write": 0}

        def crashing(name: str, limit: int, fn):
            def wrapper(*a, **kw):
                counts[name] += 1
                if counts[name] == limit:
                    sys.stdout.flush()
                    os._exit(9)
                return fn(*a, **kw)

            return wrapper

        if args.crash_commit:
            store.CheckpointWriter.commit = crashing("commit", args.crash_commit, store.CheckpointWriter.commit)
        if args.crash_write:  # the N-th delta file written (sync and thread modes write them here)
            from tstate.engine.checkpointing import pending

            write_batch = pending.write_batch

            def crashing_batch(fs, batch):
                for path, data in batch:
                    if "-delta" in path:
                        counts["write"] += 1
                        if counts["write"] == args.crash_write:
                            sys.stdout.flush()
                            os._exit(9)
                    write_batch(fs, [(path, data)])

            pending.write_batch = crashing_batch
    flow = build(args.out, args.seed, args.epochs, args.per_epoch)
    reconfigure = []
    if args.precopy:
        reconfigure = [(12, ts.Rescale(args.workers + 2, strategy="precopy")), (30, ts.Rescale(args.workers, strategy="precopy"))]
    flow.run(
        workers=args.workers, checkpoint=Checkpoints(args.ckpt, every_epochs=args.every, mode=args.mode),
        reconfigure=reconfigure, state=ts.RocksDB(args.rocksdb) if args.rocksdb else None,
    )
    r = flow.execution.restored
    if args.precopy:
        st = flow.execution.precopy.stats
        print(f"precopy handovers={st.handovers} fallbacks={st.fallbacks} preloaded={st.preloaded} late={st.late}")
    try:
        os.waitpid(-1, os.WNOHANG)
        children = 1  # a child exists (running or a zombie)
    except ChildProcessError:
        children = 0
    print(f"done restored_from={r.time if r else None} lost={len(flow.execution.coordinator.lost)} children={children}")


if __name__ == "__main__":
    main()
