"""Parallel recovery on Spark (tstate.spark.restore): after a driver restart the
executors check the checkpoint's files and read the bins; the driver reads no state
file, a damaged checkpoint is still skipped for the previous one, and the output is
exactly once."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
from pyspark.sql import functions as F

from tstate.checkpoint.store import CheckpointSkippedWarning, CheckpointStore
from tstate.errors import ConfigurationError
from tstate.spark import Backend, Source

from .flows import embedded, keyed

ROW = "k string, v long, t long"
ROWS = [{"k": f"k{i % 23}", "v": i % 5, "t": i // 12} for i in range(96)]  # epochs 0..7


def first_run(spark: Any, d: str) -> list:
    """Batches for epochs 0..3, then the driver "dies"."""
    flow, _ev, _stats, out = keyed()
    b = Backend(spark, checkpoint=d, partitions=2, progress=False)
    df = spark.createDataFrame(ROWS, ROW)
    b._prepare(flow, {"events": Source(df, time="t")})
    for lo in range(4):
        b._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    return out.items


def driver_reads(monkeypatch: Any) -> list[str]:
    """The data files the driver process reads from now on."""
    seen: list[str] = []
    read = CheckpointStore._read_here

    def spy(self: CheckpointStore, ref: Any) -> bytes:
        if ref.path.startswith("data/"):
            seen.append(ref.path)
        return read(self, ref)

    monkeypatch.setattr(CheckpointStore, "_read_here", spy)
    return seen


@pytest.mark.parametrize("verify", ["executors", "driver"])
def test_a_restart_reads_state_on_the_executors_only(spark: Any, tmp_path: Any, monkeypatch: Any, verify: str) -> None:
    d = str(tmp_path / "ck")
    out1 = first_run(spark, d)
    seen = driver_reads(monkeypatch)
    flow, _ev, _stats, out2 = keyed()
    b = Backend(spark, checkpoint=d, partitions=3, progress=False, verify=verify)
    b.run(flow, {"events": Source(spark.createDataFrame(ROWS, ROW), time="t")})
    first = b.metrics.batches[0]
    # the executors took the bins (from the store, or from a cache their Python workers
    # kept: this test's executors outlive the first run's driver)
    assert first.batch == 4 and first.cache_hits + first.cache_catchups + first.cache_misses > 0
    assert 0 < first.take_max_seconds <= first.take_seconds  # the tasks' time taking bins, and the slowest's
    assert b.metrics.verified_by == verify
    if verify == "executors":
        assert seen == []  # checked and read by the executors, in parallel
    else:
        assert seen  # the driver read every file to check it
    ref_out, _ = embedded(ROWS)
    assert sorted([p for p in out1 if p[0] < 4] + out2.items, key=repr) == ref_out


def test_executors_find_a_damaged_file_and_recovery_falls_back(spark: Any, tmp_path: Any) -> None:
    d = str(tmp_path / "ck")
    out1 = first_run(spark, d)
    store = CheckpointStore(d, readonly=True)
    newest = store.latest()
    older = store.manifest(newest.id - 1)
    changed = [r for r in newest.files() if r not in set(older.files())]
    path = os.path.join(d, changed[0].path)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    flow, _ev, _stats, out2 = keyed()
    b = Backend(spark, checkpoint=d, partitions=2, progress=False, verify="executors")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b.run(flow, {"events": Source(spark.createDataFrame(ROWS, ROW), time="t")})
    (w,) = [w for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
    assert f"resuming from checkpoint {older.id}" in str(w.message) and changed[0].path in str(w.message)
    assert b.metrics.verified_by == "executors" and b.metrics.batches[0].batch == 3
    ref_out, _ = embedded(ROWS)
    assert sorted([p for p in out1 if p[0] < 3] + out2.items, key=repr) == ref_out


def test_verify_is_checked(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="verify must be one of 'auto', 'executors', 'driver', got 'nobody'"):
        Backend(spark, checkpoint=str(tmp_path), verify="nobody")
