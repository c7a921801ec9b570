"""A Spark job for the fault tests, run in its own process (its own SparkContext):
``python -m tests.spark.cluster_job MASTER CKPT OUT [--kill-executor-at N] [--die-at N] [--rescale-at N] [--column-key] [--rocksdb DIR]``.

Batch mode over 8 epochs of keyed records (the flows.keyed dataflow, output to an
exactly-once FileSink).  ``--kill-executor-at N`` SIGKILLs one executor JVM while batch N
runs (Spark retries its tasks elsewhere); ``--die-at N`` kills the driver itself in the
middle of batch N (after the sinks' output was written, before the commit);
``--rescale-at N`` moves the state from 2 to 3 partitions at epoch N (batch N);
``--column-key`` keys the first operator by ``ts.col("k")`` (the colocated path);
``--rocksdb DIR``: keyed state in RocksDB on the executors (``state=ts.RocksDB(DIR)``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import tstate as ts
from tstate.spark import Backend, Source, local_session

from tests.spark.flows import keyed

ROWS = [{"k": f"k{i % 13}", "v": i % 6, "t": i // 40} for i in range(320)]


def executors() -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "CoarseGrainedExecutorBackend" in line]


def main() -> None:
    master, ckpt, out_dir = sys.argv[1:4]
    args = sys.argv[4:]
    kill_at = int(args[args.index("--kill-executor-at") + 1]) if "--kill-executor-at" in args else None
    die_at = int(args[args.index("--die-at") + 1]) if "--die-at" in args else None
    rescale_at = int(args[args.index("--rescale-at") + 1]) if "--rescale-at" in args else None
    spark = local_session(master, **{"spark.task.maxFailures": "4", "spark.executor.memory": "512m"})
    flow, _ev, _stats, out = keyed(key=ts.col("k") if "--column-key" in args else None)
    files = ts.io.files(out_dir)
    flow.sink(out_stream(flow), files)
    state = ts.RocksDB(args[args.index("--rocksdb") + 1]) if "--rocksdb" in args else None
    backend = Backend(spark, checkpoint=ckpt, partitions=2, state=state)
    orig = backend._batch

    def batch(dfs, bound, b, lo, hi, const):  # type: ignore[no-untyped-def]
        if kill_at is not None and b == kill_at:
            victims = executors()
            if victims:
                threading.Timer(0.3, os.kill, (victims[0], signal.SIGKILL)).start()
                print(f"killing executor {victims[0]} during batch {b}", flush=True)
        if die_at is not None and b == die_at:
            real_commit = backend.store._commit

            def die(w):  # type: ignore[no-untyped-def]
                os.kill(os.getpid(), signal.SIGKILL)

            backend.store._commit = die  # type: ignore[method-assign]
            try:
                return orig(dfs, bound, b, lo, hi, const)
            finally:
                backend.store._commit = real_commit  # type: ignore[method-assign]
        return orig(dfs, bound, b, lo, hi, const)

    backend._batch = batch  # type: ignore[method-assign]
    df = spark.createDataFrame(ROWS, "k string, v long, t long")
    reconfigure = [(rescale_at, ts.Rescale(3))] if rescale_at is not None else []
    # one batch per epoch: kill points
    backend.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=1, reconfigure=reconfigure)
    print("done", [m.batch for m in backend.metrics.batches], flush=True)
    print("partitions", [m.partitions for m in backend.metrics.batches], flush=True)
    spark.stop()


def out_stream(flow: ts.Dataflow) -> ts.Stream:
    """The flow's final stream (the concat feeding its collect sink)."""
    from tstate.plan import Concat

    index = next(i for i, node in flow.graph if isinstance(node, Concat))
    return ts.Stream(flow, index, 0, flow.root)


if __name__ == "__main__":
    main()
