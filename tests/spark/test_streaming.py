"""Streaming: a real StreamingQuery over a file source; restarts are exactly-once."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import pytest

import tstate as ts
from tstate.backend import Started
from tstate.spark import Backend, Source

from .flows import keyed

SCHEMA = "k string, v long, t long"


def write_files(d: str, files: list[list[dict]], start: int = 0) -> None:
    os.makedirs(d, exist_ok=True)
    for i, rows in enumerate(files, start):
        table = pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("v", pa.int64()), ("t", pa.int64())]))
        path = os.path.join(d, f"part-{i:04d}.parquet")
        pq.write_table(table, path)
        # Spark's file source takes files in modification-time order: make it the index
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def stream(spark: Any, d: str) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(d)


def reference(files: list[list[dict]]) -> list:
    """The embedded engine with micro-batch i as epoch i."""
    flow, ev, _stats, out = keyed()
    for i, rows in enumerate(files):
        ev.send(rows, time=i)
    ev.advance_to(len(files))
    ex = flow.start(workers=2)
    ex.step_while(lambda: True)
    return sorted(((t, r) for t, r in out.items if t < len(files)), key=repr)


FILES = [[{"k": f"k{(i * 7 + j) % 9}", "v": j % 4, "t": 0} for j in range(12)] for i in range(6)]


def test_streaming_query_equals_embedded_and_restart_is_exactly_once(spark: Any, tmp_path: Any) -> None:
    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    write_files(src, FILES[:3])
    flow, _ev, _stats, out1 = keyed()
    backend = Backend(spark, checkpoint=ck, partitions=2)
    q = backend.start(flow, {"events": stream(spark, src)}, trigger={"availableNow": True})
    q.wait()
    assert [b.batch for b in backend.metrics.batches] == [0, 1, 2]
    assert len(q.query.recentProgress) >= 3  # Spark's own progress events
    # the driver restarts; more files arrived meanwhile, and Spark replays the last
    # batch (its commit log lost it): tstate committed it already and skips it
    write_files(src, FILES[3:], start=3)
    for name in ("2", ".2.crc"):
        os.remove(os.path.join(ck, "spark-query", "commits", name))
    flow2, _ev2, _stats2, out2 = keyed()
    backend2 = Backend(spark, checkpoint=ck, partitions=3)
    q2 = backend2.start(flow2, {"events": stream(spark, src)}, trigger={"availableNow": True})
    q2.wait()
    assert backend2.metrics.skipped == [2]
    assert [b.batch for b in backend2.metrics.batches] == [3, 4, 5]
    got = sorted(out1.items + out2.items, key=repr)
    assert got == reference(FILES)


def test_event_time_column_and_late_rows(spark: Any, tmp_path: Any) -> None:
    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    files = [
        [{"k": "a", "v": 1, "t": 5}, {"k": "b", "v": 2, "t": 6}],
        [{"k": "a", "v": 3, "t": 7}, {"k": "a", "v": 9, "t": 4}],  # t=4 is behind the frontier (7)
        [{"k": "b", "v": 1, "t": 9}],
    ]
    write_files(src, files)
    flow = ts.Dataflow("et")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=int)
    def total(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((ctx.key, n + r["v"]))
        return n + r["v"]

    out = total.collect()
    backend = Backend(spark, checkpoint=ck, partitions=2)
    q = backend.start(flow, {"events": Source(stream(spark, src), time="t")}, trigger={"availableNow": True})
    assert isinstance(q, Started) and q.name == "et" and q.metrics is backend.metrics  # the embedded engine's type
    assert q.wait() is True and q.finished and q.wait(timeout=1.0) is True
    with pytest.warns(DeprecationWarning, match="query"):  # the former result, the StreamingQuery, still reads
        assert q.isActive is False and q.exception() is None
    assert sorted(out.items) == [(5, ("a", 1)), (6, ("b", 2)), (7, ("a", 4)), (9, ("b", 3))]
    assert backend.metrics.late == 1
    assert [b.frontier for b in backend.metrics.batches] == [7, 8, 10]


def test_allowed_lateness_holds_records_until_the_frontier_reaches_them(spark: Any, tmp_path: Any) -> None:
    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    files = [
        [{"k": "a", "v": 1, "t": 5}, {"k": "b", "v": 2, "t": 6}],
        [{"k": "a", "v": 9, "t": 4}, {"k": "a", "v": 3, "t": 7}, {"k": "b", "v": 4, "t": 9}],  # t=4: late
        [{"k": "b", "v": 5, "t": 8}, {"k": "a", "v": 6, "t": 12}],  # t=12 stays held
    ]
    write_files(src, files)

    def build() -> tuple[ts.Dataflow, ts.Collected]:
        flow = ts.Dataflow("lateness")
        ev = flow.input("events")

        @flow.stateful(ev, key=lambda r: r["k"], state=list[int])
        def seen(s: list, r: dict, ctx: ts.Context) -> None:
            s.append(r["v"])
            ctx.emit((ctx.key, list(s)))

        return flow, seen.collect()

    flow, out = build()
    backend = Backend(spark, checkpoint=ck, partitions=2)
    q = backend.start(flow, {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    q.wait()
    # each key sees its records in time order, although b@8 arrived after b@9
    assert sorted(out.items) == [(5, ("a", [1])), (6, ("b", [2])), (7, ("a", [1, 3])), (8, ("b", [2, 5])), (9, ("b", [2, 5, 4]))]
    assert [b.frontier for b in backend.metrics.batches] == [5, 8, 11]
    assert backend.metrics.late == 1
    # the held record (a@12) survives a restart and comes out once the frontier passes it
    write_files(src, [[{"k": "c", "v": 0, "t": 15}]], start=3)
    flow2, out2 = build()
    backend2 = Backend(spark, checkpoint=ck, partitions=3)
    q2 = backend2.start(flow2, {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    q2.wait()
    assert sorted(out2.items) == [(12, ("a", [1, 3, 6]))]


def test_a_streaming_run_waits_with_a_timeout_and_stops(spark: Any, tmp_path: Any) -> None:
    """``Started`` as the embedded engine's: an unbounded query is not over after a
    timeout; once stopped it is, and its committed batches stay."""
    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    write_files(src, FILES[:1])
    flow, _ev, _stats, _out = keyed()
    backend = Backend(spark, checkpoint=ck, partitions=2)
    run = backend.start(flow, {"events": stream(spark, src)})  # no trigger: runs until stopped
    assert run.wait(timeout=0.5) is False and not run.finished
    run.stop()
    assert run.finished and run.wait() is True and run.query.exception() is None
