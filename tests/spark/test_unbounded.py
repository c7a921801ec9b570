"""Spark's size estimate counts only where it bounds the frame (tstate.spark.unbounded):
rows a Python function makes (a source reading its rows in a ``mapInArrow`` over a
few-row ``spark.range``) have no size Spark knows, so a batch run over many of them is
not tried as one folded task (read whole in one task, then thrown away) but cut."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tstate.spark import Backend, Source, batch_run, local_batch
from tstate.spark.unbounded import unbounded

from .flows import embedded, keyed

ROWS = [{"k": "abcd"[i % 4], "v": i, "t": i // 10} for i in range(200)]
SCHEMA = "k string, v long, t long"


@pytest.fixture(autouse=True)
def _staged() -> None:
    """(Overrides tests/spark/conftest.py's: the one-task rule applies here.)"""


def _made(spark: Any, rows: list[dict]) -> Any:
    """``rows`` made by a Python task out of a one-row ``spark.range`` (as a source that
    reads a file per task does)."""

    def make(batches: Any) -> Any:
        for rb in batches:
            if rb.num_rows:
                yield pa.RecordBatch.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("v", pa.int64()),
                                                                         ("t", pa.int64())]))  # fmt: skip

    return spark.range(0, 1, 1, 1).mapInArrow(make, SCHEMA)


def test_rows_a_python_function_makes_have_no_size(spark: Any) -> None:
    made = _made(spark, ROWS)
    plan = made._jdf.queryExecution().optimizedPlan()
    assert int(str(plan.stats().sizeInBytes())) <= local_batch.LOCAL_BATCH_BYTES  # (Spark's estimate: tiny)
    assert unbounded(spark._jvm, plan) and local_batch.input_bytes(made) is None
    assert local_batch.input_bytes(made.where("v > 3").select("k", "t")) is None  # (anywhere in the plan)
    plain = spark.createDataFrame(ROWS, SCHEMA)
    assert not unbounded(spark._jvm, plain._jdf.queryExecution().optimizedPlan())
    assert local_batch.input_bytes(plain) is not None
    cached = _made(spark, ROWS).persist()  # (a frame of its own: made's plan is optimized already)
    try:
        cached.count()  # (a cached frame: a leaf with its cache's own statistics, exact once read)
        assert local_batch.input_bytes(cached) is not None
    finally:
        cached.unpersist()


def test_a_run_over_many_made_rows_is_cut_not_folded(spark: Any, tmp_path: Any, monkeypatch: Any) -> None:
    folds: list[Any] = []
    real = batch_run.foldable

    def foldable(*a: Any, **k: Any) -> Any:
        folds.append(real(*a, **k))
        return folds[-1]

    monkeypatch.setattr(batch_run, "foldable", foldable)
    flow, _ev, _stats, out = keyed()
    b = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2, progress=False)
    b.run(flow, {"events": Source(_made(spark, ROWS), time="t")}, rows_per_batch=50)
    assert folds == [None]  # (no one-task attempt over all 200 rows: cut at once)
    assert len(b.metrics.batches) == 4
    assert sorted(out.items, key=repr) == embedded(ROWS)[0]


def test_the_classes_are_looked_up_once_per_jvm(spark: Any, monkeypatch: Any) -> None:
    """A streaming query asks at every micro-batch: the row makers' JVM classes are
    looked up once per JVM (one Py4J round trip each), not at every call."""
    from tstate.spark import unbounded as mod

    class Counting:
        """A py4j view whose ``java.lang.Class.forName`` counts its calls."""

        def __init__(self, jvm: Any) -> None:
            self.calls, real = 0, jvm.java.lang.Class

            def for_name(name: str) -> Any:
                self.calls += 1
                return real.forName(name)

            self.java = type("J", (), {"lang": type("L", (), {"Class": type("C", (), {"forName": staticmethod(for_name)})})})

    view = Counting(spark._jvm)
    plan = spark.range(3)._jdf.queryExecution().optimizedPlan()
    monkeypatch.setattr(mod, "_found", {})
    assert not unbounded(view, plan) and view.calls == len(mod.ROW_MAKERS)
    assert not unbounded(view, plan) and view.calls == len(mod.ROW_MAKERS)
