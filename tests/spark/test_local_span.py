"""A batch run over a small local relation (a frame the driver made from pandas or Arrow
data) counts its epochs without a Spark job and does not cache it (tstate.spark.cuts):
the same slices as Spark computes for any other frame, the same output as the embedded
engine."""

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


def _jobs(spark: Any) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@spark_settings
@given(
    times=st.lists(st.one_of(st.none(), st.integers(-3, 40)), min_size=1, max_size=60),
    rows=st.one_of(st.none(), st.integers(1, 40)),
    lo=st.one_of(st.none(), st.integers(-2, 30)),
)
def test_a_local_relation_is_sliced_as_spark_slices_any_frame(
    spark: Any, times: list[int | None], rows: int | None, lo: int | None
) -> None:
    data = [{"k": "a", "v": i, "t": t} for i, t in enumerate(times)]
    local = _local(spark, data)
    remote = spark.createDataFrame([(r["k"], r["v"], r["t"]) for r in data], ROW)  # (parallelized: not local)
    assert cuts.is_small_local(local) and not cuts.is_small_local(remote)
    before = _jobs(spark)
    got = cuts.span([(local, "t")], lo, rows)
    assert _jobs(spark) == before  # counted on the driver
    assert got == cuts.span([(remote, "t")], lo, rows)
    # the plain model: epochs at or after lo, sliced by the rows before them
    kept = sorted(t for t in times if t is not None and (lo is None or t >= lo))
    assert (got.first, got.top) == ((kept[0], kept[-1]) if kept else (None, None))
    if rows is not None and kept:
        counts = {t: kept.count(t) for t in kept}
        assert sum(got.loads.values()) == len(kept)
        assert cuts.slices(counts, max(1, rows // cuts.GRAIN)) == got.loads


def test_a_local_relation_is_not_cached_and_a_large_or_remote_one_is(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    from tstate.spark.committed import Committed

    rows = [{"k": "a", "v": i, "t": i % 5} for i in range(50)]
    local, remote = _local(spark, rows), spark.createDataFrame(rows, ROW)
    cached, lo, got, _s = cuts.cut_run({"e": Source(local, time="t")}, Committed(), 2, 100, [])
    assert cached == {} and (lo, got) == (0, [(0, 2), (2, 4), (4, 6)])
    cached, _lo, again, _s = cuts.cut_run({"e": Source(remote, time="t")}, Committed(), 2, 100, [])
    assert list(cached) == ["e"] and again == got
    cached["e"].unpersist()
    monkeypatch.setattr(cuts, "LOCAL_SPAN_BYTES", 10)  # (a local relation larger than the limit)
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
        head.operators.get("stats") and head.operators["stats"].chains
    ) else {}  # fmt: skip
    assert state == as_tuples(ref_state)
