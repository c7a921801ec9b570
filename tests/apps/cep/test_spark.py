"""The CEP app on Spark (``--backend spark``, :mod:`apps.cep.spark_source`) computes
exactly what it computes on the embedded engine: every match, timeout and late event of
both patterns, per key and epoch (in the same order within a key and epoch), on a real
slice of the bundled sample and on hypothesis-generated flight tables with out-of-order
rows (plus a generated pattern over the same events), on 1-3 partitions and 1-2 epochs
per micro-batch; the Spark frame stamps rows with the embedded source's epochs; the CLI
(``main([... "--backend", "spark"])``, reusing the test session) prints the embedded
summary, writes the same ``--output`` files, resumes from its ``--checkpoint`` and
reports bad input like the embedded run.

Every Spark micro-batch costs about a second (more on a loaded machine): the inputs span
few epochs."""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import SourceError
from apps.cep.__main__ import DEFAULT_INPUT, build, main
from apps.cep.dataflow import cep
from apps.cep.source import flight_source
from apps.cep.spark_source import COLUMNS, flight_event, flight_frame, spark_source
from tests.apps.cep.strategies import KINDS, pattern_specs
from tests.apps.cep.test_app import BAD_INPUTS, output_files, summary, write_table

pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")

#: rows 4237..8027 of the sample: 11:00-14:59 on 2001-01-01, four busy hourly epochs
SLICE = (4237, 8028)

Outputs = dict[str, dict[tuple[int, Any], list[Any]]]
Extra = Callable[[ts.Dataflow, Any], dict[str, Any]]


def grouped(ops: dict[str, Any]) -> dict[str, Outputs]:
    """name -> output ("matches", "timeouts", "late") -> (epoch, key) -> values in
    arrival order, from the :meth:`CepStreams.collect` sinks ``ops``."""
    out: dict[str, Outputs] = {}
    for name, sinks in ops.items():
        out[name] = {}
        for what, sink in zip(("matches", "timeouts", "late"), sinks):
            g: dict[tuple[int, Any], list[Any]] = {}
            for t, (k, v) in sink.items:
                g.setdefault((t, k), []).append(v)
            out[name][what] = g
    return out


def flow_on(flights: Any, flow: ts.Dataflow, epoch_minutes: int, lateness: int, extra: Extra | None) -> dict[str, Any]:
    _, ops = build(flow, flights, epoch_minutes=epoch_minutes, lateness=lateness, show=0)
    if extra is not None:
        ops.update(extra(flow, flights))
    return {name: o.collect() for name, o in ops.items()}


def embedded(path: Path, *, epoch: str = "1h", lateness: int = 0, workers: int = 1, extra: Extra | None = None) -> dict[str, Outputs]:
    source = flight_source(path, epoch=epoch)
    flow = ts.Dataflow("cep-flights")
    sinks = flow_on(flow.source(source, name="flights"), flow, source.epoch_minutes, lateness, extra)
    flow.run(workers=workers)
    return grouped(sinks)


def on_spark(
    spark: Any, path: Path, checkpoint: str, *, partitions: int, epoch: str = "1h", lateness: int = 0,
    epochs_per_batch: int = 1, extra: Extra | None = None, reconfigure: Any = (),
) -> tuple[dict[str, Outputs], Any]:  # fmt: skip
    from tstate.spark import Backend

    frame = flight_frame(spark, path, epoch=epoch).cache()
    try:
        flow = ts.Dataflow("cep-flights")
        flights = flow.input("flights").map(flight_event, name="flights.events")
        minutes = {"1h": 60, "2h": 120}[epoch]
        sinks = flow_on(flights, flow, minutes, lateness, extra)
        backend = Backend(spark, checkpoint=checkpoint, partitions=partitions)
        backend.run(flow, {"flights": spark_source(frame)}, epochs_per_batch=epochs_per_batch, reconfigure=reconfigure)
    finally:
        frame.unpersist()
    return grouped(sinks), backend


def total(out: dict[str, Outputs], name: str, what: str) -> int:
    return sum(len(v) for v in out[name][what].values())


@pytest.fixture(scope="module")
def sample_slice(tmp_path_factory: Any) -> Path:
    path = tmp_path_factory.mktemp("slice") / "slice.parquet"
    pq.write_table(pq.read_table(DEFAULT_INPUT).slice(SLICE[0], SLICE[1] - SLICE[0]), path)
    return path


# -- the frame --------------------------------------------------------------------------------


