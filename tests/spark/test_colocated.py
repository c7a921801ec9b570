"""Column keys on Spark: the colocated path (one Python stage per keyed hop) computes
exactly what the embedded engine computes, with the same bins, so checkpoints move
between the engines."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import SparkError
from tstate.spark import Backend, Source
from tstate.spark.colocated import colocated_boundaries, dest_column
from tstate.spark.plan import Plan

from .flows import keyed

ROW = "k string, v long, t long"
COL = ts.col("k")

rows_st = st.lists(
    st.fixed_dictionaries({"k": st.sampled_from("abcdefgh"), "v": st.integers(-2, 9), "t": st.integers(0, 4)}),
    max_size=40,
)
spark_settings = settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def embedded(rows: list[dict], workers: int = 2, fold: bool = False) -> tuple[list, dict]:
    flow, ev, stats, out = keyed(fold=fold, key=COL)
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=workers)
    return sorted(out.items, key=repr), {k: (v.n, v.total, list(v.seen)) for k, v in flow.state(stats, format="dict").items()}


def spark_state(backend: Backend, stats: Any) -> dict:
    head = backend.store.head
    if not head.operators.get("stats") or not head.operators["stats"].chains:
        return {}
    return {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(stats).frame.collect()}


def run_spark(spark: Any, rows: list[dict], ck: str, partitions: int, epochs: int = 1, **kw: Any) -> tuple:
    flow, _ev, stats, out = keyed(fold=kw.get("fold", False), key=COL)
    backend = Backend(spark, checkpoint=ck, partitions=partitions)
    df = spark.createDataFrame(rows, ROW)
    backend.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=epochs, reconfigure=kw.get("reconfigure", ()))
    return sorted(out.items, key=repr), spark_state(backend, stats), backend


def test_the_input_and_its_column_keyed_operator_are_one_stage() -> None:
    flow, *_ = keyed(key=COL)
    plan = Plan.of(flow)
    (b,) = colocated_boundaries(plan, "events") or [None]
    assert plan.nodes[b].name == "stats"
    lam, *_ = keyed()
    assert colocated_boundaries(Plan.of(lam), "events") is None  # a key function: the general path


@spark_settings
@given(rows=rows_st, partitions=st.integers(1, 3), epochs=st.integers(1, 2), fold=st.booleans())
def test_same_output_and_state_as_embedded(
    spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int, fold: bool
) -> None:
    ref_out, ref_state = embedded(rows, fold=fold)
    out, state, backend = run_spark(spark, rows, str(tmp_path_factory.mktemp("ck")), partitions, epochs, fold=fold)
    assert out == ref_out
    assert state == ref_state
    assert sum(b.records for b in backend.metrics.batches) >= len([r for r in rows if r["v"] >= 0])


def test_dest_column_is_the_bin_both_engines_compute(spark: Any) -> None:
    """Spark's expression puts every key on the partition owning its bin by column_hash."""
    from tstate.keys import KeyRouter, hasher_of

    keys = [f"key{i}" for i in range(300)] + ["", "ü", "a`b"]
    owners = [b % 3 for b in range(64)]
    labels = (101, 102, 103)
    df = spark.createDataFrame([(k, i) for i, k in enumerate(keys)], "k string, i bigint")
    got = dict(df.selectExpr("k", f"{dest_column(COL, dict(df.dtypes), 64, owners, labels)} as d").collect())
    router = KeyRouter(64, hasher=hasher_of(COL))
    assert got == {k: labels[owners[router.bin(k)]] for k in keys}
    pair = ts.col("k", "i")
    got2 = dict(df.selectExpr("k", f"{dest_column(pair, dict(df.dtypes), 16, owners[:16], labels)} as d").collect())
    router2 = KeyRouter(16, hasher=hasher_of(pair))
    assert got2 == {k: labels[owners[:16][router2.bin((k, i))]] for i, k in enumerate(keys)}


