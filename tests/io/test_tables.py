"""Parquet/CSV sources: epochs, batching, replay positions, bad input."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
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
    with pytest.raises(SourceError, match=r"n.parquet: row 2, column 't': the time is null"):
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


def test_the_source_declares_its_event_time(tmp_path):
    # what an operator downstream (apps.cep's cep) reads instead of being told again
    base = dt.datetime(2001, 1, 1)
    rows = [{"date": base, "minute": 5, "v": 1}]
    p = write(tmp_path, rows)
    et = ts.io.parquet(p, time="date", epoch="15min").event_time()
    assert (et.field, et.epoch, et.unit, et.origin) == ("date", dt.timedelta(minutes=15), None, dt.datetime(1970, 1, 1))
    et = ts.io.parquet(p, time="date", epoch="1h", timestamps="int").event_time()  # microseconds
    assert (et.epoch, et.unit, et.origin) == (3_600_000_000, dt.timedelta(microseconds=1), 0)
    et = ts.io.parquet(p, time="minute", epoch=60).event_time()  # a number in the column's unit
    assert (et.field, et.epoch, et.unit) == ("minute", 60, None)
    aware = write(tmp_path, [{"date": base.replace(tzinfo=dt.timezone.utc)}], "aware.parquet")
    assert ts.io.parquet(aware, time="date", epoch="1h").event_time().origin.tzinfo is dt.timezone.utc
    csv = write(tmp_path, rows, "t.csv")
    assert ts.io.csv(csv, time="date", epoch="1h").event_time().epoch == dt.timedelta(hours=1)
    assert ts.io.from_batches([(0, [1])]).event_time() is None
    with pytest.raises(SourceError, match="no column 'when'"):
        ts.io.parquet(p, time="when").event_time()


def test_a_stream_knows_the_source_it_carries(tmp_path):
    flow = ts.Dataflow("origin")
    src = ts.io.parquet(write(tmp_path, [{"date": dt.datetime(2001, 1, 1)}]), time="date")
    s = flow.source(src)
    assert s.origin_source() is src
    assert s.filter(bool).exchange(lambda r: 0).inspect(print).origin_source() is src  # records unchanged
    assert s.map(lambda r: r).origin_source() is None  # records may differ
    assert flow.input("in").origin_source() is None


def test_the_source_declares_its_record_type(tmp_path):
    from typing import Optional

    from tstate.types import StateCodec

    base = dt.datetime(2001, 1, 1)
    table = pa.table(
        {"date": [base], "n": pa.array([1], pa.int32()), "x": [1.5], "s": ["a"], "tags": [["p", None]],
         "pos": [{"lat": 1.0, "lon": None}]}
    )  # fmt: skip
    p = tmp_path / "r.parquet"
    pq.write_table(table, p)
    rt = ts.io.parquet(p, time="date").record_type()
    hints = rt.__annotations__
    assert hints["date"] == Optional[dt.datetime] and hints["n"] == Optional[int] and hints["s"] == Optional[str]
    assert hints["tags"] == Optional[list[Optional[str]]]
    rows = table.to_pylist()
    codec = StateCodec(list[rt])
    assert codec.decode(codec.encode(rows)) == rows  # the rows the source gives are values of it
    assert ts.io.parquet(p, time="date", timestamps="int").record_type().__annotations__["date"] == Optional[int]
    assert ts.io.parquet(p, time="date", columns=["n"]).record_type().__annotations__.keys() == {"n", "date"}

    @frozen
    class Rec:
        date: dt.datetime

    assert ts.io.parquet(p, time="date", columns=["date"], record=Rec).record_type() is Rec
    dec = tmp_path / "d.parquet"
    pq.write_table(pa.table({"date": [base], "d": pa.array([1], pa.decimal128(5, 2))}), dec)
    assert ts.io.parquet(dec, time="date").record_type() is None  # no Python state type for decimals


@pytest.mark.parametrize(
    "value, problem", [(float("nan"), "NaN"), (float("inf"), "infinite"), (-1e30, r"out of range \(beyond \+-2\*\*53\)")]
)
@pytest.mark.parametrize("name", ["t.parquet", "t.csv"])
def test_unusable_times_name_the_row_in_both_file_types(tmp_path, name, value, problem):
    """A NaN, infinite or huge time is an error naming the file, row and column -- the
    same for Parquet and CSV (issue 26, finding 2), never an epoch count made of it."""
    path = write(tmp_path, [{"t": 1.0, "v": 1}, {"t": 2.0, "v": 2}, {"t": value, "v": 3}], name)
    row = 4 if name.endswith(".csv") else 3  # a CSV's header is row 1
    if name.endswith(".csv") and problem == "NaN":
        problem = "null"  # pyarrow reads a CSV's "nan" as a missing value
    reader = ts.io.csv if name.endswith(".csv") else ts.io.parquet
    with pytest.raises(SourceError, match=rf"{name}: row {row}, column 't': the time is {problem}"):
        read_all(reader(path, time="t"))


def test_unreadable_csv_rows_are_named(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("t,v\n1,a\n2,b,c\n")
    with pytest.raises(SourceError, match=r"ragged.csv: row 3: 3 fields, where the header has 2") as err:
        read_all(ts.io.csv(path, time="t"))
    assert "Expected 2 columns" in str(err.value.__cause__)  # pyarrow's message: the cause, not the message


# ---- the fast column conversions (issue 24 item 5) equal pyarrow's ----------------------------


@given(
    unit=st.sampled_from(["s", "ms", "us", "ns"]),
    tz=st.sampled_from([None, "UTC", "Europe/Paris"]),
    values=st.lists(st.none() | st.integers(-(2**62), 2**62) | st.integers(-(10**12), 10**12), max_size=30),
)
def test_column_values_are_what_pyarrow_gives(unit: str, tz: str | None, values: list) -> None:
    import pyarrow as pa

    from tstate.io.tables import column_values

    col = pa.array(values, pa.int64()).cast(pa.timestamp(unit, tz=tz))
    try:
        want = col.to_pylist()
    except (ValueError, OverflowError) as exc:  # beyond datetime: the same error, never other values
        with pytest.raises(type(exc)):
            column_values(col)
        return
    assert column_values(col) == want
    assert column_values(col, int_timestamps=True) == values


@given(names=st.lists(st.text(max_size=8), max_size=6), n=st.integers(0, 5))
def test_dict_rows_are_dict_zip(names: list[str], n: int) -> None:
    from tstate.io.tables import dict_rows

    cols = [[(i, j) for j in range(n)] for i in range(len(names))]
    assert dict_rows(tuple(names))(cols) == [dict(zip(names, vals)) for vals in zip(*cols)]


@given(
    unit=st.sampled_from([1, 1e3, 1e6, 1e9]),
    secs=st.sampled_from([1.0, 60.0, 3600.0, 0.5, 7.3, 86400.0]),
    ints=st.lists(st.integers(-(2**53), 2**53), max_size=30),
)
def test_vectorised_epochs_are_the_loops(unit: float, secs: float, ints: list[int]) -> None:
    import numpy as np

    got = np.floor_divide(np.array(ints, dtype=np.int64) / unit, secs).astype(np.int64).tolist()
    assert got == [int((v / unit) // secs) for v in ints]
