"""A placed input kept as Arrow blobs (``tstate.spark.packed``): the cache holds a few
blob rows per partition, the epochs counted from the blobs are a plain count's, a
window's rows are the plain filter's in the frame's order, and runs over packed frames
(with a rescale, and resumed after a crash) compute what the embedded engine does."""

from __future__ import annotations

import random
from typing import Any

import pytest

import tstate as ts
from tstate.spark import Backend, Source, packed, placed
from tstate.spark.cuts import span

from .test_colocated import COL, ROW, embedded, run_spark, spark_state
from .flows import keyed


def _frame(spark: Any, n: int, parts: int, nulls: bool = False) -> Any:
    rnd = random.Random(n)
    rows = [(f"k{rnd.randrange(9)}", i, None if nulls and i % 17 == 0 else rnd.randrange(40)) for i in range(n)]
    return spark.createDataFrame(rows, ROW).repartition(parts)


def test_epochs_counted_from_blobs_equal_a_plain_count(spark: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(packed, "BLOB_ROWS", 13)
    df = _frame(spark, 700, 3, nulls=True)
    blobs = packed.pack(df, "t", None)
    assert blobs.count() < df.count() / 10  # a few blob rows, not one per record
    for lo, rows in [(None, 100), (7, 100), (None, None), (12, None)]:
        assert span([(blobs, "t")], lo, rows) == span([(df, "t")], lo, rows)


def test_a_window_holds_the_filters_rows_in_order(spark: Any, monkeypatch: Any) -> None:
    """Within a partition, the rows of a time in the frame's order (``seq``)."""
    from pyspark.sql import functions as F

    monkeypatch.setattr(packed, "BLOB_ROWS", 11)
    df = _frame(spark, 500, 2).withColumn("seq", F.monotonically_increasing_id())
    blobs = packed.pack(df, "t", "seq")
    for lo, hi in [(0, 40), (3, 4), (5, 19), (39, 60)]:
        got = [tuple(r) for r in packed.unpacked(packed.window(blobs, "t", lo, hi)).collect()]
        want = sorted((r for r in df.collect() if lo <= r["t"] < hi), key=lambda r: (r["t"], r["seq"]))
        assert sorted(got) == sorted((r["k"], r["v"], r["t"]) for r in want)
        for t in range(lo, hi):  # the rows of one time keep their order
            assert [g for g in got if g[2] == t] == [(r["k"], r["v"], r["t"]) for r in want if r["t"] == t]


def test_the_placed_frame_is_packed(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(packed, "BLOB_ROWS", 7)
    frames: list[Any] = []
    real = placed._packed

    def spying(df: Any, partitions: int, time_column: str) -> Any:
        frames.append(real(df, partitions, time_column))
        return frames[-1]

    monkeypatch.setattr(placed, "_packed", spying)
    rows = [{"k": f"k{i % 19}", "v": i % 5, "t": i // 30} for i in range(300)]
    out, state, _backend = run_spark(spark, rows, str(tmp_path / "ck"), 2, reconfigure=[(4, ts.Rescale(3))])
    assert (out, state) == embedded(rows)
    (frame,) = frames
    assert frame.columns[-1] == packed.BLOB
    assert 300 / 7 <= frame.count() <= 300 / 7 + 2 * 10  # blobs of <= 7 rows, cut per partition


class _Crash(Exception):
    pass


@pytest.mark.parametrize("partitions", [2, 3])
def test_resume_after_a_crash_mid_run(spark: Any, tmp_path: Any, monkeypatch: Any, partitions: int) -> None:
    monkeypatch.setattr(packed, "BLOB_ROWS", 9)
    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 20} for i in range(200)]
    ref_out, ref_state = embedded(rows)
    d = str(tmp_path / "ck")
    df = spark.createDataFrame(rows, ROW).repartition(3)
    flow, _ev, _stats, out1 = keyed(key=COL)
    b1 = Backend(spark, checkpoint=d, partitions=2)
    real, seen = b1._batch, [0]

    def crashing(*a: Any, **kw: Any) -> None:
        if seen[0] == 4:
            raise _Crash()
        seen[0] += 1
        real(*a, **kw)

    monkeypatch.setattr(b1, "_batch", crashing)
    with pytest.raises(_Crash):
        b1.run(flow, {"events": Source(df, time="t")}, epochs_per_batch=1)
    flow2, _ev2, stats2, out2 = keyed(key=COL)
    b2 = Backend(spark, checkpoint=d, partitions=partitions)
    b2.run(flow2, {"events": Source(df, time="t")}, epochs_per_batch=1, reconfigure=[(7, ts.Rescale(partitions + 1))])
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    assert spark_state(b2, stats2) == ref_state
