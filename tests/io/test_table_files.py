"""Reading table files with errors that say where (issue 26, finding 5): rows numbered
as a spreadsheet shows them, the bad value located by bisection as a value-by-value
scan would, unusable times as a plain loop finds them."""

from __future__ import annotations

import gzip
import math

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.errors import SourceError
from tstate.io.table_files import MAX_EXACT, TableFile, first_unconvertible, time_problems


def test_rows_are_numbered_as_a_spreadsheet_shows_them(tmp_path) -> None:
    assert TableFile.at("x.csv").row(0) == 2 and TableFile.at("x.csv", header=False).row(0) == 1
    assert TableFile.at("x.parquet").row(0) == 1 and not TableFile.at("x.parquet").csv
    assert TableFile.at("x.tsv").delimiter == "\t" and TableFile.at("x.csv.gz").csv
    # a quoted line break does not make two rows; a gzipped file is read too
    path = tmp_path / "q.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write('a,b\n1,"two\nlines"\n2,x,extra\n')
    with pytest.raises(SourceError, match=r"q.csv.gz: row 3: 3 fields, where the header has 2"):
        TableFile.at(path).read()
    headerless = tmp_path / "h.csv"
    headerless.write_text("1,2\n3\n")
    with pytest.raises(SourceError, match=r"h.csv: row 2: 1 fields, where the first row has 2"):
        TableFile.at(headerless, header=False).read()


def test_what_pyarrow_cannot_read_is_wrapped(tmp_path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(SourceError, match=r"junk.parquet: cannot read as Parquet: ") as err:
        TableFile.at(junk).read()
    assert isinstance(err.value.__cause__, pa.ArrowInvalid)
    with pytest.raises(SourceError, match=r"absent.csv: no such file"):
        TableFile.at(tmp_path / "absent.csv").read()


def test_a_type_that_never_converts_names_the_column() -> None:
    f = TableFile.at("t.parquet")
    with pytest.raises(SourceError, match=r"t.parquet: column 'd' has type bool, where a timestamp is expected"):
        f.typed(pa.chunked_array([[True]]), "d", pa.timestamp("us"), "a timestamp")
    assert f.typed(pa.chunked_array([[1.0, None, 3.0]]), "n", pa.int64(), "an integer").to_pylist() == [1, None, 3]


cells = st.one_of(st.none(), st.integers(-(10**6), 10**6).map(str), st.sampled_from(["x", "1.5", " 2", "", "1e3"]))


@given(st.lists(cells, max_size=40), st.integers(1, 4))
def test_the_first_bad_value_is_the_one_a_scan_finds(values: list, chunks: int) -> None:
    def converts(v: object) -> bool:
        try:
            pa.array([v], pa.string()).cast(pa.int64())
        except pa.ArrowInvalid:
            return False
        return True

    want = next((i for i, v in enumerate(values) if not converts(v)), None)
    n = len(values)
    parts = [values[i * n // chunks : (i + 1) * n // chunks] for i in range(chunks)]
    col = pa.chunked_array([pa.array(p, pa.string()) for p in parts], pa.string())
    assert first_unconvertible(col, pa.int64()) == want
    if want is not None:
        with pytest.raises(SourceError) as err:
            TableFile.at("v.csv").typed(col, "v", pa.int64(), "an integer", offset=10)
        assert str(err.value).startswith(f"v.csv: row {want + 12}, column 'v': {values[want]!r} is not an integer")


times = st.one_of(st.none(), st.floats(), st.sampled_from([2.0**53, -(2.0**53), 2.0**53 + 2, 1e300, -math.inf]))


@given(st.lists(times, max_size=30))
def test_unusable_times_are_the_ones_a_loop_finds(values: list) -> None:
    def reason(v: float | None) -> str | None:
        if v is None:
            return "missing"
        if math.isnan(v):
            return "not a number"
        if math.isinf(v):
            return "infinite"
        return "out of range" if abs(v) > MAX_EXACT else None

    bad, why = time_problems(pa.chunked_array([pa.array(values, pa.float64())], pa.float64()))
    assert bad.tolist() == [reason(v) is not None for v in values]
    assert {k: m.tolist() for k, m in why.items()} == {
        r: [reason(v) == r for v in values] for r in {reason(v) for v in values} - {None}
    }
    ints = [None, 5, 2**62, -(2**62), MAX_EXACT]
    bad, why = time_problems(pa.chunked_array([pa.array(ints, pa.int64())]))
    assert bad.tolist() == [True, False, True, True, False] and sorted(why) == ["missing", "out of range"]
