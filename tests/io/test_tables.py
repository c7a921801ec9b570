"""Parquet/CSV sources: epochs, batching, replay positions, bad input."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from attrs import frozen

import tstate as ts
from tstate.errors import SourceError


def write(tmp_path, rows, name="t.parquet"):
    path = tmp_path / name
    table = pa.Table.from_pylist(rows)
    if name.endswith(".csv"):
        pcsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


def read_all(source, workers=1):
    flow = ts.Dataflow("read")
    out = flow.source(source).collect()
    flow.run(workers=workers)
    return out.by_time()


def test_epochs_from_timestamps(tmp_path):
    base = dt.datetime(2001, 1, 1)
    rows = [{"date": base + dt.timedelta(minutes=m), "v": m} for m in (0, 10, 59, 60, 61, 200)]
    got = read_all(ts.io.parquet(write(tmp_path, rows), time="date", epoch="1h", batch_rows=2))
    h0 = int(base.replace(tzinfo=dt.timezone.utc).timestamp()) // 3600
    assert {t - h0: [r["v"] for r in recs] for t, recs in got.items()} == {0: [0, 10, 59], 1: [60, 61], 3: [200]}


def test_late_rows_take_the_current_epoch_and_records(tmp_path):
    @frozen
    class Row:
        t: int
        v: str

    rows = [{"t": 5, "v": "a"}, {"t": 9, "v": "b"}, {"t": 7, "v": "late"}, {"t": 12, "v": "c"}]
    got = read_all(ts.io.csv(write(tmp_path, rows, "t.csv"), time="t", epoch=2, record=Row))
    assert got == {2: [Row(5, "a")], 4: [Row(9, "b"), Row(7, "late")], 6: [Row(12, "c")]}


def test_replay_from_a_position(tmp_path):
    rows = [{"t": i // 3, "v": i} for i in range(20)]
    src = ts.io.parquet(write(tmp_path, rows), time="t", batch_rows=4)
    r = src.open()
    seen = []
    while (b := r.next_batch()) is not None:
        seen.append((r.position(), b))
    pos_of_t3 = next(p - len(b[1]) for p, b in seen if b[0] == 3)
    r2 = src.open(position=pos_of_t3, start=3)
    assert r2.start_time() == 3
    assert r2.next_batch() == (3, [{"t": 3, "v": 9}, {"t": 3, "v": 10}, {"t": 3, "v": 11}])


def test_int_timestamps_and_limit(tmp_path):
    base = dt.datetime(2001, 1, 1)
    rows = [{"date": base + dt.timedelta(seconds=s)} for s in range(10)]
    got = read_all(ts.io.parquet(write(tmp_path, rows), time="date", epoch=5, timestamps="int", limit=7))
    values = [r["date"] for recs in got.values() for r in recs]
    assert len(values) == 7 and all(isinstance(v, int) for v in values)


def test_bad_input(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        read_all(ts.io.parquet(tmp_path / "missing.parquet", time="t"))
    path = write(tmp_path, [{"x": 1}])
    with pytest.raises(SourceError, match=r"no column 't'.*columns: x"):
        read_all(ts.io.parquet(path, time="t"))
    path = write(tmp_path, [{"t": 1}, {"t": None}], "n.parquet")
    with pytest.raises(SourceError, match=r"n.parquet: row 1: column 't' is null"):
        read_all(ts.io.parquet(path, time="t"))
    path = write(tmp_path, [{"t": "x"}], "s.parquet")
    with pytest.raises(SourceError, match=r"column 't' has type string"):
        read_all(ts.io.parquet(path, time="t"))
    with pytest.raises(ts.errors.ConfigurationError, match="epoch"):
        ts.io.parquet(path, time="t", epoch="fortnight")


def test_the_epoch_unit_is_known_once_read(tmp_path) -> None:
    """A table source says what its epochs are (what checkpoints record for the CLI):
    dates for a timestamp or date column, the column's numbers otherwise."""
    import doctest

    from tstate.io import sources
    from tstate.io.sources import EpochUnit

    assert doctest.testmod(sources).failed == 0
    dated = ts.io.parquet(
        write(tmp_path, [{"t": dt.datetime(2001, 1, 1, 6, 30), "v": 1}], "d.parquet"), time="t", epoch="30min"
    )
    numbered = ts.io.csv(write(tmp_path, [{"t": 7.5, "v": 1}], "n.csv"), time="t", epoch=2.5)
    assert dated.epoch_unit is None and ts.io.from_batches([]).epoch_unit is None
    for src, unit, first in ((dated, EpochUnit(1800.0, True), "2001-01-01 06:30"), (numbered, EpochUnit(2.5, False), "7.5")):
        (t,) = read_all(src)  # {epoch: records}
        assert src.epoch_unit == unit and unit.label(t) == first
    assert EpochUnit(86400, True).label(11323) == "2001-01-01" and EpochUnit(90, True).label(1) == "1970-01-01 00:01:30"
    assert EpochUnit.from_builtins(unit.to_builtins()) == unit and EpochUnit.from_builtins({"size": 0}) is None
