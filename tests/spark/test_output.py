"""Sink output on Spark is written by the executors (:mod:`tstate.spark.output`): it
equals the embedded engine's, never passes through the driver, is a DataFrame per
batch (``Backend.output``), survives a retried task without duplicates; runs say when
they resume (:mod:`tstate.spark.progress`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tstate as ts
from tstate.errors import ConfigurationError, SparkError
from tstate.spark import Backend, Source

from .cluster_job import out_stream
from .flows import embedded, keyed

ROW = "k string, v long, t long"
ROOT = Path(__file__).resolve().parents[2]


def rows_of(n: int, epochs: int = 4) -> list[dict]:
    return [{"k": f"k{i % 17}", "v": i % 7, "t": i * epochs // n} for i in range(n)]


def epoch_files(d: Path) -> dict[str, list[Any]]:
    """Every epoch file: name -> its records, sorted (workers interleave within an epoch)."""
    return {f.name: sorted(map(json.loads, f.read_text().splitlines()), key=repr) for f in sorted(d.glob("*.jsonl"))}


def embedded_files(rows: list[dict], d: Path) -> dict[str, list[Any]]:
    flow, ev, _stats, _out = keyed()
    flow.sink(out_stream(flow), ts.io.files(str(d)))
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    return epoch_files(d)


def committed_parts(ck: str) -> set[str]:
    """Every part file and index the committed manifest's output chain references."""
    from tstate.checkpoint.store import CheckpointStore
    from tstate.spark.output import history

    store = CheckpointStore(ck, readonly=True)
    meta = store.latest().meta["spark"]
    refs = {p[1] for p in meta.get("output_pending", [])}
    index = meta.get("output")
    while index is not None:
        refs.add(index)
        from tstate.spark.output import read_index

        _b, nxt, parts = read_index(store.fs, index)
        refs |= {p.path for p in parts}
        index = nxt
    assert sum(1 for _ in history(store.fs, meta.get("output"))) >= 1
    return refs


def stored_output(ck: str) -> set[str]:
    base = Path(ck)
    return {str(p.relative_to(base)) for p in (base / "output").rglob("*") if p.is_file()}


def test_files_and_collected_output_equal_embedded_and_output_frame(spark: Any, tmp_path: Path) -> None:
    """The epoch files the executors write equal the embedded engine's, file for file;
    the collected sink sees the embedded output; ``backend.output`` (all batches, one
    batch, another sink) equals what was collected; nothing uncommitted is left."""
    rows = rows_of(300, epochs=4)
    want_files = embedded_files(rows, tmp_path / "emb")
    ref_out, _ = embedded(rows)
    flow, _ev, _stats, out = keyed()
    files = ts.io.files(str(tmp_path / "spark"))
    flow.sink(out_stream(flow), files, name="json")
    ck = str(tmp_path / "ck")
    backend = Backend(spark, checkpoint=ck, partitions=3)
    backend.run(flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=2)
    assert epoch_files(tmp_path / "spark") == want_files and len(want_files) >= 4
    assert sorted(out.items, key=repr) == ref_out
    assert sum(b.output_records for b in backend.metrics.batches) == 2 * len(ref_out)  # two sinks
    # the output as a DataFrame, read by the executors
    df = backend.output(out)
    assert df.columns[:2] == ["batch", "time"]
    got = sorted(((r["time"], tuple(v for v in r[2:] if v is not None)) for r in df.collect()), key=repr)
    assert got == sorted(((t, tuple(x)) for t, x in out.items), key=repr)
    by_batch = [backend.output("json", batch=m.batch).count() for m in backend.metrics.batches]
    assert sum(by_batch) == len(ref_out) and by_batch[-1] > 0  # the last batch closes the inputs: its timers fire
    assert {r["batch"] for r in backend.output(files).select("batch").collect()} == {
        m.batch for m in backend.metrics.batches if m.output_records
    }
    assert backend.output(files, batch=99).count() == 0
    typed = backend.output(files, schema="_1 string, _2 long, _3 long, _4 long")
    assert typed.count() == len(ref_out) and typed.schema.simpleString().startswith("struct<batch:bigint,time:bigint,_1:string")
    assert stored_output(ck) == committed_parts(ck)
    with pytest.raises(SparkError, match=r"operator 'per_parity' has no sink .*ts\.io\.keep\(\)"):
        backend.output(ts.Stream(flow, flow.graph.index("per_parity"), 0, flow.root))