def test_rescale_in_the_middle(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    rows = [{"k": f"k{i % 23}", "v": i % 7, "t": i // 25} for i in range(250)]
    ref_out, ref_state = embedded(rows)
    from tstate.spark import stages  # (where a batch's input stages call input_task)

    general: list[str] = []
    real = stages.input_task
    monkeypatch.setattr(stages, "input_task", lambda plan, info, name, *a: general.append(name) or real(plan, info, name, *a))
    out, state, backend = run_spark(spark, rows, str(tmp_path / "ck"), 2, reconfigure=[(3, ts.Rescale(3))])
    assert (out, state) == (ref_out, ref_state)
    assert sum(b.moved_bins for b in backend.metrics.batches) > 0
    assert backend.metrics.batches[-1].partitions == 3
    assert general == []  # every batch took the colocated path


def test_checkpoints_move_between_the_engines(spark: Any, tmp_path: Any) -> None:
    """Embedded epochs 0-2 -> Spark (colocated) epochs 3-5 -> embedded epochs 6-8: the
    same bins on both engines, so each resumes from the other's checkpoint exactly."""
    from pyspark.sql import functions as F

    rows = [{"k": f"k{i % 13}", "v": i % 5, "t": i // 12} for i in range(108)]
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    flow1, ev1, _s1, out1 = keyed(key=COL)
    for t in range(3):
        ev1.send([r for r in rows if r["t"] == t], time=t)
    ev1.advance_to(3)
    ex = flow1.start(workers=2, checkpoint=ts.Checkpoints(d, every_epochs=3))
    ex.step_while(lambda: not ex.coordinator.committed)
    ex.coordinator.finish()
    assert ex.coordinator.committed == [3]
    flow2, _ev2, _s2, out2 = keyed(key=COL)
    b = Backend(spark, checkpoint=d, partitions=2)
    df = spark.createDataFrame(rows, ROW)
    src = {"events": Source(df, time="t")}
    b._prepare(flow2, src)
    for t in range(3, 6):
        b._batch({"events": df.where(F.col("t") == t)}, src, t - 3, t, t + 1, None)
    assert b.store.latest().time == 6
    flow3, ev3, s3, out3 = keyed(key=COL)
    ex3 = flow3.start(workers=3, checkpoint=ts.Checkpoints(d, every_epochs=100))
    assert ex3.restored is not None and ex3.restored.time == 6
    for t in range(6, 9):
        ev3.send([r for r in rows if r["t"] == t], time=t)
    ev3.close()
    ex3.run()
    got = sorted([(t, r) for t, r in out1.items if t < 3] + out2.items + out3.items, key=repr)
    assert got == ref_out
    assert {k: (v.n, v.total, list(v.seen)) for k, v in flow3.state(s3, format="dict").items()} == ref_state


def test_driver_crash_and_resume(spark: Any, tmp_path: Any) -> None:
    """The driver dies after batch 1 (a new backend resumes on other partitions)."""
    from pyspark.sql import functions as F

    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 10} for i in range(80)]
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    df = spark.createDataFrame(rows, ROW)
    flow, _ev, _stats, out1 = keyed(key=COL)
    b1 = Backend(spark, checkpoint=d, partitions=2)
    b1._prepare(flow, {"events": Source(df, time="t")})
    for lo in range(4):
        b1._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    flow2, _ev2, stats2, out2 = keyed(key=COL)
    b2 = Backend(spark, checkpoint=d, partitions=3)
    b2.run(flow2, {"events": Source(df, time="t")})
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert spark_state(b2, stats2) == ref_state


def test_a_key_field_the_chain_changes_is_refused(spark: Any, tmp_path: Any) -> None:
    flow = ts.Dataflow("changed")
    ev = flow.input("events")
    upper = ev.map(lambda r: {**r, "k": r["k"] + "!"})

    @flow.stateful(upper, key=ts.col("k"), state=int, bins=16)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        return n + 1

    df = spark.createDataFrame([{"k": f"k{i}", "v": i, "t": 0} for i in range(40)], ROW)
    b = Backend(spark, checkpoint=str(tmp_path), partitions=2)
    with pytest.raises(Exception, match=r"operator 'count': record .* has key 'k\d+!'.*not the value of the input's column"):
        b.run(flow, {"events": Source(df, time="t")})
    assert b.store.latest() is None
    assert SparkError  # (the task's SparkError reaches the driver inside Spark's error)


def test_streaming_query_and_restart(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """A StreamingQuery takes the colocated path too; a restart on other partitions,
    with Spark replaying a committed batch, is exactly-once."""
    import os

    from tstate.spark import stages  # (where a batch's input stages call input_task)

    general: list[str] = []
    real = stages.input_task
    monkeypatch.setattr(stages, "input_task", lambda plan, info, name, *a: general.append(name) or real(plan, info, name, *a))

    from .test_streaming import FILES, reference, stream, write_files

    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    write_files(src, FILES[:3])
    flow, _ev, _stats, out1 = keyed(key=COL)
    q = Backend(spark, checkpoint=ck, partitions=2).start(flow, {"events": stream(spark, src)}, trigger={"availableNow": True})
    q.wait()
    write_files(src, FILES[3:], start=3)
    for name in ("2", ".2.crc"):
        os.remove(os.path.join(ck, "spark-query", "commits", name))
    flow2, _ev2, _stats2, out2 = keyed(key=COL)
    backend2 = Backend(spark, checkpoint=ck, partitions=3)
    q2 = backend2.start(flow2, {"events": stream(spark, src)}, trigger={"availableNow": True})
    q2.wait()
    assert backend2.metrics.skipped == [2]
    assert sorted(out1.items + out2.items, key=repr) == reference(FILES)
    assert general == []


def test_local_cluster_executor_killed_and_driver_restarted(tmp_path: Any) -> None:
    """Two executor processes: an executor dies in batch 2, the state moves to 3
    partitions at batch 3, the driver dies in batch 5; the
    restart finishes with the output of an uninterrupted run (key-independent: the
    same as the key-function flow's)."""
    from .test_faults import read_output, reference, run_job

    ref = reference(tmp_path)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    master = "local-cluster[2,1,1024]"
    first = run_job(master, ck, out, "--kill-executor-at", "2", "--rescale-at", "3", "--die-at", "5", "--column-key")
    assert first.returncode == -9, first.stderr[-3000:]
    second = run_job(master, ck, out, "--column-key")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done [5, 6, 7]" in second.stdout  # (7 also closes the inputs)
    assert read_output(out) == ref
