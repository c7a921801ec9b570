"""``python -m apps.cep`` end to end (``main([...])`` in process): the summary on the
bundled sample agrees with the hand-written baselines, the same counts on other worker
counts, from CSV, after a resume from a checkpoint; the progress bar stays on stderr;
bad input fails cleanly with the documented exit codes.  (``--backend spark``:
``test_spark.py``.)"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from apps.cep.__main__ import DEFAULT_INPUT, ensure_sample, main
from apps.cep.baseline import CascadeBaseline, RecoveryBaseline
from apps.cep.source import flight_source


def summary(out: str) -> dict[str, tuple[int, int, int, int]]:
    """pattern -> (matches, timeouts, late events, events) from the summary table and
    the line below it (both patterns are matched in one pass: one event count)."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\| (delay_cascade|recovery)\s*\|\s*([\d,]+) \|\s*([\d,]+) \|\s*([\d,]+) \|$", line)
        if m:
            rows[m.group(1)] = tuple(int(g.replace(",", "")) for g in m.groups()[1:])
    (events,) = re.findall(r"^both patterns in one pass: ([\d,]+) events in [\d.]+ s \([\d,]+ events/s\)$", out, re.M)
    return {k: (*v, int(events.replace(",", ""))) for k, v in rows.items()}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def baseline_counts(limit: int | None = None) -> dict[str, int]:
    r = flight_source(DEFAULT_INPUT, limit=limit).open()
    events = []
    while (b := r.next_batch()) is not None:
        events += b[1]
    counts = {}
    for name, cls in (("delay_cascade", CascadeBaseline), ("recovery", RecoveryBaseline)):
        states: dict = {}
        n = 0
        for f in events:
            st = states.setdefault(f.origin, cls())
            n += len(st.process(f, f.minute))
        n += sum(len(st.advance_time(10**12)) for st in states.values())
        counts[name] = n
    return counts


def test_default_run_on_the_bundled_sample(capsys) -> None:
    assert DEFAULT_INPUT.exists()
    code, out, err = run(capsys, "--no-progress")
    assert code == 0, err
    s = summary(out)
    want = baseline_counts()
    assert {k: v[0] for k, v in s.items()} == want
    assert all(v[2] == 0 and v[3] == 31_678 for v in s.values())
    assert s["delay_cascade"][1] > 0  # timed-out partial matches are reported
    assert "delay_cascade:" in out and "recovery:" in out and "events/s" in out
    # a few matches printed per pattern: "ATL  2001-01-01 00:14  first +32 (00:14) | rise ..."
    assert len(re.findall(r"^  \w{3}\s+2001-01-0\d \d\d:\d\d  first ", out, re.M)) == 5
    assert len(re.findall(r"^  \w{3}\s+2001-01-0\d \d\d:\d\d  delayed ", out, re.M)) == 5


def test_workers_limit_and_progress_bar(capsys) -> None:
    code, out1, err1 = run(capsys, "--limit", "6000")
    assert code == 0
    assert "flights" in err1 and "%" not in out1  # the bar is on stderr only
    code, out3, _ = run(capsys, "--limit", "6000", "--workers", "3", "--no-progress")
    assert code == 0
    s1, s3 = summary(out1), summary(out3)
    assert s1 == s3 and all(v[3] == 6000 for v in s1.values())
    assert {k: v[0] for k, v in s1.items()} == baseline_counts(6000)


def test_csv_input_and_late_events(tmp_path, capsys) -> None:
    table = pq.read_table(DEFAULT_INPUT).slice(0, 4000)
    path = tmp_path / "flights.csv"
    pcsv.write_csv(table, path)
    code, out, err = run(capsys, "--input", str(path), "--no-progress")
    assert code == 0, err
    code, out_pq, _ = run(capsys, "--limit", "4000", "--no-progress")
    assert summary(out) == summary(out_pq)
    # hour 1 arrives after hour 2: its rows are behind the watermark (the end of hour 1)
    rows = table.to_pylist()
    by_hour = [[r for r in rows if r["date"].hour == h] for h in range(24)]
    hour1 = by_hour[1]
    shuffled = pa.Table.from_pylist(by_hour[0] + by_hour[2] + hour1 + sum(by_hour[3:], []), schema=table.schema)
    path2 = tmp_path / "shuffled.parquet"
    pq.write_table(shuffled, path2)
    code, out, _ = run(capsys, "--input", str(path2), "--no-progress")
    assert code == 0
    s = summary(out)
    assert s["recovery"][2] == s["delay_cascade"][2] == len(hour1) > 0
    code, out, _ = run(capsys, "--input", str(path2), "--no-progress", "--lateness", "120")
    assert summary(out)["recovery"][2] == 0  # within the allowed lateness: matched