def test_output_bytes_on_the_driver_stay_flat_as_output_grows(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """What the driver collects from the tasks does not grow with the output: 10x more
    output records, the same epochs and keys, about the same bytes collected (the old
    driver-side sinks collected every record: 10x the bytes)."""
    DataFrame = type(spark.range(1))  # the classic DataFrame class (pyspark.sql.DataFrame is its base)
    real, real_arrow = DataFrame.collect, DataFrame.toArrow
    seen: list[int] = []

    def counting(self: Any) -> Any:
        rows = real(self)
        seen.append(sum(len(r["payload"]) for r in rows if "payload" in r.asDict()))
        return rows

    def counting_arrow(self: Any) -> Any:  # (the driver collects task rows as Arrow)
        table = real_arrow(self)
        if "payload" in table.column_names:
            seen.append(sum(len(v) for v in table.column("payload").to_pylist() if v is not None))
        return table

    monkeypatch.setattr(DataFrame, "collect", counting)
    monkeypatch.setattr(DataFrame, "toArrow", counting_arrow)
    collected = {}
    for n in (400, 4000):
        flow = ts.Dataflow("grow")
        ev = flow.input("events")

        @flow.stateful(ev, key=lambda r: r["k"], state=int, bins=8)
        def count(c: int, r: dict, ctx: ts.Context) -> int:
            ctx.emit((r["k"], r["v"], c + 1))
            return c + 1

        count.sink(ts.io.keep(), name="kept")
        backend = Backend(spark, checkpoint=str(tmp_path / f"ck{n}"), partitions=2)
        seen.clear()
        backend.run(flow, {"events": Source(spark.createDataFrame(rows_of(n), ROW), time="t")})
        collected[n] = (sum(seen), sum(b.output_records for b in backend.metrics.batches))
    (small, out_small), (big, out_big) = collected[400], collected[4000]
    assert out_big >= 9 * out_small
    assert 0 < big < 1.5 * small, collected


def test_resume_says_so_and_a_finished_run_says_nothing_is_left(spark: Any, tmp_path: Path, capsys: Any) -> None:
    rows = rows_of(120, epochs=5)
    df = spark.createDataFrame(rows, ROW)
    ck = str(tmp_path / "ck")
    flow, _ev, _stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    b1._prepare(flow, {"events": Source(df, time="t")})
    from pyspark.sql import functions as F

    for lo in range(2):  # two batches committed, then the driver "dies"
        b1._batch({"events": df.where(F.col("t") == lo)}, {"events": Source(df, time="t")}, lo, lo, lo + 1, None)
    capsys.readouterr()
    flow2, _ev2, _stats2, out2 = keyed()
    Backend(spark, checkpoint=ck, partitions=2, progress=True).run(
        flow2, {"events": Source(df, time="t")}, epochs_per_batch=1
    )
    err = capsys.readouterr().err
    assert f"tstate: resumed at batch 3 of 5 (2 committed in {os.path.abspath(ck)})" in err  # (the 5th closes the inputs)
    assert "micro-batches" in err and "5/5" in err and "state " in err  # the bar
    assert sorted(out1.items + out2.items, key=repr) == embedded(rows)[0]
    flow3, *_ = keyed()
    Backend(spark, checkpoint=ck, partitions=2).run(flow3, {"events": Source(df, time="t")})
    assert "tstate: nothing left to do: batch 5 of 5 is committed in" in capsys.readouterr().err
    flow4, *_ = keyed()
    Backend(spark, checkpoint=ck, partitions=2, progress=False).run(flow4, {"events": Source(df, time="t")})
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigurationError, match="progress"):
        Backend(spark, checkpoint=ck, progress="yes")  # type: ignore[arg-type]


