"""Pre-copy rescaling on Spark (``Backend.rescale(..., strategy="precopy")``): the
executors load the moving bins' committed chains in the batch before the hand-over, and
the new owner then reads only the files committed since.  The executor cache
(:mod:`tstate.spark.binstore`) is tested without Spark first; then a live precopy
rescale against the embedded engine, a run without a rescale and an all-at-once
rescale, and a driver crash during a pre-copy."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import tstate as ts
from tstate.checkpoint.commit import commit, operator_schemas
from tstate.checkpoint.store import CheckpointStore
from tstate.keys import bin_of, key_hash
from tstate.spark import Backend, Source, binstore
from tstate.spark.host import StatefulHost, stored_fingerprint, write_bins
from tstate.spark.plan import Plan
from tstate.spark.wire import BatchInfo, FileReport

from .flows import embedded, keyed

ROW = "k string, v long, t long"


# ------------------------------------------------------------------ the executor cache


def word_count() -> tuple[Plan, int]:
    flow = ts.Dataflow("precopy-unit")
    words = flow.input("words")

    @flow.stateful(words, key=lambda w: w, state=int, bins=4)
    def count(n: int, w: str, ctx: ts.Context) -> int:
        return n + 1

    return Plan.of(flow), count.node


def commit_batch(
    store: CheckpointStore, plan: Plan, node: int, batch: int, words: list[str], partition: int,
    prefetch: tuple[tuple[int, int], ...] = (),
) -> None:
    """One batch of ``words`` at time ``batch`` on ``partition`` (owning every bin), its
    files committed as the driver commits a micro-batch's."""
    pn = plan.nodes[node]
    head = store.head
    writer = store.begin(batch + 1, full=head is None)
    info = BatchInfo(
        batch, batch, batch + 1, store.directory, head.id if head is not None else None, writer.id, writer.token,
        (0,), {node: (partition,) * pn.bins}, {node: frozenset()}, prefetch={node: prefetch} if prefetch else {},
    )
    host = StatefulHost(plan, node)
    m, fp = stored_fingerprint(info, pn, host.codec)
    route = plan.router(node)
    groups: dict[int, dict[int, list[Any]]] = {}
    for w in words:
        groups.setdefault(batch, {}).setdefault(route.bin(w), []).append(w)
    loaded, _found = host.take(info, m, {b for g in groups.values() for b in g}, fp, partition)
    host.run_batch(info, groups)
    rows: list[Any] = []
    write_bins(info, m, pn, host.codec, loaded, rows, lambda b: None, partition)
    for r in rows:
        FileReport.of_row(r[5]).adopt(writer, pn.name, r[3], {})
    commit(writer, operator_schemas([pn.stateful]), (), {}, [])


def settle() -> None:
    """Wait for this process's prefetch threads."""
    for t in [t for t in threading.enumerate() if t.name.startswith("tstate-prefetch")]:
        t.join(30)


@pytest.fixture
def unit(tmp_path: Any):  # type: ignore[no-untyped-def]
    binstore.clear()
    plan, node = word_count()
    store = CheckpointStore(str(tmp_path / "ck"))
    many = [f"w{i}" for i in range(400)]
    commit_batch(store, plan, node, 0, many, partition=0)
    commit_batch(store, plan, node, 1, many, partition=0)
    yield store, plan, node
    binstore.clear()


def test_a_prefetched_bin_reads_only_the_files_since_and_equals_a_full_read(unit: Any) -> None:
    store, plan, node = unit
    pn = plan.nodes[node]
    host = StatefulHost(plan, node)
    fp = host.codec.fingerprint
    before = store.head
    # the executors load bin 2 for partition 1 while partition 0 still processes it
    assert binstore.prefetch(store.directory, before, pn.name, host.codec, fp, [(2, 1)], handover=3) == 1
    assert binstore.prefetch(store.directory, before, pn.name, host.codec, fp, [(2, 1)], handover=3) == 0  # (once)
    settle()
    few = [w for w in (f"w{i}" for i in range(400)) if plan.router(node).bin(w) == 2][:3]
    commit_batch(store, plan, node, 2, few, partition=0, prefetch=((2, 1),))
    m = store.head
    chain = m.chain(pn.name, 2)
    assert chain[-1].path.endswith("-delta.bin")  # (a bin being prefetched is not compacted)
    got, how = binstore.take(store.directory, m, pn.name, 2, host.codec, fp, partition=1)
    assert how.how == "prefetched" and how.read == chain[-1].size  # only the batch since the prefetch
    assert got.states == binstore.read(store.directory, chain, host.codec, fp).states
    assert got.states[few[0]] == 3
    # without a prefetch, the new owner does not take the old owner's cached copy: it reads the chain
    other, how = binstore.take(store.directory, m, pn.name, 1, host.codec, fp, partition=1)
    assert how.how == "miss" and how.read == sum(r.size for r in m.chain(pn.name, 1))
    # the old owner itself does
    _same, how = binstore.take(store.directory, m, pn.name, 3, host.codec, fp, partition=0)
    assert how.how == "hit" and how.read == 0


