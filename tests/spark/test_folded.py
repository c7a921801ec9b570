"""A batch run that is one small micro-batch runs as one Spark job, its cut folded into
the batch (tstate.spark.folded): no counting job, the same checkpoint, state and output as
the cut path; a run whose input is more than one micro-batch is cut as before."""

from __future__ import annotations

from typing import Any

import pytest
from tstate.spark import Backend, Source, batch_run, cuts

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


def test_a_run_starts_a_worker_while_the_driver_plans_it_and_records_it(
    spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """A batch run starts one Python worker in the background before it plans
    (tstate.spark.warm.start_worker), and a folded run records the one worker its task
    used (a larger record of an earlier run stays)."""
    from tstate.spark import warm

    started: list[Any] = []
    monkeypatch.setattr(warm, "start_worker", lambda s: started.append(s))
    app = spark.sparkContext.applicationId
    warm._used.pop(app, None)
    _run(spark, str(tmp_path / "a"), ROWS, None)
    assert started == [spark] and warm._used[app][0] == 1
    warm.used(spark, 2)
    _run(spark, str(tmp_path / "b"), ROWS, None)
    assert started == [spark, spark] and warm._used[app][0] == 2
