"""A batch run that is one small micro-batch runs as one Spark job, its cut folded into
the batch (tstate.spark.folded): no counting job, the same checkpoint, state and output as
the cut path; a run whose input is more than one micro-batch is cut as before."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tstate.spark import Backend, Source, batch_run, cuts
from tstate.spark.folded import FRESH_LO, Fold

from .flows import embedded, keyed
from .test_backend import as_tuples
from .test_local_uncached import _local


@pytest.fixture(autouse=True)
def _staged() -> None:
    """(Overrides tests/spark/conftest.py's: the one-task rule applies here.)"""


def _run(spark: Any, directory: str, rows: list[dict], epochs: int | None, per_rows: int = 500_000) -> tuple[Any, ...]:
    flow, _ev, stats, out = keyed()
    b = Backend(spark, checkpoint=directory, partitions=2, progress=False)
    b.run(flow, {"events": Source(_local(spark, rows), time="t")}, epochs_per_batch=epochs, rows_per_batch=per_rows)
    head = b.store.head
    state = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b.state(stats).frame.collect()}
    index = [(m.batch, m.frontier) for m in b.metrics.batches]  # (and the manifest id is the batch count)
    assert head.id == len(index)
    meta = dict(head.meta["spark"])
    from tstate.spark.output import _open

    d = _open(b.store.fs, meta.pop("output"), "output index")  # (its name has the writer's random token)
    out_index = {k: d[k] for k in ("batch", "lo", "hi")}
    return sorted(out.items, key=repr), state, head.time, (meta, out_index), index, b.metrics.cut_seconds


def _counted(monkeypatch: Any) -> list[int]:
    """Calls of the cut's counting job (cuts.span), recorded."""
    calls: list[int] = []
    real = cuts.span

    def span(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(cuts, "span", span)
    return calls


ROWS = [{"k": "abc"[i % 3], "v": i, "t": 3 + i % 5} for i in range(40)]


@pytest.mark.parametrize("epochs,per_rows", [(None, 500_000), (5, 500_000), (9, 10)])
def test_a_one_batch_run_has_no_counting_job_and_commits_what_the_cut_path_does(
    spark: Any, tmp_path: Any, monkeypatch: Any, epochs: int | None, per_rows: int
) -> None:
    calls = _counted(monkeypatch)
    folded = _run(spark, str(tmp_path / "a"), ROWS, epochs, per_rows)
    assert calls == []  # (the epochs 3..7 are one batch of either cut: no count)
    monkeypatch.setattr(batch_run, "foldable", lambda *a, **k: None)
    cut = _run(spark, str(tmp_path / "b"), ROWS, epochs, per_rows)
    assert calls == [1]
    assert folded[:5] == cut[:5]
    assert folded[2] == 3 and folded[3][1]["lo"] == 3  # (the closing batch's time: the input's first epoch)
    ref_out, ref_state = embedded(ROWS)
    assert folded[0] == ref_out and folded[1] == as_tuples(ref_state)


@pytest.mark.parametrize("epochs,per_rows", [(4, 500_000), (None, 30)])
def test_a_run_of_more_than_one_batch_is_cut_and_the_folded_attempt_leaves_nothing(
    spark: Any, tmp_path: Any, monkeypatch: Any, epochs: int | None, per_rows: int
) -> None:
    calls = _counted(monkeypatch)
    got = _run(spark, str(tmp_path / "a"), ROWS, epochs, per_rows)
    assert calls == [1] and len(got[4]) == 2  # (epochs 3..7: two batches)
    monkeypatch.setattr(batch_run, "foldable", lambda *a, **k: None)
    cut = _run(spark, str(tmp_path / "b"), ROWS, epochs, per_rows)
    assert got[:5] == cut[:5]
    # the aborted attempt took no checkpoint id and left no file behind
    files = lambda d: sum(1 for p in d.rglob("*") if p.is_file())  # noqa: E731
    assert files(tmp_path / "a") == files(tmp_path / "b")


@pytest.mark.parametrize("fold", [True, False])
def test_a_resumed_run_of_one_batch_is_folded_from_its_frontier(
    spark: Any, tmp_path: Any, monkeypatch: Any, fold: bool
) -> None:
    """A driver that died after four epochs resumes with the rest as one folded batch
    (rows before the frontier are not read again): the same as the cut path's."""
    from pyspark.sql import functions as F

    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 10} for i in range(80)]
    ref_out, ref_state = embedded(rows)
    calls = _counted(monkeypatch)
    if not fold:
        monkeypatch.setattr(batch_run, "foldable", lambda *a, **k: None)
    d = str(tmp_path / "ck")
    df_all = _local(spark, rows)
    flow, _ev, _stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=d, partitions=2, progress=False)
    b1._prepare(flow, {"events": Source(df_all.where(F.col("t") < 4), time="t")})
    for lo in range(4):
        b1._batch({"events": df_all.where(F.col("t") == lo)}, {"events": Source(df_all, time="t")}, lo, lo, lo + 1, None)
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, checkpoint=d, partitions=2, progress=False)
    b2.run(flow2, {"events": Source(df_all, time="t")}, epochs_per_batch=10)
    assert calls == ([] if fold else [1]) and len(b2.metrics.batches) == 1
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b2.state(stats2).frame.collect()}
    assert got == as_tuples(ref_state)
    assert b2.store.head.time == 4 and b2.metrics.batches[0].records == 40  # (epochs 4..7 only)


