"""The whole bundled sample on Spark (all 48 epochs, every algorithm, the default
PageRank tolerance) gives exactly the embedded engine's changes, epoch by epoch."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")

import tstate as ts  # noqa: E402
from apps.graph.__main__ import DEFAULT_INPUT, updates_frame  # noqa: E402
from apps.graph.io import EdgeFile  # noqa: E402
from apps.graph.stream import ALGORITHMS, GraphStream, InputStats, build  # noqa: E402
from tstate.spark import Backend, Source  # noqa: E402

WINDOW = 24


def _by_epoch(pairs: list[tuple[int, str, Any]]) -> dict[tuple[int, str], list[Any]]:
    out: dict[tuple[int, str], list[Any]] = {}
    for e, name, rec in pairs:
        out.setdefault((e, name), []).append(rec)
    return {k: sorted(v, key=repr) for k, v in out.items()}


def _embedded(batches: dict[int, list[Any]], epochs: int, blocks: int = 1) -> list[tuple[int, str, Any]]:
    """The embedded engine's changes ``(epoch, output, record)`` for ``batches``."""
    g = GraphStream(ALGORITHMS, workers=1, window=WINDOW, horizon=epochs, on_invalid="skip", blocks=blocks)
    ref: list[tuple[int, str, Any]] = []
    for e in range(epochs):
        for res in g.advance(e, batches.get(e, [])):
            ref.extend((res.epoch, name, r) for name, recs in res.changes.items() for r in recs)
    for res in g.close():
        ref.extend((res.epoch, name, r) for name, recs in res.changes.items() for r in recs)
    return ref


def _on_spark(
    spark: Any, tmp_path: Any, batches: dict[int, list[Any]], epochs: int, epochs_per_batch: int, blocks: int = 1,
    files: bool = False,
) -> tuple[list[tuple[int, str, Any]], Backend, set[str]]:
    """The same changes from the graph dataflow run on Spark (2 partitions), its
    backend, and the names of the dataflow's outputs; ``files``: the input as the app
    hands a large one to Spark (Parquet files read by Spark's reader)."""
    flow = ts.Dataflow("graph")
    updates = flow.input("updates").map(itemgetter(1, 2, 3), name="edge")
    analytics = build(flow, updates, ALGORITHMS, WINDOW, epochs, True, "skip", InputStats(), blocks=blocks)
    sinks = {name: s.collect(name=f"out.{name}") for name, s in analytics.outputs().items()}
    rows = [(e, s, d, k) for e, recs in sorted(batches.items()) for s, d, k in recs]
    if files:
        df = updates_frame(spark, rows, "string", staging=str(tmp_path / "input"), min_rows=0)
        assert df.inputFiles()  # (read from the files)
    else:
        df = updates_frame(spark, rows, "string")  # (as the app builds it: an Arrow table)
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2)
    backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=epochs_per_batch)
    return [(t, name, r) for name, sink in sinks.items() for t, r in sink.items], backend, set(sinks)


def test_whole_sample_on_spark_equals_the_embedded_engine(spark: Any, tmp_path: Any) -> None:
    data = EdgeFile(DEFAULT_INPUT)
    epochs = data.epochs
    batches = dict(data.batches())
    assert epochs == 48

    ref = _embedded(batches, epochs)
    # 2 batches of epochs (the window's expiries are held from one to the next) + closing
    # (the input as the app hands a large one to Spark: Parquet files, Spark's reader)
    got, backend, outputs = _on_spark(spark, tmp_path, batches, epochs, epochs_per_batch=WINDOW, files=True)

    assert _by_epoch(got) == _by_epoch(ref)
    assert {name for _e, name, _r in ref} == outputs  # every output has changes
    m = backend.metrics.batches
    # one block (the default): every algorithm is one timer per epoch, no loop rounds
    assert sum(b.loop_rounds for b in m) == 0


def test_sample_in_blocks_on_spark_equals_the_embedded_engine(spark: Any, tmp_path: Any) -> None:
    """With ``blocks > 1`` the algorithms loop (per vertex, PageRank per block): the
    first day of the sample gives the embedded engine's changes, in a few rounds per
    epoch, each batch's rounds in one task."""
    data = EdgeFile(DEFAULT_INPUT)
    epochs = 12
    batches = {e: b for e, b in data.batches() if e < epochs}
    ref = _embedded(batches, epochs, blocks=2)
    got, backend, _outputs = _on_spark(spark, tmp_path, batches, epochs, epochs_per_batch=6, blocks=2)

    assert _by_epoch(got) == _by_epoch(ref)  # PageRank's floats too: sums in a fixed order
    m = backend.metrics.batches
    assert epochs <= sum(b.loop_rounds for b in m)
    assert sum(b.loop_stages for b in m) <= len(m)  # the loops' rounds ran in one task per batch


@pytest.mark.parametrize(
    "rows, vtype",
    [
        ([(0, "a", "b", 1), (3, "b", "c", -1), (3, "a", "b", 1)], "string"),
        ([(0, 1, 2, 1), (2, 2**40, 3, -1)], "bigint"),
        ([], "string"),
    ],
)
@pytest.mark.parametrize("files", [False, True], ids=["arrow", "files"])
def test_updates_frame_is_the_rows_with_the_ddl_schema(
    spark: Any, tmp_path: Any, rows: list[Any], vtype: str, files: bool
) -> None:
    """The app's DataFrame -- an Arrow table, or (a large input: here any) Parquet files
    read by Spark's reader, one per core of the session -- has the schema and rows of
    ``createDataFrame`` over the same rows with the DDL schema."""
    ddl = spark.createDataFrame(rows, f"epoch bigint, src {vtype}, dst {vtype}, delta bigint")
    staging = str(tmp_path / "input") if files else None
    got = updates_frame(spark, rows, vtype, staging=staging, min_rows=0)
    assert [(f.name, f.dataType) for f in got.schema] == [(f.name, f.dataType) for f in ddl.schema]
    assert sorted(tuple(r) for r in got.collect()) == sorted(rows)
    if files:  # read by the executors from one file per core, none of it in the tasks
        assert len(got.inputFiles()) == spark.sparkContext.defaultParallelism
        again = updates_frame(spark, rows[:1], vtype, staging=staging, min_rows=0)  # the same staging directory
        assert sorted(tuple(r) for r in again.collect()) == rows[:1]
        assert sorted(tuple(r) for r in got.collect()) == sorted(rows)
    else:
        assert not got.inputFiles()


def test_updates_frame_stages_only_large_inputs(spark: Any, tmp_path: Any) -> None:
    """Below ``min_rows`` rows the rows stay a driver-local relation (no files written)."""
    rows = [(0, 1, 2, 1), (1, 2, 3, 1)]
    got = updates_frame(spark, rows, "bigint", staging=str(tmp_path / "input"), min_rows=3)
    assert not got.inputFiles() and not (tmp_path / "input").exists()
    assert sorted(tuple(r) for r in got.collect()) == rows
