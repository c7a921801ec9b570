"""The Spark backend with ``state=ts.RocksDB(...)`` (tstate.spark.rocks_bins) computes
what the embedded engine computes with heap state: the same output and the same state,
through a rescale and a driver restart; its bins' files in the store are SST exports."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

import tstate as ts
from tstate.errors import ConfigurationError
from tstate.spark import Backend, Source

from .flows import embedded, keyed
from .test_backend import ROW, as_tuples

pytest.importorskip("rocksdict", reason="the RocksDB state needs the rocksdb extra")


def rows_of(n: int, keys: int = 13, per_time: int = 20) -> list[dict]:
    return [{"k": f"k{i % keys}", "v": (i * 7) % 9, "t": i // per_time} for i in range(n)]


def state_of(backend: Backend, op: Any) -> dict:
    return {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(op).frame.collect()}


def kinds(backend: Backend) -> set[str]:
    head = backend.store.head
    return {r.kind for e in head.operators.values() for c in e.chains.values() for r in c}


@pytest.mark.parametrize("fold", [False, True])
def test_keyed_flow_on_rocksdb_equals_embedded_heap(spark: Any, tmp_path: Any, fold: bool) -> None:
    rows = rows_of(120)
    ref_out, ref_state = embedded(rows, fold=fold)
    flow, _ev, stats, out = keyed(fold=fold)
    backend = Backend(spark, str(tmp_path / "ck"), partitions=2, state=ts.RocksDB(str(tmp_path / "db"), cache_bytes=1 << 20))
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=2)
    assert sorted(out.items, key=repr) == ref_out
    assert state_of(backend, stats) == as_tuples(ref_state)
    assert "sst" in kinds(backend) <= {"sst", "sstd"}  # every bin's file an SST export (or the changes since)
    # the files are checked as any bin file: the store's own verification passes
    from tstate.__main__ import main

    assert main(["checkpoints", str(tmp_path / "ck"), "--verify"]) == 0
    # the executors' databases live under the setting's path, one directory per process
    assert any(n.startswith("spark-") for n in os.listdir(tmp_path / "db"))



@pytest.mark.parametrize("fold", [False, True])
def test_small_batches_in_one_task_on_rocksdb_equal_embedded_heap(spark: Any, tmp_path: Any, monkeypatch: Any, fold: bool) -> None:
    """A small batch runs in one task (tstate/spark/local_batch.py) on the executor's
    database too: the same output, state and SST files as the staged path (the suite's
    fixture turns the one-task path off; the cluster fault job found it took heap bins)."""
    from tstate.spark import local_batch

    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", 4 << 20)
    rows = rows_of(120)
    ref_out, ref_state = embedded(rows, fold=fold)
    flow, _ev, stats, out = keyed(fold=fold)
    backend = Backend(spark, str(tmp_path / "ck"), partitions=2, state=ts.RocksDB(str(tmp_path / "db"), cache_bytes=1 << 20))
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=2)
    assert all(b.stages == 1 for b in backend.metrics.batches)  # (one task: one stage per batch)
    assert sorted(out.items, key=repr) == ref_out
    assert state_of(backend, stats) == as_tuples(ref_state)
    assert "sst" in kinds(backend) <= {"sst", "sstd"}

def nested() -> tuple[ts.Dataflow, Any, Any, Any]:
    """Nested state: per key a map of lists, a timer, ``ctx.clear`` when a list grows long."""
    flow = ts.Dataflow("nested")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=dict[str, list[int]], bins=8)
    def grow(s: dict, r: dict, ctx: ts.Context) -> None:
        s.setdefault(f"m{r['v'] % 3}", []).append(r["v"])
        ctx.notify_at(ctx.time + 1)

    @grow.on_notify
    def fire(s: dict, t: int, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, t, sorted((k, sum(v), len(v)) for k, v in s.items())))
        if sum(len(v) for v in s.values()) > 6:
            ctx.clear()

    return flow, ev, grow, grow.collect()


def test_nested_state_on_rocksdb_equals_embedded_heap(spark: Any, tmp_path: Any) -> None:
    rows = rows_of(90, keys=7, per_time=9)
    flow, ev, grow, out = nested()
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(2)
    ref_out, ref_state = sorted(out.items, key=repr), flow.state(grow, format="dict")
    flow2, _ev2, grow2, out2 = nested()
    backend = Backend(spark, str(tmp_path / "ck"), partitions=2, state=ts.RocksDB(str(tmp_path / "db")))
    backend.run(flow2, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=3)
    assert sorted(out2.items, key=repr) == ref_out
    got = backend.state(grow2).to_arrow().to_pylist()
    heap = Backend(spark, str(tmp_path / "heap"), partitions=2)
    flow3, _ev3, grow3, _out3 = nested()
    heap.run(flow3, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=3)
    assert sorted(got, key=repr) == sorted(heap.state(grow3).to_arrow().to_pylist(), key=repr)
    assert {r["key"] for r in got} == set(ref_state)


def test_rescale_moves_bins_to_new_owners_that_ingest_them(spark: Any, tmp_path: Any) -> None:
    rows = rows_of(200, keys=23, per_time=25)
    ref_out, ref_state = embedded(rows)
    flow, _ev, stats, out = keyed()
    backend = Backend(spark, str(tmp_path / "ck"), partitions=2, state=ts.RocksDB(str(tmp_path / "db")))
    backend.run(
        flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")},
        epochs_per_batch=1, reconfigure=[(3, ts.Rescale(3, strategy="all-at-once"))],
    )
    assert sorted(out.items, key=repr) == ref_out
    assert state_of(backend, stats) == as_tuples(ref_state)
    moved = [b for b in backend.metrics.batches if b.moved_bins]
    # each moved bin with state is read from the store (its SST file) by its new owner
    assert moved and moved[0].handover_bytes > 0 and moved[0].cache_misses > 0
    assert 0 < backend.metrics.cache_hit_rate <= 1  # the bins that stayed come from the executors' databases
    assert backend.metrics.batches[-1].partitions == 3


def test_driver_restart_resumes_from_the_committed_manifest(spark: Any, tmp_path: Any) -> None:
    rows = rows_of(100, keys=11, per_time=10)
    ref_out, ref_state = embedded(rows)
    d, db = str(tmp_path / "ck"), ts.RocksDB(str(tmp_path / "db"))
    b1, df_all, out1 = _spark_rocksdb_batches(spark, rows, d, db, 4)  # epochs 0..3, then the driver "dies"
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, d, partitions=3, state=db)
    b2.run(flow2, {"events": Source(df_all, time="t")})
    assert b2.metrics.batches[0].batch == 4
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert state_of(b2, stats2) == as_tuples(ref_state)




def test_heap_run_resumes_from_a_rocksdb_runs_checkpoint(spark: Any, tmp_path: Any) -> None:
    rows = rows_of(80, keys=9, per_time=10)
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    b1, df_all, out1 = _spark_rocksdb_batches(spark, rows, d, str(tmp_path / "db"), 3)
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, d, partitions=2)  # heap state: the SST files decoded
    b2.run(flow2, {"events": Source(df_all, time="t")})
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert state_of(b2, stats2) == as_tuples(ref_state)


def _resume_embedded(
    rows: list[dict], d: str, lo: int, hi: int, state: Any, restore: str, close: bool, **kw: Any
) -> tuple[list, dict, Any]:
    """The keyed flow resumed on the embedded engine (3 workers) from the newest
    checkpoint in ``d``, fed epochs ``lo`` (the checkpoint's time) .. ``hi - 1``:
    closed and run to the end (``close``), or stopped once a checkpoint at ``hi``
    committed.  Its output before ``hi`` (as (time, record)), its state, what it restored
    (``kw``: the flow's, :func:`~tests.spark.flows.keyed`)."""
    flow, ev, stats, out = keyed(**kw)
    kw = {} if state is None else {"state": state}
    ex = flow.start(workers=3, checkpoint=ts.Checkpoints(d, every_epochs=1, restore=restore, mode="sync"), **kw)
    assert ex.restored is not None and ex.restored.time == lo
    for t in range(lo, hi):
        ev.send([r for r in rows if r["t"] == t], time=t)
    if close:
        ev.close()
        ex.run()
    else:
        ev.advance_to(hi)
        deadline = time.monotonic() + 60
        ex.step_while(lambda: hi not in ex.coordinator.committed and time.monotonic() < deadline)
        assert hi in ex.coordinator.committed
        ex.coordinator.finish()
    return [(t, r) for t, r in out.items if close or t < hi], flow.state(stats, format="dict"), ex.restored


@pytest.mark.parametrize("state,restore", [("heap", "lazy"), ("heap", "eager"), ("rocksdb", "lazy"), ("rocksdb", "eager")])
def test_embedded_engine_resumes_from_a_spark_rocksdb_checkpoint(
    spark: Any, tmp_path: Any, monkeypatch: Any, state: str, restore: str
) -> None:
    """Issue 28: a Spark run with RocksDB state stopped after 3 of 6 epochs (its bins
    SST exports) resumes on the embedded engine -- heap state (the exports decoded), or
    RocksDB state (ingested, nothing decoded), which then checkpoints and resumes once
    more from its own checkpoint -- with the output and state of an uninterrupted run."""
    from tstate.checkpoint import chain_reader

    rows = [{"k": f"k{i % 9}", "v": i % 4, "t": i // 12} for i in range(72)]  # epochs 0..5
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    b1, df, out1 = _spark_rocksdb_batches(spark, rows, d, str(tmp_path / "spark-db"), 3)
    assert b1.store.latest().time == 3 and kinds(b1) == {"sst", "sstd"}
    if state == "heap":
        out2, got, restored = _resume_embedded(rows, d, 3, 6, None, restore, close=True)
        assert restored.lazy == 0  # (SST exports are decoded at once with heap state)
    else:
        def no_decoding(*a: Any) -> Any:
            raise AssertionError("an SST export was decoded: a RocksDB run ingests it")

        monkeypatch.setattr(chain_reader, "_scratch", no_decoding)  # (where an SST export is decoded)
        db = ts.RocksDB(str(tmp_path / "db"))
        part, _mid, _r = _resume_embedded(rows, d, 3, 5, db, restore, close=False)
        # its checkpoint at 5 holds the bins in its databases' files (and still lists
        # the SST chains it resumed from): the files are restored, not the old chains
        tail, got, restored = _resume_embedded(rows, d, 5, 6, ts.RocksDB(str(tmp_path / "db2")), restore, close=True)
        out2 = part + tail
    assert sorted(out1.items + out2, key=repr) == ref_out
    assert as_tuples(got) == as_tuples(ref_state)


def _spark_rocksdb_batches(spark: Any, rows: list[dict], d: str, db: Any, epochs: int, timers: bool = True,
                           **kw: Any) -> tuple[Backend, Any, Any]:
    """The keyed flow (``timers``: with its later timers) on Spark with RocksDB state
    ``db`` (a path or a ``ts.RocksDB``), checkpointing to ``d``, one batch per epoch for
    the first ``epochs`` epochs of ``rows`` (then the driver stops); the backend, the
    rows' frame and the flow's output sink."""
    from pyspark.sql import functions as F

    flow, _ev, _stats, out = keyed(timers=timers)
    backend = Backend(spark, d, partitions=2, state=db if isinstance(db, ts.RocksDB) else ts.RocksDB(db), **kw)
    df = spark.createDataFrame(rows, ROW)
    backend._prepare(flow, {"events": Source(df, time="t")})
    for lo in range(epochs):
        backend._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    return backend, df, out


def test_a_batch_writes_the_keys_it_changed_as_a_delta_sst_file(spark: Any, tmp_path: Any) -> None:
    """Once a bin has an SST export, a batch writes the records of the keys it changed
    (kind ``"sstd"``, chain ``[sst, sstd, ...]``), not the whole bin again: after a first
    batch of 16000 keys, batches touching 3 keys each write a small share of the bytes
    the whole exports take (compact_after=1: every file whole); the embedded engine
    (heap and RocksDB state) and Spark resume from those chains with the uninterrupted
    run's output and state."""
    n = 16000
    rows = [{"k": f"k{i}", "v": i % 4, "t": 0} for i in range(n)]
    rows += [{"k": f"k{(t * 7 + j) % n}", "v": j, "t": t} for t in range(1, 7) for j in range(3)]
    ref_out, ref_state = embedded(rows, timers=False)
    d = str(tmp_path / "ck")
    b1, _df, sink1 = _spark_rocksdb_batches(spark, rows, d, str(tmp_path / "db"), 4, timers=False)
    out1 = list(sink1.items)
    whole, _df, _ = _spark_rocksdb_batches(spark, rows, str(tmp_path / "ck-whole"), str(tmp_path / "db-whole"), 4,
                                           timers=False, compact_after=1)
    assert kinds(b1) == {"sst", "sstd"} and kinds(whole) == {"sst"}
    delta_bytes = [m.bytes_written for m in b1.metrics.batches]
    whole_bytes = [m.bytes_written for m in whole.metrics.batches]
    assert delta_bytes[0] == pytest.approx(whole_bytes[0], rel=0.05)  # (the first batch: every bin whole)
    assert 0 < sum(delta_bytes[1:]) < 0.2 * sum(whole_bytes[1:]), (delta_bytes, whole_bytes)
    from tstate.__main__ import main

    assert main(["checkpoints", d, "--verify"]) == 0
    for i, state in enumerate([None, ts.RocksDB(str(tmp_path / "db-embedded"))]):
        di = str(tmp_path / f"ck-{i}")
        shutil.copytree(d, di)
        out2, got, _restored = _resume_embedded(rows, di, 4, 7, state, "lazy", close=True, timers=False)
        assert sorted(out1 + out2, key=repr) == ref_out
        assert as_tuples(got) == as_tuples(ref_state)
    flow3, _ev3, stats3, out3 = keyed(timers=False)  # the Spark run restarted (its executors load the chains)
    b3 = Backend(spark, d, partitions=3, state=ts.RocksDB(str(tmp_path / "db")))
    b3.run(flow3, {"events": Source(spark.createDataFrame(rows, ROW), time="t")})
    assert sorted(out1 + out3.items, key=repr) == ref_out
    assert state_of(b3, stats3) == as_tuples(ref_state)


def test_state_setting_is_checked(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="RocksDB"):
        Backend(spark, str(tmp_path), partitions=1, state=str(tmp_path))


def failing(flag: str) -> tuple[ts.Dataflow, Any, Any, Any]:
    """A per-key sum (a map state) whose function fails at time 3 while ``flag`` exists --
    after it changed the state of its record's key."""
    flow = ts.Dataflow("failing")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=dict[str, int], bins=8)
    def add(s: dict, r: dict, ctx: ts.Context) -> None:
        s["sum"] = s.get("sum", 0) + r["v"]
        s["n"] = s.get("n", 0) + 1
        if r["t"] == 3 and r["k"] == "k2" and os.path.exists(flag):
            raise ValueError("failing on purpose")
        ctx.emit((ctx.key, ctx.time, s["sum"], s["n"]))

    return flow, ev, add, add.collect()


def test_a_failed_task_leaves_nothing_half_applied(spark: Any, tmp_path: Any) -> None:
    rows = rows_of(60, keys=5, per_time=10)
    flag = str(tmp_path / "fail")
    flow, ev, add, out = failing(flag)
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(2)
    ref_out, ref_state = sorted(out.items, key=repr), flow.state(add, format="dict")

    d, db = str(tmp_path / "ck"), ts.RocksDB(str(tmp_path / "db"))
    df = spark.createDataFrame(rows, ROW)
    open(flag, "w").close()
    flow1, _ev1, _add1, out1 = failing(flag)
    with pytest.raises(Exception, match="failing on purpose"):
        Backend(spark, d, partitions=2, state=db).run(flow1, {"events": Source(df, time="t")}, epochs_per_batch=1)
    os.remove(flag)  # the executors' databases hold the failed batch's changes of some bins: never taken
    flow2, _ev2, add2, out2 = failing(flag)
    b2 = Backend(spark, d, partitions=2, state=db)
    b2.run(flow2, {"events": Source(df, time="t")}, epochs_per_batch=1)
    assert b2.metrics.batches[0].batch == 3  # resumed after the last committed batch
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: dict(r["value"]) for r in b2.state(add2).to_arrow().to_pylist()}
    assert got == ref_state


@pytest.mark.parametrize("local", [True, False], ids=["one-task", "spread"])
def test_loops_on_rocksdb_equal_the_embedded_engine(spark: Any, tmp_path: Any, local: bool) -> None:
    """An iterate scope's stateful operators keep RocksDB state through the rounds
    (spread over stages, or all in one task per batch)."""
    from .test_loops import KEYS, embedded as loops_embedded, walks

    rows = [{"k": KEYS[i % len(KEYS)], "hops": i % 4, "t": i // 3} for i in range(9)]
    ref = loops_embedded(rows, workers=2, delay=1)
    flow, out, totals = walks(1)
    backend = Backend(
        spark, str(tmp_path / "ck"), partitions=2, local_loops=(64 << 20) if local else 0,
        state=ts.RocksDB(str(tmp_path / "db")),
    )
    backend.run(flow, {"walks": Source(spark.createDataFrame(rows, "k string, hops long, t long"), time="t")}, epochs_per_batch=1)
    assert (sorted(out.items, key=repr), sorted(totals.items, key=repr)) == ref
    assert sum(b.loop_rounds for b in backend.metrics.batches) > 0
    assert "sst" in kinds(backend) <= {"sst", "sstd"}


def test_executor_killed_and_driver_restarted_outputs_exactly_once(tmp_path: Any) -> None:
    """``local-cluster[2,1,1024]``: an executor JVM (and its Python workers' databases) is
    SIGKILLed during batch 2, the driver during batch 5; a restarted driver finishes and
    the output is exactly the embedded heap run's (tests/spark/test_faults.py, on RocksDB)."""
    from .test_faults import read_output, reference, run_job

    ref = reference(tmp_path)
    ck, out, db = str(tmp_path / "ck"), str(tmp_path / "out"), str(tmp_path / "db")
    master = "local-cluster[2,1,1024]"
    first = run_job(master, ck, out, "--kill-executor-at", "2", "--die-at", "5", "--rocksdb", db)
    assert first.returncode == -9, first.stderr[-3000:]
    assert "killing executor" in first.stdout
    second = run_job(master, ck, out, "--rocksdb", db)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "tstate: resumed at batch 6 of 8" in second.stderr
    assert read_output(out) == ref
