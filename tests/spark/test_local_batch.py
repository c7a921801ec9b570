"""Small micro-batches in one Spark task (tstate.spark.local_batch): the same output and
state as the embedded engine, one root stage per batch, and checkpoints interchangeable
with the staged path's (a run resumes from either)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.spark import Backend, Source, local_batch

from .flows import embedded, keyed
from .test_backend import ROW, as_tuples, rows_st, run_spark, spark_settings


@pytest.fixture(autouse=True)
def _staged() -> None:
    """(Overrides tests/spark/conftest.py's: the default rule applies here.)"""


@spark_settings
@given(rows=rows_st, partitions=st.integers(1, 3), epochs=st.integers(1, 3), fold=st.booleans())
def test_small_batches_run_in_one_task_and_equal_the_embedded_engine(
    spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int, fold: bool
) -> None:
    ref_out, ref_state = embedded(rows, fold=fold)
    out, state, backend = run_spark(spark, rows, str(tmp_path_factory.mktemp("ck")), partitions, epochs, fold=fold)
    assert out == ref_out
    assert state == as_tuples(ref_state)
    m = backend.metrics.batches
    if rows:  # (an empty frame has no size Spark knows: staged)
        assert all(b.stages == 1 for b in m)  # (staged: a root stage per boundary stage)
    assert sum(b.records for b in m) == len(rows)


def test_column_key_and_late_rows(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": f"k{i % 7}", "v": i % 5, "t": i // 9} for i in range(90)]
    flow, ev, stats, out = keyed(key=ts.col("k"))
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    ref = sorted(out.items, key=repr)
    flow2, _ev, _stats, out2 = keyed(key=ts.col("k"))
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2)
    backend.run(flow2, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=3)
    assert sorted(out2.items, key=repr) == ref
    assert all(b.stages == 1 for b in backend.metrics.batches)


def test_a_large_batch_is_staged(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", 16)  # (a few rows are more than this)
    rows = [{"k": f"k{i % 5}", "v": i % 3, "t": i // 10} for i in range(40)]
    ref_out, _ = embedded(rows)
    out, _state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 2, 2)
    assert out == ref_out
    assert all(b.stages > 1 for b in backend.metrics.batches)


@pytest.mark.parametrize("first_local", [True, False])
def test_staged_and_local_batches_resume_each_other(spark: Any, tmp_path: Any, monkeypatch: Any, first_local: bool) -> None:
    """A driver that dies after four epochs run one way resumes the other way: the bins,
    their timers and the checkpoint are the same whichever path wrote them."""
    from pyspark.sql import functions as F

    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 10} for i in range(80)]
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    df_all = spark.createDataFrame(rows, ROW).persist()
    df_all.count()  # (cached, so Spark knows its size, as after a run's cut job)
    small, staged = local_batch.LOCAL_BATCH_BYTES, -1
    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", small if first_local else staged)
    flow, _ev, _stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=d, partitions=2)
    b1._prepare(flow, {"events": Source(df_all.where(F.col("t") < 4), time="t")})
    for lo in range(4):
        b1._batch({"events": df_all.where(F.col("t") == lo)}, {"events": Source(df_all, time="t")}, lo, lo, lo + 1, None)
    assert all((b.stages == 1) == first_local for b in b1.metrics.batches)
    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", staged if first_local else small)
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, checkpoint=d, partitions=2)
    b2.run(flow2, {"events": Source(df_all, time="t")}, epochs_per_batch=2)
    assert all((b.stages == 1) != first_local for b in b2.metrics.batches)
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b2.state(stats2).frame.collect()}
    assert got == as_tuples(ref_state)
    df_all.unpersist()


def test_the_driver_reads_no_manifest_it_committed(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Each batch decides on the one-task path from the stored state's size in the head
    manifest, which the driver committed itself a moment before: it comes from memory
    (binstore.remember), not read and decoded again from the store."""
    from tstate.checkpoint.store import CheckpointStore

    reads: list[int] = []
    read = CheckpointStore.manifest

    def counting(self: Any, checkpoint_id: int) -> Any:
        reads.append(checkpoint_id)
        return read(self, checkpoint_id)

    rows = [{"k": f"k{i % 5}", "v": i % 3, "t": i // 10} for i in range(40)]
    ref_out, _ = embedded(rows)
    monkeypatch.setattr(CheckpointStore, "manifest", counting)  # (the driver's process only)
    out, _state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 2, 2)
    assert out == ref_out
    assert len(backend.metrics.batches) > 1 and all(b.stages == 1 for b in backend.metrics.batches)
    assert reads == []
