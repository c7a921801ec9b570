"""The fast paths of the Spark tasks give exactly what the general paths give: Arrow row
cells from inputs that feed boundaries directly, flat-tuple cells, bin-tagged fold
batches."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import KeyFunctionError
from tstate.operators.stateful import BinBatch
from tstate.spark import task as T
from tstate.spark import wire as W
from tstate.spark.plan import Plan
from tstate.errors import SparkError
from tstate.spark.records import (
    decode_binned, decode_cells, decode_groups, decode_records, encode_binned_rows, encode_records, encode_rows,
)

flat = st.tuples(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(), st.text() | st.binary())


@given(st.lists(flat, min_size=1, max_size=8))
def test_flat_tuples_round_trip_as_tuples(records: list) -> None:
    cell = encode_records(records, "op")
    back = decode_records(cell)
    assert back == records and all(type(b) is tuple for b in back)
    assert [type(x) for b in back for x in b] == [type(x) for r in records for x in r]


def test_nested_tuples_still_take_the_general_form() -> None:
    recs = [(1, (2, 3)), (4, [5])]
    assert decode_records(encode_records(recs, "op")) == recs


@pytest.mark.parametrize("shape", ["dict", "tuple", "value"])
def test_row_cells_decode_like_to_pylist(shape: str) -> None:
    t = pa.table({"k": ["a", None, "c"], "at": [dt.datetime(2001, 1, 1), None, dt.datetime(2002, 2, 2)], "n": [1, 2, 3]})
    want = T.to_records(t.to_batches()[0].slice(1), shape)
    assert decode_records(encode_rows(t.slice(1), shape)) == want
    cells = [encode_rows(t.slice(0, 1), shape), encode_records([(1, 2)], "op"), encode_rows(t.slice(1), shape)]
    assert decode_cells(cells) == [T.to_records(t.to_batches()[0].slice(0, 1), shape), [(1, 2)], want]


def _flow(direct: bool) -> tuple[ts.Dataflow, Any]:
    flow = ts.Dataflow("f")
    events = flow.input("events")
    src = events if direct else events.map(lambda r: r)

    @flow.stateful(src, key=lambda r: r["k"], state=int, bins=8)
    def count(n: int, r: Any, ctx: ts.Context) -> int:
        return n + 1

    events.collect()  # a sink right on the input
    return flow, count


def _cells(rows: list[Any], directory: str) -> dict[Any, Any]:
    """The rows' records by (kind, dest, node, bin, time); a sink's part file (its row is
    a reference: tstate.spark.output) by the times it holds."""

    from tstate.spark import binstore
    from tstate.spark.output import Part, read_part

    out: dict[Any, Any] = {}
    for k, dest, node, b, t, p in rows:
        if k == W.RECORDS and b == W.GROUPED:  # several bins' records in one cell: per bin
            groups, also = decode_groups(p)
            for to in (node, *also):
                for b2, recs in groups:
                    out.setdefault((k, dest, to, b2, t), []).extend(recs)
            continue
        if k == W.RECORDS and b == W.BINNED:  # several bins' rows in one Arrow cell: per bin
            for b2, recs in decode_binned([p])[0]:
                out.setdefault((k, dest, node, b2, t), []).extend(recs)
            continue
        if k == W.SINK:
            for tt, recs in read_part(binstore.store(directory).fs, Part.of_row(p)):
                out.setdefault((k, dest, node, b, tt), []).extend(recs)
            continue
        recs = decode_records(p)
        if k == W.HELD:  # held records may come grouped by time: the same per time
            recs = sorted(map(tuple, recs), key=lambda x: x[0])
        out.setdefault((k, dest, node, b, t), []).extend(recs)
    return out


@pytest.mark.parametrize("time_column", [None, "t"])
def test_input_rows_fast_path_equals_general_path(time_column: Any, monkeypatch: Any, tmp_path: Any) -> None:
    flow, count = _flow(True)
    plan = Plan.of(flow)
    b = count.node
    info = W.BatchInfo(3, 2, 5, str(tmp_path), None, 1, "ab", (0, 1), {b: tuple(i % 2 for i in range(8))}, {b: frozenset()})
    tbl = pa.table({"k": [f"k{i % 7}" for i in range(60)], "t": [None if i == 5 else i % 9 for i in range(60)]})
    batches = tbl.to_batches(max_chunksize=25)

    def run(direct: bool) -> dict[Any, Any]:
        monkeypatch.setattr(T, "direct", lambda plan, node: direct)
        out = list(T.input_task(plan, info, "events", "dict", time_column, 3)(iter(batches)))
        return _cells([tuple(r.values()) for r in pa.Table.from_batches(out).to_pylist()], str(tmp_path))

    fast, general = run(True), run(False)
    assert fast == general
    # the fast path's rows travel as one binned cell per (boundary, destination, time)
    monkeypatch.setattr(T, "direct", lambda plan, node: True)
    got = T.input_task(plan, info, "events", "dict", time_column, 3)(iter(batches))
    cells = [r for r in pa.Table.from_batches(list(got)).to_pylist() if r["kind"] == W.RECORDS]
    assert cells and all(r["bin"] == W.BINNED for r in cells)
    assert len(cells) == len({(r["dest"], r["node"], r["time"]) for r in cells})
    assert any(k[0] == W.RECORDS for k in fast) and any(k[0] == W.SINK for k in fast)
    if time_column:
        assert any(k[0] == W.HELD for k in fast)


@given(st.lists(st.tuples(st.integers(0, 5), st.text(max_size=3) | st.none(), st.integers(-5, 5)), max_size=30))
def test_binned_rows_cells_give_each_bin_its_rows(rows: list[tuple[int, Any, int]]) -> None:
    """Reference: the rows grouped by bin in a dict, in order, bins in ascending runs."""
    rows = sorted(rows, key=lambda r: r[0])  # (the writer sends equal bins adjacent)
    table = pa.table({"k": pa.array([r[1] for r in rows], pa.string()), "n": pa.array([r[2] for r in rows], pa.int64())})
    other = pa.table({"k": pa.array(["z"], pa.string()), "n": pa.array([9], pa.int64())})
    want: dict[int, list[Any]] = {}
    for b, k, n in rows:
        want.setdefault(b, []).append({"k": k, "n": n})
    cells = [encode_binned_rows(table, [r[0] for r in rows], "dict"), encode_binned_rows(other, [7], "tuple")]
    first, second = decode_binned(cells)
    assert dict(first) == want and [b for b, _ in first] == sorted(want)
    assert second == [(7, [("z", 9)])]


def test_binned_rows_cell_refuses_other_cells() -> None:
    for cell in (encode_records([1], "op"), encode_rows(pa.table({"k": [1]}), "dict")):
        with pytest.raises(SparkError, match="cell 0 of op: not a binned rows cell"):
            decode_binned([cell], where=lambda i: f"cell {i} of op")


KEYS_SEEN: list[type] = []


def _seen_key(r: Any) -> Any:
    KEYS_SEEN.append(type(r))
    return r["k"]


@pytest.mark.parametrize("key", [_seen_key, lambda r: r.copy()["k"], lambda r: (r.get("k"), len(r), "t" in r)])
@pytest.mark.parametrize("time_column", [None, "t"])
def test_input_fast_path_without_sinks_keys_row_views_like_dicts(key: Any, time_column: Any, monkeypatch: Any, tmp_path: Any) -> None:
    """An input feeding only a boundary keys its rows from row views (no dict per row)
    -- a key function needing a dict gets dicts -- and its cells, held-back records and
    late count equal the general path's."""
    flow = ts.Dataflow("f")
    events = flow.input("events")

    @flow.stateful(events, key=key, state=int, bins=8)
    def count(n: int, r: Any, ctx: ts.Context) -> int:
        return n + 1

    plan = Plan.of(flow)
    b = count.node
    info = W.BatchInfo(3, 2, 5, str(tmp_path), None, 1, "ab", (0, 1), {b: tuple(i % 2 for i in range(8))}, {b: frozenset()})
    tbl = pa.table({"k": [f"k{i % 7}" for i in range(60)], "t": [None if i == 5 else i % 9 for i in range(60)]})
    batches = tbl.to_batches(max_chunksize=25)

    def run(direct: bool) -> tuple[dict[Any, Any], int]:
        monkeypatch.setattr(T, "direct", lambda plan, node: direct)
        late = _Late()
        out = list(T.input_task(plan, info, "events", "dict", time_column, 3, late)(iter(batches)))
        return _cells([tuple(r.values()) for r in pa.Table.from_batches(out).to_pylist()], str(tmp_path)), late.n

    KEYS_SEEN.clear()
    (fast, fast_late), (general, general_late) = run(True), run(False)
    assert fast == general and fast_late == general_late
    assert any(k[0] == W.RECORDS for k in fast)
    if time_column:
        assert any(k[0] == W.HELD for k in fast) and fast_late > 0
    if key is _seen_key:  # the fast path's keys came from views; the general path's from dicts
        from tstate.spark.row_views import RowView

        assert set(KEYS_SEEN) == {RowView, dict}


