"""The app (``python -m apps.graph``), its input reader, and the bundled data."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow.parquet as pq

import pytest

from apps.graph.__main__ import DEFAULT_INPUT, DEFAULT_NAMES, load_names, main
from apps.graph.edges import GraphInputError
from apps.graph.io import EdgeFile, parse_duration
from apps.graph.views import GraphView, InconsistentChange, View

ROOT = Path(__file__).resolve().parents[3]


def test_bundled_data_is_the_first_two_days():
    t = pq.read_table(DEFAULT_INPUT)
    assert t.column_names == ["date", "delay", "distance", "origin", "destination"]
    assert 0 < t.num_rows <= 50_000
    dates = t.column("date").to_pylist()
    assert dates == sorted(dates) and dates[-1] < dt.datetime(2001, 1, 3)
    names = load_names(DEFAULT_NAMES)
    assert names["ATL"].startswith("William B Hartsfield")
    assert set(t.column("origin").to_pylist()) <= set(names)


def test_reader_cuts_timestamps_into_epochs(tmp_path):
    f = EdgeFile(DEFAULT_INPUT)
    assert (f.epochs, f.invalid, f.time_kind) == (48, 0, "timestamp")
    assert f.label(0) == "2001-01-01 00:00" and f.label(47) == "2001-01-02 23:00"
    batches = list(f.batches(limit=2))
    assert [e for e, _ in batches] == [0, 1] and batches[0][1][0] == ("LAS", "PHL", 1)
    two_hours = EdgeFile(DEFAULT_INPUT, epoch="2h")
    assert two_hours.epochs == 24 and two_hours.rows == f.rows


def test_reader_csv_forms(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("Source,Target,Time,delta\na,b,5,1\nb,c,3,1\na,b,5.5,-1\n")
    f = EdgeFile(p, epoch_size=1)
    assert f.time_kind == "number" and list(f.batches()) == [(0, [("b", "c", 1)]), (2, [("a", "b", 1), ("a", "b", -1)])]
    p.write_text("1,2\n2,3\n3,1\n4,4\n")  # headerless, integer ids, no time: rows per epoch
    f = EdgeFile(p, rows_per_epoch=2)
    assert list(f.batches()) == [(0, [(1, 2, 1), (2, 3, 1)]), (1, [(3, 1, 1), (4, 4, 1)])]


def test_reader_bad_input(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("src,dst\na,b\n,c\nd,\ne,f\n")
    f = EdgeFile(p)
    assert f.invalid == 2 and [r for _, rs in f.batches() for r in rs] == [("a", "b", 1), ("e", "f", 1)]
    with pytest.raises(GraphInputError, match=r"e.csv: row 3, column 'src': missing src$"):  # the header is row 1
        EdgeFile(p, on_invalid="raise")
    p.write_text("src,dst\n1.5,2\n")
    with pytest.raises(GraphInputError, match="strings or integers"):
        EdgeFile(p)
    p.write_text("x,y,z,w,v\n1,2,3,4,5\n")
    with pytest.raises(GraphInputError):
        EdgeFile(p)
    with pytest.raises(GraphInputError, match="no such file"):
        EdgeFile(tmp_path / "missing.csv")
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert parse_duration("90m") == dt.timedelta(minutes=90)


def test_app_on_a_small_csv(tmp_path, capsys):
    p = tmp_path / "edges.csv"
    # epoch 0: a triangle and a self-loop (ignored); epoch 1: a duplicate, a retraction of an
    # absent edge (ignored) and a row with a missing id (skipped); epoch 2: one edge retracted
    p.write_text("src,dst,time,delta\na,b,0,1\nb,c,0,1\nc,a,0,1\nd,d,0,1\na,b,1,1\nx,y,1,-1\n,b,1,1\nb,c,2,-1\n")
    assert main(["--input", str(p), "--window", "0", "--no-progress", "--top", "2", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("t=")]
    assert len(lines) == 3
    assert "vertices    3  edges     3  components   1 (largest    3)  triangles      1" in lines[0]
    assert "edges     2" in lines[2] and "triangles      0" in lines[2]
    assert (
        "ignored: 1 self-loops, 0 zero deltas, 1 retracted occurrences of absent edges, 1 invalid rows (1 missing src)"
        in out
    )


def test_app_default_run_for_a_few_epochs(capsys):
    assert main(["--epochs", "3", "--workers", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2001-01-01 02:00" in out and "3 epochs" in out
    assert "Hartsfield" in out or "O'Hare" in out or "International" in out


def test_app_quiet_and_errors(tmp_path, capsys):
    assert main(["--epochs", "2", "--quiet"]) == 0
    assert capsys.readouterr().out.count("\n") == 1
    assert main(["--input", str(tmp_path / "none.parquet")]) == 1  # bad data: 1
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # a usage error: 2
        main(["--workers", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--epoch", "soon"])
    assert e.value.code == 2 and "--epoch: bad duration 'soon'" in capsys.readouterr().err


def _flights_csv(path: Path, columns: list[str], rows: int = 20) -> Path:
    import pyarrow.csv as pcsv

    pcsv.write_csv(pq.read_table(DEFAULT_INPUT, columns=columns).slice(0, rows), path)
    return path


@pytest.mark.parametrize(
    "text, missing, has",
    [
        ("src,weight\na,1\nb,2\n", "destination", "src, weight"),  # was read as 3 headerless edges
        ("weight,dst\n1,a\n", "source", "weight, dst"),
        ("foo,bar\n1,2\n3,4\n", "source", "foo, bar"),  # a header: 'foo' is no integer
        (None, "destination", "date, delay, distance, origin"),  # was "column 'delta' has type string"
    ],
)
def test_an_unknown_layout_names_the_file_and_the_missing_column(tmp_path, capsys, text, missing, has):
    p = tmp_path / "in.csv"
    if text is None:
        _flights_csv(p, ["date", "delay", "distance", "origin"])
    else:
        p.write_text(text)
    with pytest.raises(GraphInputError) as e:
        EdgeFile(p)
    assert str(e.value) == (
        f"{p}: no {missing} column (one of "
        + ("src, source, origin, from, u" if missing == "source" else "dst, target, destination, to, v")
        + f"); the file has: {has}"
    )
    assert main(["--input", str(p), "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert cap.err == f"error: {e.value}\n" and cap.out == ""


def test_headerless_lists_are_still_read(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("a,b\nb,c\n")  # strings: no cell tells a header
    assert list(EdgeFile(p).batches()) == [(0, [("a", "b", 1), ("b", "c", 1)])]
    p.write_text("1,2,5\n2,3,7\n")  # numbers under numbers: data
    assert list(EdgeFile(p).batches()) == [(0, [(1, 2, 1)]), (2, [(2, 3, 1)])]


@pytest.mark.parametrize("kind", ["header-only csv", "flights header-only csv", "empty parquet"])
def test_a_file_without_rows_says_so(tmp_path, capsys, kind):
    if kind == "header-only csv":
        p = tmp_path / "e.csv"
        p.write_text("src,dst,time\n")
    elif kind == "flights header-only csv":
        p = _flights_csv(tmp_path / "f.csv", ["date", "delay", "distance", "origin", "destination"], rows=0)
    else:
        p = tmp_path / "e.parquet"
        pq.write_table(pq.read_table(DEFAULT_INPUT).slice(0, 0), p)
    with pytest.raises(GraphInputError, match=f"^{p}: no rows "):  # was "column 'src' has type null"
        EdgeFile(p)
    assert main(["--input", str(p), "--no-progress"]) == 1
    assert f"{p}: no rows" in capsys.readouterr().err


def test_help_says_what_workers_are_for_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "logical tstate workers, all in this one process" in text
    assert "same results on any count" in text and "for parallel speed use --backend spark" in text
    assert "exit status: 0 success; 1 bad input data or a runtime error" in text and "2 a usage error" in text


def test_spark_backend_prints_the_same_epochs_as_the_embedded_engine(spark, capsys):
    """``--backend spark`` runs the same dataflow on Spark (loops in rounds, the window's
    expiries held across micro-batches): the printed epochs equal the embedded run's."""
    args = ["--epochs", "2", "--tol", "1e-3", "--window", "1", "--no-progress"]
    assert main(args) == 0
    embedded = capsys.readouterr().out.splitlines()
    assert main([*args, "--backend", "spark", "--partitions", "2"]) == 0
    spark = capsys.readouterr().out.splitlines()
    epochs = lambda lines: [ln for ln in lines if not ln.startswith(("flights-sample", "2 epochs"))]  # noqa: E731
    assert epochs(spark) == epochs(embedded) and len(epochs(spark)) == 22
    # the last line says what ran (issue 24: it said "0 loop rounds (0 per epoch; 0 Spark stages)")
    last = spark[-1]
    # one micro-batch: the last cut also closes the input (no closing batch of its own)
    assert re.search(r"1 micro-batch of 2 partitions, [1-9]\d* Spark stages \([1-9]\d* tasks\), no loop rounds", last)
    assert "0 loop rounds" not in last and "0 Spark stages" not in last
    assert not re.search(r"median 0\.00 s per epoch", last)  # the closing batch's epochs are counted


def test_spark_summary_names_the_loop_rounds_when_there_are_any():
    from tstate.metrics import BatchMetrics

    from apps.graph.__main__ import spark_summary

    b = [BatchMetrics(0, 4, 2.0, 2, 10, 0, 0, 0, 0, loop_rounds=12, loop_stages=1, stages=3)]
    line = spark_summary(b, 4, 10, 2.5)
    assert "1 micro-batch of 2 partitions, 3 Spark stages (6 tasks), 12 loop rounds (3.0 per epoch)" in line
    assert line.endswith("in 1 more Spark stages; median 0.50 s per epoch")


def test_views_check_every_change():
    v = View("x")
    v.apply([("a", None, 1), ("a", 1, 2)])
    with pytest.raises(InconsistentChange):
        v.apply([("a", 1, 3)])
    g = GraphView()
    g.apply(0, {"triangle_total": [("triangles", 0, 2)], "summary": [(1, 3)]})
    assert (g.triangle_total, g.component_count(), g.largest_component()) == (2, 1, 3)
    with pytest.raises(InconsistentChange):
        g.apply(1, {"triangle_total": [("triangles", 1, 2)]})
    with pytest.raises(KeyError):
        g.apply(1, {"nope": [1]})
