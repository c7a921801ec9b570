"""A batch run's default micro-batches (``tstate.spark.batch_run.default_rows``): about
``ROWS_PER_PARTITION`` input rows per partition of the run, so the same rows make fewer
batches on more partitions; an explicit ``rows_per_batch`` or ``epochs_per_batch`` is
kept as given, and every cut gives the embedded engine's output."""

from __future__ import annotations

from typing import Any

import pytest

from tstate.spark import Backend, Source, batch_run

from .test_key_order import recorder

#: 12 epochs of 20 rows
ROWS: list[dict[str, Any]] = [{"k": f"k{i % 5}", "v": i, "t": i % 12} for i in range(240)]


def _want() -> list:
    flow, ev, _seq, out = recorder(False)
    for t in range(12):
        ev.send([r for r in ROWS if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=2)
    return sorted(out.items)


@pytest.mark.parametrize(
    "partitions, kw, batches",
    [(2, {}, 4), (4, {}, 2), (2, {"rows_per_batch": 20}, 12), (4, {"epochs_per_batch": 4}, 3)],
)
def test_the_default_cut_scales_with_the_partitions(
    spark: Any, tmp_path: Any, monkeypatch: Any, partitions: int, kw: dict, batches: int
) -> None:
    monkeypatch.setattr(batch_run, "ROWS_PER_PARTITION", 30)  # (60 rows a batch on 2 partitions: 3 epochs)
    flow, _ev, _seq, out = recorder(False)
    backend = Backend(spark, checkpoint=str(tmp_path), partitions=partitions, local_loops=0)
    df = spark.createDataFrame(ROWS, "k string, v long, t long")
    backend.run(flow, {"events": Source(df, time="t")}, **kw)
    assert len(backend.metrics.batches) == batches
    assert sorted(out.items) == _want()


def test_default_rows_is_per_partition() -> None:
    assert batch_run.default_rows(1) == batch_run.ROWS_PER_PARTITION
    assert batch_run.default_rows(3) == 3 * batch_run.ROWS_PER_PARTITION
