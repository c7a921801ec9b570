"""The Spark backend computes exactly what the embedded engine computes."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import SparkError
from tstate.spark import Backend, Source

from .flows import embedded, keyed

ROW = "k string, v long, t long"

rows_st = st.lists(
    st.fixed_dictionaries(
        {"k": st.sampled_from("abcdefg"), "v": st.integers(-2, 9), "t": st.integers(0, 4)}
    ),
    max_size=40,
)
spark_settings = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def run_spark(spark: Any, rows: list[dict], tmp: str, partitions: int, epochs: int = 1, **kw: Any) -> tuple:
    flow, _ev, stats, out = keyed(**{k: v for k, v in kw.items() if k in ("fold", "timers")})
    backend = Backend(spark, checkpoint=tmp, partitions=partitions)
    df = spark.createDataFrame(rows, ROW) if rows else spark.createDataFrame([], ROW)
    backend.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=epochs, reconfigure=kw.get("reconfigure", ()))
    state = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(stats).frame.collect()} if backend.store.head.operators.get("stats") and backend.store.head.operators["stats"].chains else {}
    return sorted(out.items, key=repr), state, backend


def as_tuples(state: dict) -> dict:
    return {k: (v.n, v.total, list(v.seen)) for k, v in state.items()}


@spark_settings
@given(rows=rows_st, partitions=st.integers(1, 4), epochs=st.integers(1, 3), fold=st.booleans())
def test_same_output_and_state_as_embedded(spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int, fold: bool) -> None:
    ref_out, ref_state = embedded(rows, fold=fold)
    out, state, backend = run_spark(spark, rows, str(tmp_path_factory.mktemp("ck")), partitions, epochs, fold=fold)
    assert out == ref_out
    assert state == as_tuples(ref_state)
    assert sum(b.records for b in backend.metrics.batches) >= len([r for r in rows if r["v"] >= 0])


def test_rescale_live_fluid_and_all_at_once(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": f"k{i % 23}", "v": i % 7, "t": i // 25} for i in range(250)]
    ref_out, ref_state = embedded(rows)
    for strategy in ("fluid", "all-at-once"):
        out, state, backend = run_spark(
            spark, rows, str(tmp_path / strategy), 2, reconfigure=[(3, ts.Rescale(4, strategy=strategy))]
        )
        assert out == ref_out
        assert state == as_tuples(ref_state)
        moved = [b.moved_bins for b in backend.metrics.batches]
        assert sum(moved) > 0
        if strategy == "fluid":
            assert sum(1 for m in moved if m) > 1  # spread over several batches
        else:
            assert sum(1 for m in moved if m) == 1
        assert backend.metrics.batches[-1].partitions == 4
        assert 0 < backend.metrics.cache_hit_rate <= 1


def test_restart_with_other_parallelism_resumes_exactly(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 10} for i in range(80)]
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    # first run: epochs 0..3 only, then the "driver dies" (a new backend resumes)
    first = [r for r in rows if r["t"] < 4]
    flow, _ev, stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=d, partitions=2)
    b1._prepare(flow, {"events": Source(spark.createDataFrame(first, ROW), time="t")})
    from pyspark.sql import functions as F

    df_all = spark.createDataFrame(rows, ROW)
    for lo in range(4):
        b1._batch({"events": df_all.where(F.col("t") == lo)}, {"events": Source(df_all, time="t")}, lo, lo, lo + 1, None)
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, checkpoint=d, partitions=3)
    b2.run(flow2, {"events": Source(df_all, time="t")})
    assert b2.metrics.batches[0].batch == 4 and b2.metrics.batches[0].partitions == 3
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b2.state(stats2).frame.collect()}
    assert got == as_tuples(ref_state)


def test_flow_run_with_backend_and_sources(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": "a", "v": 1, "t": 0}, {"k": "b", "v": 2, "t": 1}]
    ref_out, _ = embedded(rows)
    flow, _ev, _stats, out = keyed()
    flow.run(Backend(spark, checkpoint=str(tmp_path), partitions=2, sources={"events": Source(spark.createDataFrame(rows, ROW), time="t")}))
    assert sorted(out.items, key=repr) == ref_out


# -- bad input -------------------------------------------------------------------------

def test_schema_mismatch_is_reported_before_the_first_batch(spark: Any, tmp_path: Any) -> None:
    flow, *_ = keyed()
    df = spark.createDataFrame([("a", "x", 0)], "k string, v string, t long")
    b = Backend(spark, checkpoint=str(tmp_path), partitions=2)
    with pytest.raises(SparkError, match=r"input 'events': column 'v' is string, the dataflow expects bigint"):
        b.run(flow, {"events": Source(df, time="t", columns={"k": "string", "v": "bigint"})})
    with pytest.raises(SparkError, match=r"no column 'w'"):
        b.run(flow, {"events": Source(df, time="t", columns={"w": "string"})})
    with pytest.raises(SparkError, match=r"time column 'k' is string"):
        b.run(flow, {"events": Source(df, time="k")})
    with pytest.raises(SparkError, match=r"input 'events' of dataflow 'keyed' has no DataFrame"):
        b.run(flow, {})
    assert b.store.latest() is None  # nothing ran, nothing committed


def test_unsupported_operator_is_named(spark: Any, tmp_path: Any) -> None:
    flow = ts.Dataflow("f")
    inp = flow.input("events")

    inp.probe(name="watch")

    with pytest.raises(SparkError, match=r"operator 'watch' \(probe\) cannot run on the Spark backend"):
        Backend(spark, checkpoint=str(tmp_path)).run(flow, {"events": spark.createDataFrame([(1,)], "x long")})


def test_user_error_names_operator_and_record_and_commits_nothing(spark: Any, tmp_path: Any) -> None:
    flow = ts.Dataflow("boom")
    inp = flow.input("events")

    @flow.stateful(inp, key=lambda r: r["k"], state=int)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        if r["k"] == "bad":
            raise ValueError("no bad keys")
        return n + 1

    b = Backend(spark, checkpoint=str(tmp_path), partitions=2)
    df = spark.createDataFrame([("ok", 0), ("bad", 1)], "k string, t long")
    with pytest.raises(Exception, match=r"operator 'count' .*ValueError: no bad keys"):
        b.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=1)
    m = b.store.latest()
    assert m is not None and m.meta["spark"]["frontier"] == 1  # epoch 0 committed, epoch 1 not
    assert len([f for f in os.listdir(tmp_path / "manifests")]) == 1


def test_unencodable_record_crossing_an_exchange(spark: Any, tmp_path: Any) -> None:
    class Opaque:
        pass

    flow = ts.Dataflow("opaque")
    inp = flow.input("events")
    moved = inp.map(lambda r: Opaque()).exchange(lambda r: 1)
    moved.collect()
    with pytest.raises(Exception, match=r"cannot cross a Spark exchange"):
        Backend(spark, checkpoint=str(tmp_path), partitions=1).run(flow, {"events": spark.createDataFrame([(1,)], "x long")})


def test_embedded_engine_resumes_from_a_spark_checkpoint(spark: Any, tmp_path: Any) -> None:
    """The Spark backend's state store is the embedded engine's checkpoint format: an
    embedded run resumes from the state Spark committed and finishes the job."""
    rows = [{"k": f"k{i % 9}", "v": i % 4, "t": i // 12} for i in range(72)]  # epochs 0..5
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    first = [r for r in rows if r["t"] < 3]
    flow, _ev, _stats, out1 = keyed()
    backend = Backend(spark, checkpoint=d, partitions=2)
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, ROW)
    backend._prepare(flow, {"events": Source(df, time="t")})
    for lo in range(3):
        backend._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    assert backend.store.latest().time == 3 and first
    flow2, ev2, stats2, out2 = keyed()
    ex = flow2.start(workers=3, checkpoint=ts.Checkpoints(d, every_epochs=100))
    assert ex.restored is not None and ex.restored.time == 3
    for t in range(3, 6):
        ev2.send([r for r in rows if r["t"] == t], time=t)
    ev2.close()
    ex.run()
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert as_tuples(flow2.state(stats2, format="dict")) == as_tuples(ref_state)


def test_spark_resumes_from_an_embedded_checkpoint(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": f"k{i % 9}", "v": i % 4, "t": i // 12} for i in range(72)]  # epochs 0..5
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    flow, ev, _stats, out1 = keyed()
    for t in range(3):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.advance_to(3)
    ex = flow.start(workers=2, checkpoint=ts.Checkpoints(d, every_epochs=3))
    ex.step_while(lambda: not ex.coordinator.committed)
    ex.coordinator.finish()
    assert ex.coordinator.committed == [3]
    flow2, _ev2, stats2, out2 = keyed()
    backend = Backend(spark, checkpoint=d, partitions=3)
    backend.run(flow2, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=1)
    assert backend.metrics.batches[0].frontier == 4  # resumed at epoch 3
    got = sorted([(t, r) for t, r in out1.items if t < 3] + out2.items, key=repr)
    assert got == ref_out
    state = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(stats2).frame.collect()}
    assert state == as_tuples(ref_state)


def _two_level_flow() -> tuple[ts.Dataflow, ts.InputStream, ts.Collected, ts.Collected]:
    """Two keyed operators on the same input (one stage on Spark) and a third after one
    of them (the next stage)."""
    flow = ts.Dataflow("levels")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=int)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], n + 1))
        return n + 1

    @flow.stateful(ev, key=lambda r: r["v"], state=int)
    def by_value(total: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["v"], total + r["v"]))
        return total + r["v"]

    @flow.stateful(count, key=lambda kv: kv[1] % 3, state=int)
    def level2(m: int, kv: tuple, ctx: ts.Context) -> int:
        ctx.emit((kv[1] % 3, m + 1))
        return m + 1

    return flow, ev, by_value.collect(), level2.collect()


@spark_settings
@given(rows=rows_st, partitions=st.integers(1, 3), epochs=st.one_of(st.none(), st.integers(1, 2)))
def test_boundaries_ready_together_share_a_stage(
    spark: Any, tmp_path_factory: Any, rows: list, partitions: int, epochs: int | None
) -> None:
    flow, ev, a, b = _two_level_flow()
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    ref = (sorted(a.items, key=repr), sorted(b.items, key=repr))

    flow, _ev, a, b = _two_level_flow()
    backend = Backend(spark, checkpoint=str(tmp_path_factory.mktemp("ck")), partitions=partitions)
    df = spark.createDataFrame(rows, ROW) if rows else spark.createDataFrame([], ROW)
    backend.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=epochs, rows_per_batch=7)
    assert (sorted(a.items, key=repr), sorted(b.items, key=repr)) == ref
    # count and by_value in one stage, level2 in the next: two per batch, not three
    assert {m.stages for m in backend.metrics.batches} == {2}


def test_state_start_and_rescale_give_the_embedded_engines_types(spark: Any, tmp_path: Any) -> None:
    """One contract: ``state`` is a StateView with the embedded engine's columns and
    rows, ``rescale`` a Rescaled, on both engines (``start``: tests/spark/test_streaming.py)."""
    from tstate.backend import Rescaled, StateView

    rows = [{"k": f"k{i % 5}", "v": i % 4, "t": i // 6} for i in range(24)]
    flow, ev, stats, _out = keyed()
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    engine = ts.Embedded(2, max_workers=3)
    flow.run(engine)
    flow2, _ev2, stats2, _out2 = keyed()
    backend = Backend(spark, checkpoint=str(tmp_path), partitions=2)
    backend.run(flow2, {"events": Source(spark.createDataFrame(rows, ROW), time="t")})
    want, got = engine.state(stats), backend.state(stats2)
    assert isinstance(want, StateView) and isinstance(got, StateView)
    assert got.operator == want.operator == "stats"
    assert got.column_names == want.column_names == ["key", "n", "total", "seen"]
    n = want.num_rows
    assert n > 0 and got.num_rows == n
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)
    assert got.to_arrow().num_rows == n and len(got.to_pandas()) == n
    with pytest.warns(DeprecationWarning, match="frame"):  # the former result, a DataFrame, still reads
        assert got.count() == n
    r = backend.rescale(3, "all-at-once")
    assert isinstance(r, Rescaled) and (r.workers, r.strategy, r.steps) == (3, "all-at-once", 1)
    assert r.schedule == {"stats": (0,), "per_parity": (0,)}  # (the embedded engine names the same operators)
    r2 = engine.rescale(3, "all-at-once")  # (the run is over: nothing left to move at a later time)
    assert isinstance(r2, Rescaled) and type(r2) is type(r)
