"""Shared helpers for the Spark benchmarks: the SparkSession, the generated parquet
workload, a verifying foreachBatch sink and per-batch timings from query progress."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Spark configuration shared by every contender.  Notes:
#  * shuffle.partitions=2: the default 200 costs ~a second per micro-batch on 2 cores
#    (200 state-store instances opened/committed per stateful operator per batch).
#  * noDataMicroBatches off: with timers (transformWithState) an availableNow query keeps
#    running no-data batches and never finishes; off for all so each runs exactly one
#    micro-batch per input file.
#  * RocksDB state store with changelog checkpointing for every stateful operator.
SPARK_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "false",  # AQE is off for streaming anyway; keep batch reads alike
}


def spark_session(app: str = "tstate-bench", master: str = "local[2]") -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", _python())
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app)
    for k, v in SPARK_CONF.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _python() -> str:
    import sys

    return sys.executable


# ---------------------------------------------------------------- the workload


def generate(data_dir: str, files: int, rows_per_file: int, keys: int, seed: int = 7) -> list[str]:
    """``files`` parquet files of ``rows_per_file`` rows (``key`` string of ``keys`` distinct
    values, uniform; ``value`` int64).  Reused if already there.  Modification times are set
    one second apart so the file source (oldest first) reads them in name order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(data_dir, exist_ok=True)
    names = np.array([f"key{i:05d}" for i in range(keys)], dtype=object)
    rng = np.random.default_rng(seed)
    paths = []
    base = int(time.time()) - files - 10
    for f in range(files):
        path = os.path.join(data_dir, f"part-{f:05d}.parquet")
        ks = rng.integers(0, keys, rows_per_file)  # drawn even when cached: same data either way
        if not os.path.exists(path):
            tbl = pa.table(
                {
                    "key": pa.array(names[ks], type=pa.string()),
                    "value": pa.array(np.arange(f * rows_per_file, (f + 1) * rows_per_file), type=pa.int64()),
                }
            )
            tmp = path + ".tmp"
            pq.write_table(tbl, tmp)
            os.replace(tmp, path)
        os.utime(path, (base + f, base + f))
        paths.append(path)
    return paths


def default_data_dir(files: int, rows_per_file: int, keys: int) -> str:
    return os.path.join(tempfile.gettempdir(), "tstate-spark-bench", f"f{files}-r{rows_per_file}-k{keys}")


def stream_source(spark: Any, source_dir: str) -> Any:
    """The streaming DataFrame over the parquet files: one file per micro-batch."""
    return (
        spark.readStream.schema("key string, value long")
        .option("maxFilesPerTrigger", 1)
        .parquet(source_dir)
    )


# ---------------------------------------------------------------- the sink + checks


@dataclass
class Collector:
    """What a contender emitted: the latest count per key and the rows emitted per batch.

    ``add`` is the body of the foreachBatch sink used by every Spark contender: it
    materialises the batch's output (Arrow, to the driver), which forces the stateful
    computation, and folds it into ``latest``."""

    latest: dict[str, int] = field(default_factory=dict)
    emitted: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_pairs(self, pairs: Iterable[tuple[str, int]]) -> None:
        n = 0
        with self.lock:
            latest = self.latest
            for k, c in pairs:  # the last emitted count wins: counts must never go stale
                latest[k] = c
                n += 1
            self.emitted.append(n)

    def foreach_batch(self, df: Any, batch_id: int) -> None:
        tbl = df.toArrow()
        self.add_pairs(zip(tbl.column("key").to_pylist(), tbl.column("count").to_pylist()))


def check(name: str, got: Collector, reference: dict[str, int], touched: int, rows: int) -> str:
    """'ok' or a description of what is wrong with ``got``."""
    total = sum(got.latest.values())
    problems = []
    if total != rows:
        problems.append(f"sum of counts {total:,} != {rows:,} rows")
    if got.latest != reference:
        bad = [k for k in reference if got.latest.get(k) != reference[k]][:3]
        problems.append(f"counts differ from the baseline (e.g. {[(k, got.latest.get(k), reference[k]) for k in bad]})")
    if sum(got.emitted) != touched:
        problems.append(f"emitted {sum(got.emitted):,} (key, count) rows, expected {touched:,} (keys touched per batch)")
    return "ok" if not problems else f"{name}: " + "; ".join(problems)


# ---------------------------------------------------------------- timings


def batch_durations(query: Any) -> list[float]:
    """Seconds per micro-batch that read input, from ``query.recentProgress``."""
    out = []
    for p in getattr(query, "recentProgress", None) or []:
        rows = p.get("numInputRows", 0) if isinstance(p, dict) else getattr(p, "numInputRows", 0)
        if not rows:
            continue
        d = p.get("batchDuration") if isinstance(p, dict) else getattr(p, "batchDuration", None)
        if d is None:
            dm = p.get("durationMs") if isinstance(p, dict) else getattr(p, "durationMs", {})
            d = (dm or {}).get("triggerExecution")
        if d is not None:
            out.append(d / 1000.0)
    return out


def run_query(writer_start: Any) -> tuple[float, list[float], Any]:
    """Start a query (``writer_start()`` returns the StreamingQuery), wait for it; wall
    seconds from before start to the end of awaitTermination, per-batch seconds."""
    t0 = time.perf_counter()
    q = writer_start()
    q.awaitTermination()
    total = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    return total, batch_durations(q), q


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


class TempDirs:
    """Fresh checkpoint directories, removed at exit."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="tstate-spark-ckpt-")
        self.n = 0

    def new(self, name: str) -> str:
        self.n += 1
        safe = "".join(c if c.isalnum() else "_" for c in name)
        return os.path.join(self.root, f"{self.n:02d}-{safe}")

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