def test_prefetches_not_taken_expire_and_a_hand_over_waits_for_a_running_one(unit: Any, monkeypatch: Any) -> None:
    store, plan, node = unit
    pn = plan.nodes[node]
    codec = StatefulHost(plan, node).codec
    fp, m = codec.fingerprint, store.head
    binstore.prefetch(store.directory, m, pn.name, codec, fp, [(0, 1)], handover=2)
    settle()
    binstore.expire(3)  # the hand-over (batch 2) is over: its task ran elsewhere
    _b, how = binstore.take(store.directory, m, pn.name, 0, codec, fp, partition=1)
    assert how.how == "miss"
    # a load still running when the hand-over needs the bin is waited for
    gate = threading.Event()
    real = binstore.read

    def slow(*a: Any) -> Any:
        gate.wait(10)
        return real(*a)

    monkeypatch.setattr(binstore, "read", slow)
    binstore.prefetch(store.directory, m, pn.name, codec, fp, [(1, 1)], handover=2)
    threading.Timer(0.3, gate.set).start()
    _b, how = binstore.take(store.directory, m, pn.name, 1, codec, fp, partition=1)
    assert how.how == "prefetched" and how.read == 0


# ------------------------------------------------------------------ on Spark


def rows_for() -> list[dict]:
    """320 keys at epochs 0 and 1 (the state), then at each of epochs 2..6 two keys of
    every bin of ``stats`` (16 bins): every bin changes a little per epoch."""
    keys = [f"k{i}" for i in range(320)]
    rows = [{"k": k, "v": i % 7, "t": t} for t in (0, 1) for i, k in enumerate(keys)]
    by_bin: dict[int, list[str]] = {}
    for k in keys:
        by_bin.setdefault(bin_of(key_hash(k), 16), []).append(k)
    assert len(by_bin) == 16
    for t in range(2, 7):
        rows += [{"k": ks[(2 * t + j) % len(ks)], "v": t, "t": t} for ks in by_bin.values() for j in (0, 1)]
    return rows


def run_spark(spark: Any, rows: list[dict], d: str, reconfigure: Any = ()) -> tuple[list, dict, Backend]:
    flow, _ev, stats, out = keyed()
    backend = Backend(spark, checkpoint=d, partitions=2, progress=False)
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=1,
                reconfigure=reconfigure)
    state = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in backend.state(stats).frame.collect()}
    return sorted(out.items, key=repr), state, backend


def as_tuples(state: dict) -> dict:
    return {k: (v.n, v.total, list(v.seen)) for k, v in state.items()}


def test_precopy_rescale_gives_the_same_output_and_reads_less_at_the_hand_over(spark: Any, tmp_path: Any) -> None:
    rows = rows_for()
    ref_out, ref_state = embedded(rows)
    out_none, state_none, _ = run_spark(spark, rows, str(tmp_path / "none"))
    out_all, state_all, b_all = run_spark(spark, rows, str(tmp_path / "all"), [(4, ts.Rescale(4, strategy="all-at-once"))])
    out_pre, state_pre, b_pre = run_spark(spark, rows, str(tmp_path / "pre"), [(4, ts.Rescale(4, strategy="precopy"))])
    assert out_pre == out_none == out_all == ref_out
    assert state_pre == state_none == state_all == as_tuples(ref_state)

    by = {m.batch: m for m in b_pre.metrics.batches}
    lead, hand = by[3], by[4]
    assert hand.moved_bins > 0 and sum(m.moved_bins for m in by.values()) == hand.moved_bins
    assert lead.prefetch_bins == hand.moved_bins - 2  # (the 2 moved bins of the exchange have no state)
    assert lead.prefetch_loads >= lead.prefetch_bins  # (one load per executor process)
    assert hand.prefetched_bins > 0  # the new owners found them loaded
    assert hand.prefetched_bins + hand.prefetch_fallbacks >= lead.prefetch_bins
    assert hand.partitions == 4 and b_pre.metrics.batches[-1].partitions == 4
    all_hand = next(m for m in b_all.metrics.batches if m.moved_bins)
    assert all_hand.batch == 4 and all_hand.handover_bytes > 0 and all_hand.prefetched_bins == 0
    # the new owners read the moved bins' last delta instead of their whole chains
    assert hand.handover_bytes < all_hand.handover_bytes / 2, (hand.handover_bytes, all_hand.handover_bytes)


@pytest.mark.parametrize("crash", ["after the lead batch", "in the hand-over"])
def test_a_driver_crash_during_a_precopy_is_exactly_once(spark: Any, tmp_path: Any, monkeypatch: Any, crash: str) -> None:
    from pyspark.sql import functions as F

    import tstate.spark.batch as batch_mod

    rows = rows_for()
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    df = spark.createDataFrame(rows, ROW)
    src = {"events": Source(df, time="t")}
    flow, _ev, _stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=d, partitions=2, progress=False)
    b1._prepare(flow, src)
    for t in range(3):
        b1._batch({"events": df.where(F.col("t") == t)}, src, t, t, t + 1, None)
    assert b1.rescale(4, "precopy").steps == 2
    b1._batch({"events": df.where(F.col("t") == 3)}, src, 3, 3, 4, None)  # the lead batch: executors prefetch
    assert b1.metrics.batches[-1].prefetch_bins > 0
    if crash == "in the hand-over":  # the tasks take the prefetched bins and write; the commit never happens
        def dies(*a: Any, **k: Any) -> None:
            raise RuntimeError("the driver dies")

        monkeypatch.setattr(batch_mod, "commit", dies)
        with pytest.raises(RuntimeError, match="the driver dies"):
            b1._batch({"events": df.where(F.col("t") == 4)}, src, 4, 4, 5, None)
        monkeypatch.undo()
    # a new driver on the same checkpoint, on the rescaled partitions
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, checkpoint=d, partitions=4, progress=False)
    b2.run(flow2, src, epochs_per_batch=1)
    assert b2.metrics.batches[0].batch == 4 and b2.metrics.batches[0].partitions == 4
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b2.state(stats2).frame.collect()}
    assert got == as_tuples(ref_state)
