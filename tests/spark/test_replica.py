"""The Spark backend with a replicated checkpoint store: the driver copies each
committed batch's checkpoint, and a restart after the primary store is lost resumes
from the replica exactly once (tstate.checkpoint.store, "A replica")."""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Any

import pytest

import tstate as ts
from tstate.checkpoint.store import CheckpointRepairedWarning, CheckpointStore
from tstate.spark import Backend, Source

ROW = "k string, v long, t long"
ROWS = [{"k": "abcde"[i % 5], "v": i % 7, "t": i // 6} for i in range(36)]  # epochs 0..5


def flow(marker: str) -> tuple[ts.Dataflow, ts.Collected]:
    """Running sums per key; a record of epoch 4 fails while ``marker`` exists."""
    f = ts.Dataflow("replicated")

    def check(r: dict) -> dict:
        if r["t"] == 4 and os.path.exists(marker):
            raise RuntimeError("the driver 'dies' at epoch 4")
        return r

    ev = f.input("events").map(check)

    @f.stateful(ev, key=lambda r: r["k"], state=int, bins=8)
    def sums(total: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((ctx.key, ctx.time, total + r["v"]))
        return total + r["v"]

    return f, sums.collect()


def reference() -> list:
    totals: dict[str, int] = {}
    expected = []
    for r in ROWS:
        totals[r["k"]] = totals.get(r["k"], 0) + r["v"]
        expected.append((r["k"], r["t"], totals[r["k"]]))
    return sorted(expected)


def test_a_lost_store_is_resumed_from_its_replica(spark: Any, tmp_path: Any) -> None:
    ck, rep, marker = str(tmp_path / "ck"), str(tmp_path / "rep"), str(tmp_path / "die")
    open(marker, "w").close()
    df = spark.createDataFrame(ROWS, ROW)
    f1, out1 = flow(marker)
    b1 = Backend(spark, checkpoint=ck, partitions=2, progress=False, replica=rep)
    with pytest.raises(Exception, match="dies. at epoch 4"):
        b1.run(f1, {"events": Source(df, time="t")}, epochs_per_batch=1)
    b1.store.wait_gc()  # the copy runs with the garbage collection, off the committing thread
    m = CheckpointStore(ck, readonly=True).latest()
    assert m is not None and m.meta["spark"]["batch"] == 3  # batches 0..3 committed
    replica = CheckpointStore(rep, readonly=True)
    assert replica.latest() == m and replica.verify(m) == []

    shutil.rmtree(ck)  # the primary store is lost
    os.unlink(marker)
    f2, out2 = flow(marker)
    b2 = Backend(spark, checkpoint=ck, partitions=3, progress=False, replica=rep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b2.run(f2, {"events": Source(df, time="t")}, epochs_per_batch=1)
    assert any(issubclass(w.category, CheckpointRepairedWarning) for w in caught)
    assert b2.metrics.batches[0].batch == 4  # resumed, not restarted
    got = sorted(tuple(rec) for _t, rec in out1.items + out2.items)
    assert got == reference()