def test_resume_from_a_checkpoint(tmp_path, capsys) -> None:
    ck = tmp_path / "ck"
    code, full, _ = run(capsys, "--limit", "9000", "--checkpoint", str(ck), "--every", "2", "--no-progress")
    assert code == 0 and "checkpoints committed" in full
    code, out, _ = run(capsys, "--limit", "9000", "--checkpoint", str(ck), "--no-progress", "--workers", "2")
    assert code == 0
    assert "resumed from checkpoint" in out
    assert summary(out)["recovery"][3] < 9000  # only the rest of the input was read


def test_checkpoints_list_the_hours_they_stand_for(tmp_path, capsys) -> None:
    """The flight source records its epoch unit in the checkpoints: ``python -m tstate
    checkpoints`` shows ``2001-01-01 08:00`` for epoch 271760 (was the raw epoch only)."""
    from tstate.__main__ import main as cli

    ck = tmp_path / "ck"
    assert main(["--limit", "6000", "--checkpoint", str(ck), "--every", "4", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli(["checkpoints", str(ck), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(r["time"] == f"2001-01-01 {int(r['epoch']) - 271752:02d}:00" for r in rows)


def write_table(path: Path, columns: dict) -> Path:
    table = pa.table(columns)
    if path.suffix == ".csv":
        pcsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


DATES = pa.array([0, 60, 120], pa.timestamp("s"))


#: (file name, columns, error message): also run with --backend spark (test_spark.py)
BAD_INPUTS = [
    ("nodelay.parquet", {"date": DATES, "origin": ["A", "A", "B"]}, r"nodelay\.parquet: no column 'delay'"),
    (
        "null.csv",
        {"date": DATES, "delay": pa.array([1, None, 3], pa.int64()), "origin": ["A", "A", "B"]},
        r"null\.csv: row 3, column 'delay': is null",
    ),
    (
        "nullorigin.parquet",
        {"date": DATES, "delay": [1, 2, 3], "origin": ["A", "B", None]},
        r"nullorigin\.parquet: row 3, column 'origin': is null",
    ),
    (
        "text.csv",
        {"date": DATES, "delay": ["1", "x", "3"], "origin": ["A", "A", "B"]},
        r"text\.csv: row 3, column 'delay': 'x' is not an integer",
    ),
    (
        "nodate.parquet",
        {"date": pa.array([0, None, 2], pa.timestamp("s")), "delay": [1, 2, 3], "origin": ["A", "A", "B"]},
        r"nodate\.parquet: row 2, column 'date': is null",
    ),
    (  # a fraction where integers are expected (pyarrow reads the column as doubles)
        "fraction.parquet",
        {"date": DATES, "delay": [1.0, 2.0, 2.5], "origin": ["A", "A", "B"]},
        r"fraction\.parquet: row 3, column 'delay': 2\.5 is not an integer",
    ),
    (  # a number is no departure time
        "numberdate.parquet",
        {"date": [1.0, 2.0, 3.0], "delay": [1, 2, 3], "origin": ["A", "A", "B"]},
        r"numberdate\.parquet: column 'date' has type double, expected timestamps or dates",
    ),
    *(  # a header-only CSV (was "column 'date' has type null") or an empty parquet file
        (
            f"empty.{ext}",
            {"date": pa.array([], pa.timestamp("s")), "delay": pa.array([], pa.int64()), "origin": pa.array([], pa.string())},
            rf"empty\.{ext}: no rows \(columns: date, delay, origin\)",
        )
        for ext in ("csv", "parquet")
    ),
]


@pytest.mark.parametrize("name, columns, message", BAD_INPUTS)
def test_bad_input_is_a_clear_error(tmp_path, capsys, name, columns, message) -> None:
    path = write_table(tmp_path / name, columns)
    code, out, err = run(capsys, "--input", str(path), "--no-progress")
    assert code == 1
    assert re.search(message, err), err
    assert "Traceback" not in err


HEADER = "date,delay,origin\n2001-01-01 10:00:00,5,ATL\n"

#: (file name, content, error message): CSV rows pyarrow cannot read or type; the row as
#: a spreadsheet shows it (the header is row 1), never pyarrow's message alone
BAD_CSV = [
    ("ragged.csv", HEADER + "2001-01-01 10:01:00,6,ATL,extra\n", r"ragged\.csv: row 3: 4 fields, where the header has 3"),
    ("short.csv", HEADER * 1 + "2001-01-01 10:01:00,6,ATL\n2001-01-01 10:02:00,7\n",
     r"short\.csv: row 4: 2 fields, where the header has 3"),
    ("utf8.csv", HEADER.encode() + b"2001-01-01 10:01:00,6,A\xffX\n",
     r"utf8\.csv: row 3, column 'origin': b'A\\xffX' is not valid UTF-8"),
    ("baddelay.csv", HEADER + "2001-01-01 10:01:00,abc,ATL\n", r"baddelay\.csv: row 3, column 'delay': 'abc' is not an integer"),
    ("baddate.csv", HEADER + "2001-13-01 10:01:00,6,ATL\n",
     r"baddate\.csv: row 3, column 'date': '2001-13-01 10:01:00' is not a timestamp or a date"),
    ("big.csv", HEADER + '2001-01-01 10:01:00,6,"' + "x" * 600_000 + '"\n',
     r"big\.csv: row 3, column 'origin': a field of 600,000 characters, larger than the CSV reader's blocks "
     r"\(262,144 bytes\)"),
]  # fmt: skip


@pytest.mark.parametrize("name, content, message", BAD_CSV)
def test_unreadable_csv_rows_are_named(tmp_path, capsys, monkeypatch, name, content, message) -> None:
    import tstate.io.table_files

    monkeypatch.setattr(tstate.io.table_files, "BLOCK_BYTES", 256 << 10)  # (a 16 MiB field, smaller)
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = run(capsys, "--input", str(path), "--no-progress")
    assert code == 1 and re.search(message, err), err
    assert "Traceback" not in err and "straddl" not in err


def test_a_far_future_row_costs_nothing_proportional_to_the_gap(tmp_path, capsys) -> None:
    """One departure dated 9999 among 2,000 (issue 26, finding 3: 50 s, for a walk over
    the 70 million hourly epochs in between): as fast as without it."""
    import time

    rows = pq.read_table(DEFAULT_INPUT).slice(0, 2000).to_pylist()
    paths = []
    for year in (2001, 9999):
        path = tmp_path / f"gap{year}.csv"
        with open(path, "w") as f:
            f.write("date,delay,distance,origin,destination\n")
            for i, r in enumerate(rows):
                d = r["date"].replace(year=year) if i == 1000 else r["date"]
                f.write(f"{d:%Y-%m-%d %H:%M:%S},{r['delay']},{r['distance']},{r['origin']},{r['destination']}\n")
        paths.append(path)
    seconds = []
    for path in paths:
        t0 = time.perf_counter()
        code, out, err = run(capsys, "--input", str(path), "--no-progress", "--lateness", "60")
        seconds.append(time.perf_counter() - t0)
        assert code == 0, err
    plain, gap = seconds
    assert gap < max(1.0, 3 * plain), seconds
    assert summary(out)["recovery"][2] == 999  # after the jump to 9999 the rest is late


@pytest.mark.parametrize("case", ["absent", *(c[0] for c in BAD_INPUTS[:3])])
def test_spark_checks_the_input_before_it_starts(tmp_path, capsys, monkeypatch, case) -> None:
    """``--backend spark`` with a bad input fails as the embedded run does, before
    anything of Spark is loaded (was: Spark first, "no such file" after 8.6 s)."""
    import tstate.spark.session

    def no_spark() -> None:
        raise AssertionError("Spark was started before the input was checked")

    monkeypatch.setattr(tstate.spark.session, "require_pyspark", no_spark)
    if case == "absent":
        path, message = tmp_path / "absent.parquet", r"absent\.parquet: no such file"
    else:
        name, columns, message = next(c for c in BAD_INPUTS if c[0] == case)
        path = write_table(tmp_path / name, columns)
    code, _, err = run(capsys, "--input", str(path), "--no-progress", "--backend", "spark")
    assert code == 1 and re.search(message, err), err


def test_missing_and_unreadable_files(tmp_path, capsys) -> None:
    code, _, err = run(capsys, "--input", str(tmp_path / "absent.parquet"), "--no-progress")
    assert code == 1 and "absent.parquet: no such file" in err
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    code, _, err = run(capsys, "--input", str(junk), "--no-progress")
    assert code == 1 and "junk.parquet: cannot read" in err and "Traceback" not in err


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--workers", "0"])
    assert exc.value.code == 2
    assert "--workers must be >= 1" in capsys.readouterr().err
    for bad in ("90s", "soon"):  # a bad option value is a usage error too (was exit 1)
        with pytest.raises(SystemExit) as exc:
            main(["--epoch", bad])
        assert exc.value.code == 2
        assert f"--epoch: epoch '{bad}'" in capsys.readouterr().err


def test_help_says_what_workers_are_for_and_the_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "logical tstate workers, all in this one process" in text
    assert "same results on any count" in text and "for parallel speed use --backend spark" in text
    assert "exit status: 0 success; 1 bad input data or a runtime error" in text and "2 a usage error" in text


def test_the_summary_times_one_pass_not_each_pattern(capsys) -> None:
    """Both patterns run in one dataflow over one pass of the input: the summary gives
    one time and rate for the run, not the same figures repeated per pattern."""
    code, out, _ = run(capsys, "--limit", "3000", "--no-progress")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("| pattern"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["pattern", "matches", "timeouts", "late events"]
    assert len(re.findall(r"events/s", out)) == 1
    assert summary(out)["recovery"][3] == 3000


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_file_without_rows_says_no_rows(tmp_path, capsys, suffix) -> None:
    path = tmp_path / f"empty{suffix}"
    table = pq.read_table(DEFAULT_INPUT).slice(0, 0)
    pcsv.write_csv(table, path) if suffix == ".csv" else pq.write_table(table, path)
    code, out, err = run(capsys, "--input", str(path), "--no-progress")
    assert code == 1  # was "column 'date' has type null" for the CSV
    assert err == f"error: {path}: no rows (columns: date, delay, distance, origin, destination)\n"


def test_ensure_sample_writes_the_first_two_days(tmp_path) -> None:
    dates = pa.array([d * 86_400 + 60 * i for d in range(3) for i in range(5)], pa.timestamp("s"))
    src = write_table(
        tmp_path / "big.parquet",
        {"date": dates, "delay": list(range(15)), "distance": [1] * 15, "origin": ["A"] * 15, "destination": ["B"] * 15},
    )
    out = ensure_sample(tmp_path / "data" / "sample.parquet", source=src)
    assert pq.read_table(out).num_rows == 10
    assert ensure_sample(out, source=tmp_path / "absent.parquet") == out  # present: kept


def output_files(directory: Path) -> dict[str, bytes]:
    """Every committed output file (relative path -> its bytes: ``ts.io.files`` sorts
    an epoch's lines, so they do not depend on workers or resumes); half-written
    ``.tmp`` files are ignored."""
    return {str(f.relative_to(directory)): f.read_bytes() for f in sorted(directory.rglob("*.jsonl"))}


def test_rerun_from_a_finished_checkpoint_rewrites_byte_identical_files(tmp_path, capsys) -> None:
    """Re-running ``--checkpoint ck --output out`` after it finished resumes from its
    last checkpoint and rewrites the epochs after it (timeouts fired from restored
    state, in another order than the first run's): the files stay byte-identical, and
    equal those of a run on 3 workers."""
    args = ["--limit", "20000", "--every", "4", "--no-progress", "--output", str(tmp_path / "out")]
    assert main([*args, "--checkpoint", str(tmp_path / "ck")]) == 0
    first = output_files(tmp_path / "out")
    assert len(first) > 50
    stamps = {f: f.stat().st_mtime_ns for f in (tmp_path / "out").rglob("*.jsonl")}
    assert main([*args, "--checkpoint", str(tmp_path / "ck")]) == 0
    assert "resumed from checkpoint" in capsys.readouterr().out
    rewritten = [f for f, ns in stamps.items() if f.stat().st_mtime_ns != ns]
    assert len(rewritten) >= 2  # the epochs after the last checkpoint were written again
    assert output_files(tmp_path / "out") == first
    args[-1] = str(tmp_path / "out3")
    assert main([*args, "--workers", "3"]) == 0
    assert output_files(tmp_path / "out3") == first


@pytest.mark.parametrize("delay", [0.05, 0.7])
def test_sigkilled_app_resumes_to_exactly_the_uninterrupted_output(tmp_path, capsys, delay) -> None:
    """SIGKILL ``python -m apps.cep --checkpoint --output`` ``delay`` seconds after its
    first checkpoint is committed, resume it (on another worker count): the JSON output equals an
    uninterrupted run's, file for file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tstate.checkpoint.store import CheckpointStore

    root = Path(__file__).resolve().parents[3]
    args = ["--limit", "20000", "--every", "1", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "ref")]) == 0
    ck, out = tmp_path / "ck", tmp_path / "out"
    cmd = [sys.executable, "-m", "apps.cep", *args, "--checkpoint", str(ck), "--output", str(out), "--workers", "2"]
    p = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if ck.exists() and CheckpointStore(str(ck)).manifests():
            time.sleep(delay)
            break
        time.sleep(0.02)
    killed = p.poll() is None
    if killed:
        os.kill(p.pid, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert p.returncode in ((-signal.SIGKILL,) if killed else (0,)), err
    capsys.readouterr()
    assert main([*args, "--checkpoint", str(ck), "--output", str(out), "--workers", "3"]) == 0
    resumed = capsys.readouterr().out
    if killed:
        assert "resumed from checkpoint" in resumed
    ref = output_files(tmp_path / "ref")
    assert len(ref) > 50
    assert output_files(out) == ref
