"""apps.cep.footer: a Parquet file's row groups from its footer equal what a pass over
its rows gives (rows, the largest epoch per row group, in file order), and a footer that
cannot stand in for that pass (nulls in a required column, no statistics, an unmapped
type, not a file) gives None."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.cep.footer import read_footer
from apps.cep.source import COLUMNS, REQUIRED

BASE = dt.datetime(2001, 1, 1)


@settings(max_examples=25, deadline=None)
@given(
    minutes=st.lists(st.integers(-3000, 3000), min_size=1, max_size=60),
    group=st.integers(1, 9),
    epoch=st.sampled_from([1, 60, 90]),
    tz=st.booleans(),
)
def test_row_groups_match_a_pass_over_the_rows(tmp_path_factory, minutes, group, epoch, tz) -> None:
    path = tmp_path_factory.mktemp("f") / "t.parquet"
    dates = pa.array([BASE + dt.timedelta(minutes=m, seconds=30) for m in minutes], pa.timestamp("us", "UTC" if tz else None))
    n = len(minutes)
    pq.write_table(pa.table({"date": dates, "delay": list(range(n)), "origin": ["A"] * n}), path, row_group_size=group)
    f = read_footer(str(path), COLUMNS, REQUIRED, epoch)
    assert f is not None
    assert f.types == {"date": "timestamp" if tz else "timestamp_ntz", "delay": "bigint", "origin": "string"}
    chunks = [minutes[i : i + group] for i in range(0, n, group)]
    base = int((BASE - dt.datetime(1970, 1, 1)).total_seconds() // 60)
    assert f.rows == tuple(len(c) for c in chunks) and f.total == n
    assert f.tops == tuple(max((base + m) // epoch for m in c) for c in chunks)
    assert list(f.midpoints) == sorted(f.midpoints)
    # a split holding every row group: the whole file; one past the end: nothing
    assert f.split(0, 1 << 40) == (0, None, n)
    assert f.split(1 << 40, 10)[::2] == (n, 0)


def test_footers_that_cannot_stand_in_for_a_pass(tmp_path: Path) -> None:
    good = {"date": [BASE], "delay": [1], "origin": ["A"]}
    for name, cols in (
        ("null.parquet", {**good, "delay": pa.array([None], pa.int64())}),
        ("float.parquet", {**good, "delay": [1.5]}),
        ("nodate.parquet", {"delay": [1], "origin": ["A"]}),
    ):
        pq.write_table(pa.table(cols), tmp_path / name)
        assert read_footer(str(tmp_path / name), COLUMNS, REQUIRED, 60) is None, name
    pq.write_table(pa.table(good), tmp_path / "nostats.parquet", write_statistics=False)
    assert read_footer(str(tmp_path / "nostats.parquet"), COLUMNS, REQUIRED, 60) is None
    (tmp_path / "junk.parquet").write_bytes(b"junk")
    assert read_footer(str(tmp_path / "junk.parquet"), COLUMNS, REQUIRED, 60) is None
    assert read_footer(str(tmp_path), COLUMNS, REQUIRED, 60) is None
    pq.write_table(pa.table({**good, "date": pa.array([BASE.date()])}), tmp_path / "day.parquet")
    f = read_footer(str(tmp_path / "day.parquet"), COLUMNS, REQUIRED, 60)
    assert f is not None and f.types["date"] == "date" and f.tops == ((BASE - dt.datetime(1970, 1, 1)).days * 24,)
