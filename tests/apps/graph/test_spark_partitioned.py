"""The Spark layout of the graph app (``build(..., buckets=16, spread=True)``, what
``python -m apps.graph --backend spark`` runs): the edge counts in 16 keys and each
algorithm's one key in a bin of its own parity, so that on ``local[2]`` both partitions
work in every stage.  Its changes equal the embedded engine's default layout (one bucket,
every algorithm in key 0), epoch by epoch, PageRank's floats included."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest

import tstate as ts

pytest.importorskip("pyspark", reason="the Spark backend tests need the spark extra")

from apps.graph.__main__ import DEFAULT_INPUT, SPARK_BUCKETS  # noqa: E402
from apps.graph.io import EdgeFile  # noqa: E402
from apps.graph.pagerank import block_keys  # noqa: E402
from apps.graph.stream import ALGORITHMS, InputStats, build, spread_keys  # noqa: E402
from tests.apps.graph.test_spark_sample import WINDOW, _by_epoch, _embedded  # noqa: E402
from tstate.keys import bin_of, key_hash  # noqa: E402
from tstate.spark import Backend, Source  # noqa: E402


def test_spread_keys_balance_the_algorithms_over_the_partitions() -> None:
    pr = bin_of(key_hash(block_keys(1, 256)[0]), 256)
    comp, tri, deg = (bin_of(key_hash(k), 256) for k in spread_keys(256))
    # on 2 partitions: PageRank with degrees, components with triangles
    assert deg % 2 == pr % 2 and comp % 2 == tri % 2 == 1 - pr % 2
    # on 4 and on 8: each its own partition
    for p in (4, 8):
        assert len({b % p for b in (pr, comp, tri, deg)}) == 4


def test_partitioned_layout_on_local2_equals_the_embedded_engine(spark: Any, tmp_path: Any, staged: None) -> None:
    data = EdgeFile(DEFAULT_INPUT)
    epochs = 12
    batches = {e: b for e, b in data.batches() if e < epochs}
    ref = _embedded(batches, epochs)  # the embedded default: one bucket, every algorithm in key 0

    flow = ts.Dataflow("graph")
    updates = flow.input("updates").map(itemgetter(1, 2, 3), name="edge")
    analytics = build(
        flow, updates, ALGORITHMS, WINDOW, epochs, True, "skip", InputStats(), buckets=SPARK_BUCKETS, spread=True
    )
    sinks = {name: s.collect(name=f"out.{name}") for name, s in analytics.outputs().items()}
    rows = [(e, s, d, k) for e, recs in sorted(batches.items()) for s, d, k in recs]
    df = spark.createDataFrame(rows, "epoch bigint, src string, dst string, delta bigint")
    backend = Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2)
    backend.run(flow, {"updates": Source(df, time="epoch", record="tuple")}, epochs_per_batch=5)
    got = [(t, name, r) for name, sink in sinks.items() for t, r in sink.items]

    assert _by_epoch(got) == _by_epoch(ref)  # PageRank's floats too
    assert {name for _e, name, _r in ref} == set(sinks)
    m = backend.metrics.batches
    assert sum(b.loop_rounds for b in m) == 0 and all(b.partitions == 2 for b in m)
    # the edge counts live in several buckets, on both partitions
    keys = [r["key"] for r in backend.state(analytics.edges.op).frame.select("key").collect()]
    assert len(keys) > 2 and len({bin_of(key_hash(k), 256) % 2 for k in keys}) == 2
