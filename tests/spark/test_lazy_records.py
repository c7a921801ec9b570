"""tstate.spark.lazy_records: a driver sink's records decoded on first read equal the
plain decode of their cells (hypothesis, against ``decode_records`` of each cell
concatenated); ``len`` decodes nothing; a count that disagrees with the cells is a
SparkError naming where they came from; on Spark, a sink that only counts its records
decodes none of them and counts what the embedded engine's sink counts, while a
collecting sink beside it gets the records themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import SparkError
from tstate.spark import Backend, Source
from tstate.spark.lazy_records import LazyRecords
from tstate.spark.records import decode_records, encode_records

from .flows import embedded, keyed
from .test_output import ROW, rows_of

values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.none(), st.booleans())
records = st.one_of(values, st.tuples(values, values), st.lists(values, max_size=3))


@settings(max_examples=60, deadline=None)
@given(cells=st.lists(st.lists(records, max_size=6), max_size=4), at=st.integers(0, 30))
def test_lazy_records_equal_the_plain_decode(cells: list[list[Any]], at: int) -> None:
    encoded = [encode_records(c, "op") for c in cells]
    want = [r for e in encoded for r in decode_records(e)]
    rs = LazyRecords(encoded, len(want))
    assert len(rs) == len(want) and not rs.decoded and bool(rs) == bool(want)
    assert list(rs) == want and rs.decoded and rs == want and rs == tuple(want)
    if want:
        assert rs[at % len(want)] == want[at % len(want)] and rs[1:] == want[1:]
    assert repr(rs) == repr(want)


def test_a_count_that_disagrees_with_the_cells_is_named() -> None:
    rs = LazyRecords([encode_records([1, 2], "op")], 3, where=lambda: "part p.arrow (sink output, time 4)")
    assert len(rs) == 3
    with pytest.raises(SparkError, match=r"part p\.arrow \(sink output, time 4\): 2 records decoded, its index says 3"):
        list(rs)


class Counting(ts.io.Sink):
    """Counts its records per time, reading none of them."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.decoded = 0

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        self.counts[time] = self.counts.get(time, 0) + len(records)
        self.decoded += bool(getattr(records, "decoded", True))


def test_a_counting_sink_on_spark_decodes_nothing(spark: Any, tmp_path: Path) -> None:
    from .cluster_job import out_stream

    rows = rows_of(300, epochs=4)
    ref_out, _ = embedded(rows)
    flow, _ev, _stats, out = keyed()
    counting = Counting()
    flow.sink(out_stream(flow), counting, name="counting")
    Backend(spark, checkpoint=str(tmp_path / "ck"), partitions=2).run(
        flow, {"events": Source(spark.createDataFrame(rows, ROW), time="t")}, epochs_per_batch=2
    )
    want: dict[Any, int] = {}
    for t, _r in ref_out:
        want[t] = want.get(t, 0) + 1
    assert counting.counts == want and sum(want.values()) > 0
    assert counting.decoded == 0
    assert sorted(out.items, key=repr) == ref_out  # the collecting sink beside it: the records themselves