def test_readme_spark_snippet_runs_twice_in_one_directory(spark: Any, tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    """The second run finds every batch committed, says so, and its assertions (on the
    committed output and state) hold."""
    text = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "tstate.spark" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec", dont_inherit=True), {"__name__": "__readme__"})
    assert "nothing left to do" not in capsys.readouterr().err
    exec(compile(block, "README.md", "exec", dont_inherit=True), {"__name__": "__readme__"})
    assert re.search(r"nothing left to do: batch (\d+) of \1 is committed in .*ckpt", capsys.readouterr().err)


def test_missing_pyspark_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyspark': raise ImportError('no pyspark here')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from tstate.spark import Backend, local_session\n"
        "from tstate.errors import ConfigurationError, SparkError\n"
        "for f in (local_session, lambda: Backend(None, 'x')):\n"
        "    try: f()\n"
        "    except SparkError as e: assert isinstance(e, ImportError); print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("pip install 'tstate[spark]'") == 2


SITECUSTOMIZE = '''
import os
import tstate.spark.output as _o

_real = _o.write_parts


def write_parts(plan, info, sinks, rows):
    """Fail the first attempt of the first task to write output in batch 1, after its
    part files are written (a task retried after its output is on disk)."""
    _real(plan, info, sinks, rows)
    from pyspark import TaskContext

    ctx = TaskContext.get()
    marker = os.path.join(os.environ["TSTATE_FAIL_ONCE"], "failed")
    if ctx is not None and info.batch == 1 and ctx.attemptNumber() == 0 and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("injected failure after writing the output")


_o.write_parts = write_parts
'''


def test_task_retried_after_writing_its_output_gives_no_duplicates(tmp_path: Path) -> None:
    """``local[2,3]`` (3 attempts per task) with a task that fails once after writing its
    part files: the epoch files equal the embedded engine's and the failed attempt's
    files are gone."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    ck, out = tmp_path / "ck", tmp_path / "out"
    env = {
        **os.environ, "TSTATE_FAIL_ONCE": str(hook),
        "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job", "local[2,3]", str(ck), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert (hook / "failed").exists()  # the failure did happen (in a task, after writing)
    from .cluster_job import ROWS

    assert epoch_files(out) == embedded_files(ROWS, tmp_path / "emb")
    assert stored_output(str(ck)) == committed_parts(str(ck))


def epoch_bytes(d: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(d.glob("*.jsonl"))}


def test_crash_between_part_files_and_commit_leaves_no_duplicate_or_lost_output(
    spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """The driver fails after batch 2's tasks wrote their part files, before its manifest
    commits; a new backend resumes in the same directory.  The epoch files are the
    embedded engine's byte for byte, ``backend.output`` holds every record once, and no
    part file of the failed attempt is left."""
    import tstate.spark.batch as batch_mod

    rows = rows_of(240, epochs=6)
    emb = tmp_path / "emb"
    embedded_files(rows, emb)
    want = epoch_bytes(emb)
    ref_out, _ = embedded(rows)
    ck, out_dir = str(tmp_path / "ck"), tmp_path / "spark"
    df = spark.createDataFrame(rows, ROW)
    real = batch_mod.commit
    calls = []

    def failing(writer: Any, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # batch 2: its tasks' parts are on disk, its manifest is not
            parts = [p for p in (Path(ck) / "output").rglob("*.arrow") if "/000002/" in str(p)]
            assert parts
            raise RuntimeError("driver lost before the commit")
        return real(writer, *a, **kw)

    monkeypatch.setattr(batch_mod, "commit", failing)
    flow, _ev, _stats, _out = keyed()
    flow.sink(out_stream(flow), ts.io.files(str(out_dir)), name="json")
    with pytest.raises(RuntimeError, match="driver lost"):
        Backend(spark, checkpoint=ck, partitions=2, progress=False).run(
            flow, {"events": Source(df, time="t")}, epochs_per_batch=1
        )
    monkeypatch.setattr(batch_mod, "commit", real)
    flow2, _ev2, _stats2, out2 = keyed()
    files = ts.io.files(str(out_dir))
    flow2.sink(out_stream(flow2), files, name="json")
    backend = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    backend.run(flow2, {"events": Source(df, time="t")}, epochs_per_batch=1)
    assert epoch_bytes(out_dir) == want and len(want) >= 6
    got = sorted(((r["time"], tuple(r[2:])) for r in backend.output(files, schema="_1 string, _2 long, _3 long, _4 long").collect()), key=repr)
    assert len(got) == len(ref_out)
    assert stored_output(ck) == committed_parts(ck)


def test_a_damaged_part_file_is_named(tmp_path: Path) -> None:
    """A part whose bytes do not match the digest its committed index holds is a
    CheckpointError naming the file; its times' cells are read otherwise."""
    from tstate.checkpoint.fs import LocalFS
    from tstate.errors import CheckpointError
    from tstate.spark.output import Part, _arrow_part, _digest, part_cells

    fs = LocalFS(str(tmp_path))
    body = _arrow_part([3, 5, 9], [b"a", b"bb", b"c"])
    fs.write_atomic("p.arrow", body)
    part = Part(1, "p.arrow", ((3, 1), (5, 2), (9, 1)), _digest(body))
    assert list(part_cells(fs, part)) == [(3, b"a"), (5, b"bb"), (9, b"c")]
    assert list(part_cells(fs, part, {5})) == [(5, b"bb")]
    fs.write_atomic("p.arrow", body[:-9] + b"X" * 9)
    with pytest.raises(CheckpointError, match=r"p\.arrow: sink output unreadable \(checksum mismatch\)"):
        list(part_cells(fs, part))


def test_delivery_failing_after_the_commit_is_redone_by_the_restart(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """The output of a committed batch reaches the sinks on a background thread while
    the next batch runs (:mod:`tstate.spark.delivery`).  Batch 2's delivery fails after
    writing part of its epoch files: the run stops before batch 3 commits (the next
    commit waits for the delivery), and a restart writes the files again: the
    embedded engine's, byte for byte; ``backend.output`` holds every record once."""
    import tstate.spark.delivery as delivery_mod

    rows = rows_of(240, epochs=6)
    emb = tmp_path / "emb"
    embedded_files(rows, emb)
    want = epoch_bytes(emb)
    ref_out, _ = embedded(rows)
    ck, out_dir = str(tmp_path / "ck"), tmp_path / "spark"
    df = spark.createDataFrame(rows, ROW)
    real = delivery_mod.finalise
    committed: list[int] = []

    def failing(spark_: Any, directory: str, sinks: Any, parts: Any, *a: Any, **kw: Any) -> Any:
        from tstate.checkpoint.store import CheckpointStore

        batch = CheckpointStore(ck, readonly=True).latest().meta["spark"]["batch"]
        committed.append(batch)
        if batch == 2:  # half its epochs' files are written, then the driver is lost
            some = [p for p in parts if p.times[0][0] == min(q.times[0][0] for q in parts)]
            real(spark_, directory, sinks, some, *a, **kw)
            raise RuntimeError("driver lost in the middle of the delivery")
        return real(spark_, directory, sinks, parts, *a, **kw)

    monkeypatch.setattr(delivery_mod, "finalise", failing)
    flow, _ev, _stats, _out = keyed()
    flow.sink(out_stream(flow), ts.io.files(str(out_dir)), name="json")
    with pytest.raises(RuntimeError, match="in the middle of the delivery"):
        Backend(spark, checkpoint=ck, partitions=2, progress=False).run(
            flow, {"events": Source(df, time="t")}, epochs_per_batch=1
        )
    from tstate.checkpoint.store import CheckpointStore

    assert CheckpointStore(ck, readonly=True).latest().meta["spark"]["batch"] == 2  # batch 3 did not commit
    assert epoch_bytes(out_dir) != want
    monkeypatch.setattr(delivery_mod, "finalise", real)
    flow2, _ev2, _stats2, _out2 = keyed()
    files = ts.io.files(str(out_dir))
    flow2.sink(out_stream(flow2), files, name="json")
    backend = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    backend.run(flow2, {"events": Source(df, time="t")}, epochs_per_batch=1)
    assert epoch_bytes(out_dir) == want and len(want) >= 6
    got = backend.output(files, schema="_1 string, _2 long, _3 long, _4 long").collect()
    assert len(got) == len(ref_out)


KILL_DELIVERY = '''
import os
import signal
import tstate.spark.delivery as _d

_real = _d.finalise


def finalise(spark, directory, sinks, parts, *a, **kw):
    """SIGKILL the driver in the middle of delivering batch 3's output (its first
    epoch's files written, the next batch running meanwhile)."""
    if any("/000003/" in p.path for p in parts):
        first = min(p.times[0][0] for p in parts)
        _real(spark, directory, sinks, [p for p in parts if p.times[0][0] == first], *a, **kw)
        os.kill(os.getpid(), signal.SIGKILL)
    return _real(spark, directory, sinks, parts, *a, **kw)


_d.finalise = finalise
'''


def test_driver_killed_while_delivering_a_committed_batch_resumes_to_the_same_files(tmp_path: Path) -> None:
    """The driver is SIGKILLed while a committed batch's output is being delivered in
    the background: the restarted job's epoch files are the embedded engine's and no
    uncommitted part file is left."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_DELIVERY)
    ck, out = tmp_path / "ck", tmp_path / "out"
    cmd = [sys.executable, "-m", "tests.spark.cluster_job", "local[2]", str(ck), str(out)]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), path])},
    )  # fmt: skip
    assert r.returncode == -9, r.stderr[-3000:]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": path})
    assert r.returncode == 0, r.stderr[-3000:]
    from .cluster_job import ROWS

    embedded_files(ROWS, tmp_path / "emb")
    assert epoch_bytes(out) == epoch_bytes(tmp_path / "emb")
    assert stored_output(str(ck)) == committed_parts(str(ck))