def _batches(times: list[list[int | None]]) -> list[Any]:
    import pyarrow as pa

    return [pa.RecordBatch.from_pydict({"t": pa.array(ts, pa.int64()), "v": list(range(len(ts)))}) for ts in times]


@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.lists(st.one_of(st.none(), st.integers(-3, 12)), max_size=6), max_size=5),
    epochs=st.one_of(st.none(), st.integers(1, 6)),
    rows=st.integers(0, 12),
    fresh=st.booleans(),
    lo=st.sampled_from([FRESH_LO, 0, 4]),
)
def test_screening_the_columns_refuses_exactly_the_inputs_first_refuses(
    times: list[list[int | None]], epochs: int | None, rows: int, fresh: bool, lo: int
) -> None:
    """Fold.screen (on the Arrow columns, before any record is built) gives None exactly
    when the input has rows and first() -- the reference: the distinct times and the count
    of the rows not late -- gives None, else the whole input; either way it reads it all."""
    fold = Fold(epochs, rows, fresh)
    kept = [t for ts in times for t in ts if t is not None and t >= lo]
    expected = fold.first(lo, sorted(set(kept)), len(kept))
    read: list[Any] = []

    def source() -> Any:
        for b in _batches(times):
            read.append(b)
            yield b

    got = fold.screen(lo, "t", source())
    assert len(read) == len(times)  # (the task consumes its input)
    if kept and expected is None:
        assert got is None
    else:
        assert got is not None and [b.column("t").to_pylist() for b in got] == times


def test_a_folded_task_stops_building_records_once_its_input_is_more_than_one_batch() -> None:
    fold = Fold(None, 5, True)
    built: list[int] = []

    def source() -> Any:
        for b in _batches([[1, 2, 3], [3, 4, 5], [6, 7, 8]]):
            built.append(b.num_rows)
            yield b

    assert fold.screen(FRESH_LO, "t", source()) is None and built == [3, 3, 3]
    assert Fold(4, 100, True).screen(FRESH_LO, "t", iter(_batches([[1, 2], [5]]))) is None  # (epochs 1..5: two batches)
    assert Fold(4, 100, False).screen(3, "t", iter(_batches([[1, 2], [5, 6]]))) is not None  # (1, 2 late; 5, 6 from lo 3)


def _expand(batches: Any) -> Any:
    """A Python reader: each descriptor row becomes 20 event rows (k, v, t)."""
    import pyarrow as pa

    for b in batches:
        for i in b.column("id").to_pylist():
            yield pa.RecordBatch.from_pydict({
                "k": ["abc"[(i + j) % 3] for j in range(20)], "v": [i * 20 + j for j in range(20)],
                "t": [3 + (i * 20 + j) % 9 for j in range(20)],
            })  # fmt: skip


def test_a_run_over_a_python_mapped_frame_is_cut_not_folded(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """Spark sizes a mapInArrow's output by its input (here 3 descriptor rows), so the
    run would try a folded batch over the whole input; it is cut at once instead (no
    folded attempt), with the results of the same rows as a local frame."""
    folds: list[Any] = []
    real = batch_run.foldable

    def spy(*a: Any, **k: Any) -> Any:
        folds.append(real(*a, **k))
        return folds[-1]

    monkeypatch.setattr(batch_run, "foldable", spy)
    mapped = spark.range(3, numPartitions=1).mapInArrow(_expand, "k string, v long, t long")
    flow, _ev, _stats, out = keyed()
    b = Backend(spark, checkpoint=str(tmp_path / "m"), partitions=2, progress=False)
    b.run(flow, {"events": Source(mapped, time="t")}, epochs_per_batch=4)
    assert folds == [None]
    rows = [r.asDict() for r in mapped.collect()]
    assert sorted(out.items, key=repr) == _run(spark, str(tmp_path / "l"), rows, 4)[0]
    assert folds[-1] is not None  # (the same rows as a local relation: its size is known, the fold is tried)


def test_a_folded_run_records_its_one_worker_and_starts_none_beside_it(
    spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """A folded run records the one worker its task used (a larger record of an earlier
    run stays), and starts no worker of its own beside its task
    (tstate.spark.warm.start_worker is the session's warm-up only: an extra idle worker
    would take turns with the run's own and miss their cached and prefetched bins)."""
    from tstate.spark import warm

    started: list[Any] = []
    monkeypatch.setattr(warm, "start_worker", lambda s: started.append(s))
    app = spark.sparkContext.applicationId
    warm._used.pop(app, None)
    _run(spark, str(tmp_path / "a"), ROWS, None)
    assert started == [] and warm._used[app][0] == 1
    warm.used(spark, 2)
    _run(spark, str(tmp_path / "b"), ROWS, None)
    assert started == [] and warm._used[app][0] == 2
