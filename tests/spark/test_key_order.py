"""A key's records reach its operator in the frame's order on Spark with a Python key
function, as on the embedded engine, whatever order the shuffle's blocks arrive in.

An input keyed by a Python function is not placed (tstate.spark.placed): its input
tasks route the rows to bins and a shuffle hands them to the stateful task.  On a
cluster the shuffle's blocks come in no fixed order, so one key's records of one epoch
coming from several input partitions could reach the operator out of the frame's
order.  On ``local[N]`` blocks happen to arrive in map order, so the test reverses the
arrival order inside every receiving partition (in the JVM, after the shuffle): the
order-sensitive per-key recorder below must still equal the embedded engine's."""

from __future__ import annotations

from typing import Any

import pytest
from attrs import define, field

import tstate as ts
from tstate.spark import Backend, Source
from tstate.spark.stages import Stages

ROWS: list[dict[str, Any]] = [{"k": f"k{i % 5}", "v": i, "t": i % 3} for i in range(240)]
#: the same rows as a frame of 4 partitions (rows 0-59 in the first, ...), every epoch in each
FRAME = ("concat('k', cast(id % 5 as string)) as k", "id as v", "id % 3 as t")


@define
class Seq:
    vs: list[int] = field(factory=list)


def recorder(mapped: bool) -> tuple[ts.Dataflow, ts.InputStream, Any, ts.Collected]:
    """A stateful operator keyed by a Python function that records its key's values in
    arrival order and emits the sequence at the end of each epoch; ``mapped``: a ``map``
    before it (the input task's general path), else the input feeds it directly."""
    flow = ts.Dataflow("order")
    ev = flow.input("events")
    src = ev.map(lambda r: {**r, "v": r["v"] * 10}) if mapped else ev

    @flow.stateful(src, key=lambda r: r["k"], state=Seq, bins=8)
    def seq(s: Seq, r: dict, ctx: ts.Context) -> None:
        s.vs.append(r["v"])
        ctx.notify_at(ctx.time)

    @seq.on_notify
    def done(s: Seq, t: int, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, t, tuple(s.vs)))

    return flow, ev, seq, seq.collect()


def embedded(mapped: bool) -> tuple[list, dict]:
    flow, ev, seq, out = recorder(mapped)
    for t in sorted({r["t"] for r in ROWS}):
        ev.send([r for r in ROWS if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    return sorted(out.items), {k: list(v.vs) for k, v in flow.state(seq, format="dict").items()}


def _reversed_arrival(monkeypatch: Any) -> None:
    """Every boundary stage's receiving tasks get their rows in reverse arrival order."""
    from pyspark.sql import functions as F

    real = Stages._exchange

    def reversing(self: Stages, rows: Any) -> Any:
        return (
            real(self, rows)
            .withColumn("__arrival", F.monotonically_increasing_id())
            .sortWithinPartitions(F.desc("__arrival"))
            .drop("__arrival")
        )

    monkeypatch.setattr(Stages, "_exchange", reversing)


@pytest.mark.parametrize("mapped", [False, True], ids=["direct", "mapped"])
def test_per_key_order_is_the_frames_whatever_the_arrival(spark: Any, tmp_path: Any, monkeypatch: Any, mapped: bool) -> None:
    ref = embedded(mapped)
    assert {r["v"] // 60 for r in ROWS if r["k"] == "k0" and r["t"] == 0} == {0, 1, 2, 3}  # (from every partition)
    _reversed_arrival(monkeypatch)
    flow, _ev, seq, out = recorder(mapped)
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2)
    df = spark.range(0, len(ROWS), 1, 4).selectExpr(*FRAME)
    assert df.rdd.getNumPartitions() == 4
    backend.run(flow, {"events": Source(df, time="t")})
    state = {r["key"]: list(r["vs"]) for r in backend.state(seq).frame.collect()}
    assert (sorted(out.items), state) == ref
