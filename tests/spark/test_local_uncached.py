"""A batch run over a small local relation (a frame the driver made from pandas or Arrow
data) does not cache it (tstate.spark.cuts): the same micro-batches as a cached frame's,
the same output as the embedded engine."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from tstate.spark import Backend, Source, cuts

from .flows import embedded, keyed
from .test_backend import as_tuples, rows_st, spark_settings

ROW = "k string, v long, t long"


def _local(spark: Any, rows: list[dict]) -> Any:
    """``rows`` as a local relation (Spark holds the Arrow table in the driver)."""
    table = pa.table({
        "k": pa.array([r["k"] for r in rows], pa.string()), "v": pa.array([r["v"] for r in rows], pa.int64()),
        "t": pa.array([r["t"] for r in rows], pa.int64()),
    })  # fmt: skip
    return spark.createDataFrame(table)


def test_a_local_relation_is_not_cached_and_a_large_or_remote_one_is(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    from tstate.spark.committed import Committed

    rows = [{"k": "a", "v": i, "t": i % 5} for i in range(50)]
    local, remote = _local(spark, rows), spark.createDataFrame(rows, ROW)  # (remote: parallelized)
    assert cuts.is_small_local(local) and not cuts.is_small_local(remote)
    cached, lo, got, _s = cuts.cut_run({"e": Source(local, time="t")}, Committed(), 2, 100, [])
    assert cached == {} and (lo, got) == (0, [(0, 2), (2, 4), (4, 6)])
    cached, _lo, again, _s = cuts.cut_run({"e": Source(remote, time="t")}, Committed(), 2, 100, [])
    assert list(cached) == ["e"] and again == got
    cached["e"].unpersist()
    monkeypatch.setattr(cuts, "LOCAL_UNCACHED_BYTES", 10)  # (a local relation larger than the limit)
    cached, _lo, again, _s = cuts.cut_run({"e": Source(_local(spark, rows), time="t")}, Committed(), 2, 100, [])
    assert list(cached) == ["e"] and again == got
    cached["e"].unpersist()


@spark_settings
@given(rows=rows_st, partitions=st.integers(1, 3), epochs=st.one_of(st.none(), st.integers(1, 3)))
def test_a_run_over_a_local_relation_equals_the_embedded_engine(
    spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int | None
) -> None:
    ref_out, ref_state = embedded(rows)
    flow, _ev, stats, out = keyed()
    backend = Backend(spark, checkpoint=str(tmp_path_factory.mktemp("ck")), partitions=partitions)
    backend.run(flow, {"events": Source(_local(spark, rows), time="t")}, epochs_per_batch=epochs, rows_per_batch=7)
    assert sorted(out.items, key=repr) == ref_out
    head = backend.store.head
    state = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(stats).frame.collect()} if (
        head is not None and head.operators.get("stats") and head.operators["stats"].chains
    ) else {}  # fmt: skip
    assert state == as_tuples(ref_state)


def test_the_local_session_caches_a_run_s_input_uncompressed(spark):  # type: ignore[no-untyped-def]
    """A batch run caches its timed inputs once and every micro-batch scans its epochs
    out of that cache: on tstate's local session it is built uncompressed (compressing
    it only costs the JVM CPU beside the Python tasks, tstate.spark.session) -- a column
    of one repeated string takes its full size in the cache, not a run-length code."""
    rows = 50_000
    df = spark.range(0, rows).selectExpr("id % 7 as t", "'abcdefghijklmnopqrstuvwxyz' as s").persist()
    try:
        df.count()
        found = spark._jsparkSession.sharedState().cacheManager().lookupCachedData(df._jdf)
        assert found.isDefined()
        rdd = found.get().cachedRepresentation().cacheBuilder().cachedColumnBuffers().id()
        stored = [i for i in spark.sparkContext._jsc.sc().getRDDStorageInfo() if i.id() == rdd]
        assert stored
        size = stored[0].memSize() + stored[0].diskSize()
        assert size >= rows * 26, size
    finally:
        df.unpersist()