def test_frame_stamps_rows_as_the_embedded_source(spark: Any, tmp_path: Path) -> None:
    """minute and epoch per row, in file order: seconds floored, a row behind the epoch
    reached stamped with that epoch; a date column, CSV (also in the CLI test); the
    frame's columns are the Source's."""
    base = dt.datetime(2001, 1, 1, 10, 0)
    mins = [0, 59, 61, 30, 125, 119, 181, -1]
    dates = [base + dt.timedelta(minutes=m, seconds=45 if m % 2 else 0) for m in mins]
    cols = {"date": dates, "delay": list(range(len(mins))), "origin": ["A", "B"] * 4}
    for name, epochs in (("t.parquet", ("1h", "2h")), ("t.csv", ("1h",))):
        path = write_table(tmp_path / name, cols)
        for epoch in epochs:
            src = flight_source(path, epoch=epoch).open()
            want = []
            while (b := src.next_batch()) is not None:
                want += [(b[0], f) for f in b[1]]
            got = [(r["epoch"], flight_event(r.asDict())) for r in flight_frame(spark, path, epoch=epoch).collect()]
            assert got == want, (name, epoch)
            assert [e for e, _ in got][3] == [e for e, _ in got][2]  # out of order: the epoch reached
    frame = flight_frame(spark, write_table(tmp_path / "d.parquet", {**cols, "date": pa.array([d.date() for d in dates])}))
    assert {r["minute"] for r in frame.collect()} == {(base.date() - dt.date(1970, 1, 1)).days * 1440}
    assert {f.name: f.dataType.simpleString() for f in frame.schema.fields} == COLUMNS
    assert frame.rdd.getNumPartitions() == 1


def test_frame_stamps_a_file_read_in_several_splits_as_the_embedded_source(spark: Any, tmp_path: Path) -> None:
    """A table Spark reads in several splits (small row groups, small read partitions):
    row numbers and the running maximum carry over from split to split (the epoch
    reached in an earlier split stamps a late row of a later one), spread over 2
    partitions by origin; a null far into the file is found with its row number."""
    n = 1200
    mins = [(i * 7) % 500 + (i // 300) * 400 for i in range(n)]  # each split goes back in time
    dates = [dt.datetime(2001, 1, 1) + dt.timedelta(minutes=m) for m in mins]
    cols = {"date": dates, "delay": list(range(n)), "origin": ["A", "B", "C"] * (n // 3)}
    path = tmp_path / "split.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=100)
    conf = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(conf)
    spark.conf.set(conf, "2k")
    try:
        assert spark.read.parquet(str(path)).rdd.getNumPartitions() > 2
        src = flight_source(path, epoch="1h").open()
        want = []
        while (b := src.next_batch()) is not None:
            want += [(b[0], f) for f in b[1]]
        frame = flight_frame(spark, path, epoch="1h", partitions=2)
        got = [(r["epoch"], flight_event(r.asDict())) for r in frame.collect()]
        rows = {f.delay: e for e, f in want}
        assert {f.delay: e for e, f in got} == rows and len(got) == n
        assert len({e for e, _ in got}) > 3
        assert {f.delay: e for e, f in (
            (r["epoch"], flight_event(r.asDict())) for r in flight_frame(spark, path, epoch="1h", limit=250).collect()
        )} == {d: e for d, e in rows.items() if d < 250}  # fmt: skip
        bad = dict(cols, delay=[None if i == 777 else i for i in range(n)])
        pq.write_table(pa.table(bad), tmp_path / "bad.parquet", row_group_size=100)
        with pytest.raises(SourceError, match=r"bad\.parquet: row 777: column 'delay' is null"):
            flight_frame(spark, tmp_path / "bad.parquet")
        flight_frame(spark, tmp_path / "bad.parquet", limit=777)  # (the null is past the limit)
    finally:
        spark.conf.set(conf, old)


def test_a_file_with_a_usable_footer_is_read_by_python_tasks(spark: Any, tmp_path: Path) -> None:
    """A single Parquet file whose footer gives each row group's rows and epochs is
    read by pyarrow in the frame's tasks (no Spark file scan), its row groups cut into
    ``partitions`` runs in file order; rows, running epochs and a limit inside a row
    group are the embedded source's."""
    n = 1000
    mins = [(i * 11) % 400 + (i // 250) * 300 for i in range(n)]
    dates = [dt.datetime(2001, 1, 1) + dt.timedelta(minutes=m) for m in mins]
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"date": dates, "delay": list(range(n)), "origin": ["A", "B"] * (n // 2)}), path,
                   row_group_size=90)  # fmt: skip
    for limit in (None, 401):
        src = flight_source(path, epoch="1h", limit=limit).open()
        want = []
        while (b := src.next_batch()) is not None:
            want += [(b[0], f) for f in b[1]]
        frame = flight_frame(spark, path, epoch="1h", limit=limit, partitions=3)
        plan = frame._jdf.queryExecution().executedPlan().toString()
        assert "FileScan" not in plan and frame.rdd.getNumPartitions() == 3, plan
        assert [(r["epoch"], flight_event(r.asDict())) for r in frame.collect()] == want


# -- the app's dataflow: Spark == embedded ----------------------------------------------------


def test_sample_slice_on_spark_equals_embedded(spark: Any, sample_slice: Path, tmp_path: Path) -> None:
    """Both patterns over four busy hours of the sample, two epochs per micro-batch, on
    3 partitions rescaled to 1 from the third epoch: every output of every epoch, per
    key in order."""
    want = embedded(sample_slice)
    first = pq.read_table(sample_slice).column("date")[0].as_py()
    e0 = int((first - dt.datetime(1970, 1, 1)).total_seconds() // 3600)
    got, backend = on_spark(
        spark, sample_slice, str(tmp_path / "ck"), partitions=3, epochs_per_batch=2,
        reconfigure=[(e0 + 2, ts.Rescale(1, strategy="all-at-once"))],
    )  # fmt: skip
    assert total(want, "delay_cascade", "matches") > 10 and total(want, "recovery", "matches") > 10
    assert total(want, "delay_cascade", "timeouts") > 10
    for name in want:
        for what in ("matches", "timeouts", "late"):
            assert got[name][what] == want[name][what], (name, what)
    assert [b.partitions for b in backend.metrics.batches] == [3, 1]  # the second batch also closes the input
    assert backend.metrics.late == 0


# generated flight tables: few origins, times mostly growing, some rows going back
# (stamped with the epoch reached: late, or matched within the lateness); a few hours
_START = dt.datetime(2001, 1, 1, 6, 0)


@st.composite
def flight_tables(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 30))  # a file without rows is refused (tests/apps/cep/test_app.py)
    origins = draw(st.sampled_from(["A", "AB", "ABC"]))
    t = draw(st.integers(0, 50))
    rows = []
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 1, 2, 3, 5, 8]))
        back = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 3, 40, 70]))
        rows.append(
            {
                "date": _START + dt.timedelta(minutes=t - back, seconds=draw(st.sampled_from([0, 59]))),
                "delay": draw(st.sampled_from([-10, 0, 5, 31, 35, 45, 61, 75, 100, 150])),
                "distance": i,  # a row number: the generated pattern's events are all distinct
                "origin": draw(st.sampled_from(origins)),
                "destination": draw(st.sampled_from([None, "X"])),
            }
        )
    return rows