class _Late:
    """A stand-in for the late-rows accumulator."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += n


def test_input_fast_path_key_error_is_named(monkeypatch: Any) -> None:
    flow, count = _flow(True)
    plan = Plan.of(flow)
    b = count.node
    info = W.BatchInfo(0, 0, 1, "/nowhere", None, 1, "ab", (0,), {b: (0,) * 8}, {b: frozenset()})
    batches = pa.table({"x": [1, 2]}).to_batches()
    with pytest.raises(KeyFunctionError, match="operator 'count'"):
        list(T.input_task(plan, info, "events", "dict", None, 0)(iter(batches)))


def test_direct_only_when_records_are_the_rows() -> None:
    assert T.direct(Plan.of(_flow(True)[0]), 0)
    assert not T.direct(Plan.of(_flow(False)[0]), 0)


def test_fold_applies_bin_batches_like_plain_batches() -> None:
    def build() -> tuple[ts.Dataflow, Any, Any]:
        flow = ts.Dataflow("fold")
        inp = flow.input("in")

        @flow.fold_bins(inp, key=lambda r: r[0], state=int, bins=4)
        def total(states: dict, records: list, ctx: Any) -> None:
            for k, v in records:
                states[k] = states.get(k, 0) + v
            ctx.emit(sorted(states.items()))

        return flow, inp, total.collect()

    recs = [(f"k{i % 5}", i) for i in range(40)]
    flow, inp, out = build()
    inp.send(recs)
    inp.close()
    flow.run()
    router = Plan.of(flow).router(1)
    flow2, inp2, out2 = build()
    by_bin: dict[int, list[Any]] = {}
    for r in recs:
        by_bin.setdefault(router.bin(r[0]), []).append(r)
    for bn in sorted(by_bin):
        inp2.send(BinBatch(by_bin[bn], bn))
    inp2.close()
    flow2.run()
    assert sorted(map(str, out.records())) == sorted(map(str, out2.records()))
