"""The edge file reader's bad rows (issue 26, findings 2 and 6): unusable times are
invalid rows the same way for CSV and parquet -- counted by reason, or with
``--strict`` an error naming the file, row and column -- never a bogus epoch count;
control characters in ids are invalid rows; the app's last line says what it ignored."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from apps.graph.__main__ import main
from apps.graph.edges import GraphInputError
from apps.graph.io import MAX_EPOCHS, EdgeFile


def write(tmp_path, name: str, columns: dict) -> str:
    path = tmp_path / name
    table = pa.table(columns)
    pcsv.write_csv(table, path) if name.endswith(".csv") else pq.write_table(table, path)
    return str(path)


GOOD = [0.0, 1.0, 2.0]
CASES = [  # (bad time, reason): issue 26's cases
    (math.nan, "time not a number"),
    (math.inf, "time infinite"),
    (1e30, "time out of range"),
    (-math.inf, "time infinite"),
]


@pytest.mark.parametrize("kind", ["parquet", "csv"])
@pytest.mark.parametrize("bad, reason", CASES)
def test_unusable_float_times_are_invalid_rows(tmp_path, kind, bad, reason) -> None:
    path = write(tmp_path, f"e.{kind}", {"src": ["a", "b", "c", "d"], "dst": ["b", "c", "d", "a"], "time": [*GOOD, bad]})
    if kind == "csv" and math.isnan(bad):
        reason = "missing time"  # pyarrow reads a CSV's "nan" as a missing value: invalid all the same
    f = EdgeFile(path)
    assert (f.invalid, f.invalid_by, f.epochs, f.rows) == (1, {reason: 1}, 3, 3)
    row = 5 if kind == "csv" else 4
    with pytest.raises(GraphInputError, match=rf"e\.{kind}: row {row}, column 'time': {reason}$"):
        EdgeFile(path, on_invalid="raise")


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_integer_times_beyond_2_53_are_invalid_not_an_overflow(tmp_path, kind) -> None:
    # +-2**62: "vals - lo" overflowed int64 and the file said "1 epochs"
    path = write(tmp_path, f"e.{kind}", {"src": ["a", "b", "c", "d"], "dst": ["b", "c", "d", "a"],
                                         "time": [2**62, 0, 5, -(2**62)]})  # fmt: skip
    f = EdgeFile(path)
    assert (f.invalid_by, f.epochs, [e for e, _ in f.batches()]) == ({"time out of range": 2}, 6, [0, 5])
    with pytest.raises(GraphInputError, match=r"spans? 1,000,001 epochs .*use a longer --epoch"):
        EdgeFile(write(tmp_path, f"far.{kind}", {"src": ["a", "b"], "dst": ["b", "c"], "time": [0, MAX_EPOCHS]}))


def test_control_characters_in_ids_and_fractional_deltas_are_invalid_rows(tmp_path) -> None:
    p = tmp_path / "e.csv"
    p.write_bytes(b"src,dst,delta\na,b,1\nc\x00x,d,1\ne,f\x07,1\ng,h,1.5\ni,j,2\n")
    f = EdgeFile(p)
    assert f.invalid_by == {"control character in src": 1, "control character in dst": 1, "delta not an integer": 1}
    assert [r for _, rs in f.batches() for r in rs] == [("a", "b", 1), ("i", "j", 2)]
    with pytest.raises(GraphInputError, match=r"e\.csv: row 3, column 'src': control character in src$"):
        EdgeFile(p, on_invalid="raise")


def test_the_app_counts_what_it_does_not_apply_by_reason(tmp_path, capsys) -> None:
    # A,B,0,-1 retracts an edge never inserted; C,D,1,-5 retracts 5 of 2 occurrences; a NUL in
    # an id; an infinite time.  With a window, an insertion retracted early expires without
    # a row: not counted.
    p = tmp_path / "e.csv"
    p.write_bytes(
        b"src,dst,time,delta\nA,B,0,-1\nC,D,0,2\nC,D,1,-5\nE,F,1,1\nE,F,2,-1\nX\x00,Y,2,1\nG,H,inf,1\nI,J,3,1\n"
    )
    assert main(["--input", str(p), "--window", "2", "--no-progress", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert (
        "ignored: 0 self-loops, 0 zero deltas, 4 retracted occurrences of absent edges, 2 invalid rows "
        "(1 control character in src, 1 time infinite)" in out
    ), out
    assert main(["--input", str(p), "--strict", "--no-progress", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {p}: row 7, column 'src': control character in src"), err