def generated(spec: Any, epoch_minutes: int, lateness: int) -> Extra:
    """A third CEP operator, the generated pattern over the flights as records
    ``(index, kind, value, key, time)`` (closures: shipped to the executors by value)."""
    kinds = KINDS

    def extra(flow: ts.Dataflow, flights: Any) -> dict[str, Any]:
        recs = flights.map(
            lambda f: (f.distance, kinds[(f.delay // 7) % 3], f.delay % 4, f.origin, f.minute), name="as_record"
        )
        rkey, rtime = (lambda r: r[3]), (lambda r: r[4])
        out = cep(
            flow, recs, spec.build(), key=rkey, time=rtime, epoch=epoch_minutes, lateness=lateness,
            event_type=tuple[int, str, int, str, int], bins=16, name="generated",
        )  # fmt: skip
        return {"generated": out}

    return extra


@settings(
    max_examples=5, deadline=None, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
@given(
    rows=flight_tables(), spec=pattern_specs(), epoch=st.sampled_from(["1h", "2h"]), lateness=st.sampled_from([0, 45]),
    partitions=st.integers(1, 3), epochs_per_batch=st.integers(1, 2),
)  # fmt: skip
def test_generated_tables_on_spark_equal_embedded(
    spark: Any, rows: list[dict[str, Any]], spec: Any, epoch: str, lateness: int, partitions: int, epochs_per_batch: int
) -> None:
    note(f"{spec!r} epoch={epoch} lateness={lateness} partitions={partitions} epochs/batch={epochs_per_batch}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flights.parquet"
        schema = pa.schema(
            [("date", pa.timestamp("us")), ("delay", pa.int64()), ("distance", pa.int64()),
             ("origin", pa.string()), ("destination", pa.string())]
        )  # fmt: skip
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        minutes = {"1h": 60, "2h": 120}[epoch]
        extra = generated(spec, minutes, lateness)
        want = embedded(path, epoch=epoch, lateness=lateness, workers=partitions, extra=extra)
        got, _ = on_spark(
            spark, path, str(Path(tmp) / "ck"), partitions=partitions, epoch=epoch, lateness=lateness,
            epochs_per_batch=epochs_per_batch, extra=extra,
        )  # fmt: skip
    assert got == want


# -- the CLI ------------------------------------------------------------------------------------


def counts(out: str) -> dict[str, tuple[int, int, int, int]]:
    return summary(out)


def printed_matches(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("  ")]


def test_cli_backend_spark_prints_and_writes_what_embedded_does(spark: Any, sample_slice: Path, tmp_path: Path, capsys: Any) -> None:
    """``main(["--backend", "spark", ...])`` on a CSV slice (two epochs) reuses the
    running session (and leaves it running): the same summary, printed matches and
    ``--output`` files as the embedded run; run again with the same ``--checkpoint``, it
    resumes after the last micro-batch (nothing left)."""
    csv = tmp_path / "slice.csv"
    pcsv.write_csv(pq.read_table(sample_slice).slice(0, 1900), csv)  # 11:00-12:59
    common = ["--input", str(csv), "--no-progress", "--show", "8"]
    assert main([*common, "--output", str(tmp_path / "emb")]) == 0
    emb = capsys.readouterr().out
    ck = tmp_path / "ck"
    args = [*common, "--backend", "spark", "--partitions", "3", "--epochs-per-batch", "2", "--checkpoint", str(ck)]
    assert main([*args, "--output", str(tmp_path / "spark")]) == 0
    out = capsys.readouterr().out
    assert "Spark local[2], 3 partition(s)" in out
    assert counts(out) == counts(emb) and counts(out)["recovery"][0] > 0
    assert all(c[3] == 1900 for c in counts(out).values())
    assert printed_matches(out) == printed_matches(emb) and len(printed_matches(out)) == 16
    files = output_files(tmp_path / "spark")
    assert files == output_files(tmp_path / "emb") and len(files) > 6
    assert "micro-batches committed in" in out
    assert spark.range(3).count() == 3  # the test session is still running
    # resumed after the last committed micro-batch: nothing left to do
    assert main(args) == 0
    again = capsys.readouterr().out
    assert "resumed from micro-batch" in again and "end of the input" in again
    assert all(c == (0, 0, 0, 0) for c in counts(again).values())


def test_cli_rerun_of_a_finished_spark_run_keeps_its_output(spark: Any, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "tiny.parquet"
    pq.write_table(pq.read_table(DEFAULT_INPUT).slice(SLICE[0], 300), path)  # one epoch
    args = ["--input", str(path), "--no-progress", "--backend", "spark", "--checkpoint", str(tmp_path / "ck")]
    args += ["--output", str(tmp_path / "out")]
    assert main(args) == 0
    files = output_files(tmp_path / "out")
    assert files
    assert main(args) == 0
    capsys.readouterr()
    assert output_files(tmp_path / "out") == files


@pytest.mark.parametrize("name, columns, message", BAD_INPUTS)
def test_cli_bad_input_on_spark(spark: Any, tmp_path: Path, capsys: Any, name: str, columns: dict, message: str) -> None:
    path = write_table(tmp_path / name, columns)
    code = main(["--input", str(path), "--no-progress", "--backend", "spark"])
    err = capsys.readouterr().err
    assert code == 1 and re.search(message, err), err
    assert "Traceback" not in err


def test_cli_missing_and_unreadable_files_on_spark(spark: Any, tmp_path: Path, capsys: Any) -> None:
    code = main(["--input", str(tmp_path / "absent.parquet"), "--no-progress", "--backend", "spark"])
    assert code == 1 and "absent.parquet: no such file" in capsys.readouterr().err
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    code = main(["--input", str(junk), "--no-progress", "--backend", "spark"])
    err = capsys.readouterr().err
    assert code == 1 and "junk.parquet: cannot read" in err and "Traceback" not in err


def test_cli_starts_its_own_session_with_the_apps_settings(sample_slice: Path, tmp_path: Path, monkeypatch: Any) -> None:
    """``--backend spark`` starting its own session gives it the app's settings
    (:data:`apps.cep.spark_source.SPARK_SETTINGS`); a session already running (the
    previous test's case) is left as it is."""
    import pyspark

    import tstate.spark
    from apps.cep.spark_source import SPARK_SETTINGS

    seen: list[dict] = []

    class Stop(Exception):
        pass

    def spying(master: str, app_name: str = "tstate", **conf: Any) -> Any:
        seen.append(conf)
        raise Stop

    monkeypatch.setattr(tstate.spark, "local_session", spying)
    for active in (None, object()):
        monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", active)
        with pytest.raises(Stop):
            main(["--input", str(sample_slice), "--no-progress", "--backend", "spark", "--checkpoint", str(tmp_path / "ck")])
    assert seen == [SPARK_SETTINGS, {}]
    assert SPARK_SETTINGS["spark.sql.execution.arrow.maxBytesPerBatch"] == str(2**31 - 1)  # (Spark skips its size check)
