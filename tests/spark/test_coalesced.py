"""A batch run's input read in many more partitions than the run uses (a DataFrame Spark
made from a large Arrow table or pandas frame: one partition per Arrow batch) is
coalesced before the cut counts and caches it (``tstate.spark.cuts.coalesced``): the
run's Spark jobs run as many tasks as the run's partitions, not one per Arrow batch,
and a key's records still reach its operator in the frame's order (the embedded
engine's output and state, with an order-sensitive operator)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tstate.spark import Backend, Source, cuts

from .test_key_order import ROWS, embedded, recorder

#: Arrow batches (so partitions) of the frame made from the rows' table
BATCHES = 12


@pytest.fixture
def arrow_frames(spark: Any) -> Any:
    """Frames made from Arrow tables the way a large one is (Spark parallelizes one Arrow
    batch per partition past ``arrowLocalRelationThreshold``), here for small tables."""
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": str(len(ROWS) // BATCHES), "spark.sql.execution.arrow.localRelationThreshold": "0"}
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    yield lambda rows: spark.createDataFrame(pa.Table.from_pylist(rows))
    for k, v in old.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def _tasks_per_stage(spark: Any, run: Any) -> list[int]:
    """The task counts of the stages of the Spark jobs ``run()`` ran."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    run()
    tasks = []
    for j in sorted(set(tracker.getJobIdsForGroup(None)) - before):
        info = tracker.getJobInfo(j)
        for s in info.stageIds if info is not None else ():
            st = tracker.getStageInfo(s)
            if st is not None:
                tasks.append(st.numTasks)
    return tasks


def test_a_frame_of_many_arrow_batches_is_coalesced_in_order(spark: Any, arrow_frames: Any) -> None:
    df = arrow_frames(ROWS)
    assert df.rdd.getNumPartitions() == BATCHES
    got = cuts.coalesced(spark, {"e": Source(df, time="t")}, 2)["e"].df
    want = max(2, spark.sparkContext.defaultParallelism)
    assert got.rdd.getNumPartitions() == want
    assert [r["v"] for r in got.collect()] == [r["v"] for r in ROWS]  # (consecutive partitions, in order)
    few = arrow_frames(ROWS[: len(ROWS) * want // BATCHES])  # (no more than MANY x the run's partitions)
    assert cuts.coalesced(spark, {"e": Source(few, time="t")}, 2)["e"].df is few


def test_a_cached_frame_is_read_as_it_is(spark: Any, arrow_frames: Any) -> None:
    df = arrow_frames(ROWS).persist()
    try:
        assert cuts.coalesced(spark, {"e": Source(df, time="t")}, 2)["e"].df is df
    finally:
        df.unpersist()


@pytest.mark.parametrize("mapped", [False, True])
def test_a_run_over_many_arrow_batches_runs_few_tasks_and_equals_the_embedded_engine(
    spark: Any, arrow_frames: Any, tmp_path: Any, mapped: bool
) -> None:
    ref_out, ref_state = embedded(mapped)
    flow, _ev, seq, out = recorder(mapped)
    backend = Backend(spark, checkpoint=str(tmp_path), partitions=2, local_loops=0)
    df = arrow_frames(ROWS)
    tasks = _tasks_per_stage(spark, lambda: backend.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=2))
    assert tasks and max(tasks) < BATCHES, tasks  # (uncoalesced: the cut's scan and every input stage ran 12)
    assert sorted(out.items) == ref_out
    assert {r["key"]: list(r["vs"]) for r in backend.state(seq).frame.collect()} == ref_state
