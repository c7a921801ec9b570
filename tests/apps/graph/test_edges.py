"""Edge updates: validation, the sliding window, and the per-epoch topology changes."""

from __future__ import annotations

import numpy as np
import pytest

import tstate as ts
from apps.graph.edges import (
    BUCKETS,
    _bucket,
    GraphInputError,
    InputStats,
    check_vertex,
    clean,
    consolidate,
    ordered,
    parse_update,
    vertex_lt,
    vertex_rank,
    window,
)
from tstate.errors import OperatorError


def test_vertex_ids_are_str_or_int():
    assert check_vertex("ATL") == "ATL"
    assert check_vertex(7) == 7
    assert type(check_vertex(np.int64(7))) is int
    assert type(check_vertex(np.str_("x"))) is str
    assert check_vertex(-(2**63)) == -(2**63)
    for bad in (True, 1.0, 1.5, None, b"x", ("a",), object(), 2**63, -(2**63) - 1):
        with pytest.raises(GraphInputError):
            check_vertex(bad)


def test_parse_update_forms_and_ignored_records():
    assert parse_update(("a", "b")) == ("a", "b", 1)
    assert parse_update(["a", 2, -3]) == ("a", 2, -3)
    assert parse_update(("a", "b", np.int32(2))) == ("a", "b", 2)
    assert parse_update(("a", "a", 1)) is None  # self-loop
    assert parse_update(("a", "b", 0)) is None  # no change
    for bad in ("ab", ("a",), ("a", "b", 1, 2), ("a", "b", 1.0), ("a", "b", True), {"src": "a"}):
        with pytest.raises(GraphInputError):
            parse_update(bad)


def test_vertex_order_puts_ints_before_strs():
    vs = ["b", 10, "a", 2, -1]
    assert sorted(vs, key=vertex_rank) == [-1, 2, 10, "a", "b"]
    assert vertex_lt(3, "1") and not vertex_lt("1", 3)
    assert ordered("b", 1) == (1, "b") and ordered("a", "b") == ("a", "b")


def _run(records_by_epoch, build, workers=1):
    flow = ts.Dataflow("t")
    inp = flow.input("in")
    out = build(flow, inp)
    for t, recs in records_by_epoch:
        inp.advance_to(t)
        inp.send(recs)
    inp.close()
    flow.run(workers=workers)
    return flow, {t: sorted(r, key=repr) for t, r in out.by_time().items()}


def test_clean_drops_self_loops_and_counts_them():
    stats = InputStats()
    _, got = _run([(0, [("a", "b", 1), ("a", "a", 1), ("b", "c", 0), ("c", "d")])], lambda f, s: clean(s, stats=stats).collect())
    assert got == {0: [("a", "b", 1), ("c", "d", 1)]}
    assert (stats.self_loops, stats.zero, stats.invalid) == (1, 1, 0)


def test_clean_raises_or_skips_invalid_records():
    with pytest.raises(OperatorError) as info:
        _run([(0, [("a", 1.5, 1)])], lambda f, s: clean(s).collect())
    assert isinstance(info.value.__cause__, GraphInputError)
    stats = InputStats()
    _, got = _run([(0, [("a", None), (True, "b"), ("a", "b"), (2**64, 1, 1)])], lambda f, s: clean(s, "skip", stats).collect())
    assert got == {0: [("a", "b", 1)]} and stats.invalid == 3
    with pytest.raises(ValueError):
        clean(ts.Dataflow().input(), on_invalid="ignore")


def test_window_retracts_insertions_and_passes_retractions():
    recs = [(0, [("a", "b", 1), ("b", "c", 2)]), (1, [("a", "b", -1)])]
    _, got = _run(recs, lambda f, s: window(f, s, 3).collect())
    assert got == {0: [("a", "b", 1), ("b", "c", 2)], 1: [("a", "b", -1)], 3: [("a", "b", -1), ("b", "c", -2)]}
    _, got = _run(recs, lambda f, s: window(f, s, 3, horizon=3).collect())
    assert 3 not in got
    with pytest.raises(ValueError):
        window(ts.Dataflow(), ts.Dataflow().input(), 0)


def _changes(records_by_epoch, workers=1, buckets=1):
    res = {}

    def build(flow, s):
        ch = consolidate(flow, s, buckets=buckets)
        res["d"] = ch.directed.collect(name="directed")
        res["u"] = ch.undirected.collect(name="undirected")
        res["op"] = ch.op
        return ch.directed.collect(name="out")

    flow, _ = _run(records_by_epoch, build, workers)
    by = lambda c: {t: sorted(v, key=repr) for t, v in c.by_time().items()}  # noqa: E731
    return flow, res["op"], by(res["d"]), by(res["u"])


@pytest.mark.parametrize("buckets", [1, 3])
def test_consolidate_emits_topology_changes_only(buckets):
    epochs = [
        (0, [("a", "b", 1), ("a", "b", 1), ("b", "a", 1)]),  # a duplicate: one edge, count 2
        (1, [("a", "b", -1)]),  # one occurrence left: nothing changes
        (2, [("a", "b", -1), ("c", "d", -1)]),  # a -> b gone, b -> a stays; c -> d was never there
        (3, [("b", "a", -1), ("x", "y", 1), ("x", "y", -1)]),  # insert + retract in one epoch: no change
        (4, [("x", "y", -1), ("x", "y", 1)]),  # the same in the other order: the sum is what counts
    ]
    flow, op, d, u = _changes(epochs, buckets=buckets)
    assert d == {0: [("a", "b", 1), ("b", "a", 1)], 2: [("a", "b", -1)], 3: [("b", "a", -1)]}
    assert u == {0: [("a", "b", 1)], 3: [("a", "b", -1)]}
    assert flow.state(op, format="dict") == {}  # absent pairs hold no state: no bucket either


def test_deleting_an_absent_edge_is_ignored_not_remembered():
    _, _, d, _ = _changes([(0, [("a", "b", -1)]), (1, [("a", "b", 1)])])
    assert d == {1: [("a", "b", 1)]}


@pytest.mark.parametrize("buckets", [1, 4])
def test_edge_state_is_typed_and_queryable(buckets):
    """The counts live in buckets of pairs (one key each), every pair in its bucket."""
    flow, op, _, _ = _changes([(0, [(1, "b", 2), ("b", 1, 1), (2, 3, 1)])], workers=3, buckets=buckets)
    state = flow.state(op, format="dict")
    counts = {p: c for bucket in state.values() for p, c in bucket.counts.items()}
    assert counts == {(1, "b"): [2, 1], (2, 3): [1, 0]}
    for k, bucket in state.items():
        assert bucket.buckets == buckets and not bucket.due
        assert all(_bucket((a, b), buckets) == k for a, b in bucket.counts)


def test_a_restore_refuses_another_number_of_buckets(tmp_path):
    """The buckets are part of the state's layout: a checkpoint taken with one bucket does
    not resume with 64: the old bucket fails, naming the operator, when it is next used
    (here by the pair (2, 66), which is in bucket 0 of 64)."""
    from tstate.errors import ConfigurationError, OperatorError

    def run(buckets, epochs):
        flow = ts.Dataflow("t")
        src = flow.source(ts.io.from_batches(lambda: iter(epochs)), name="src")
        consolidate(flow, src, buckets=buckets).directed.collect()
        flow.run(1, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=1))

    run(1, [(0, [(1, 2, 1)]), (1, [(2, 3, 1)])])
    with pytest.raises((ConfigurationError, OperatorError), match="buckets"):
        run(BUCKETS, [(0, [(1, 2, 1)]), (1, [(2, 3, 1)]), (2, [(2, 66, 1)])])


@pytest.mark.parametrize("workers", [1, 2, 5])
@pytest.mark.parametrize("buckets", [1, BUCKETS])
def test_consolidate_is_the_same_on_any_number_of_workers(workers, buckets):
    epochs = [(t, [(i % 5, (i * 7 + t) % 6, 1 if (i + t) % 3 else -1) for i in range(20)]) for t in range(6)]
    epochs = [(t, [r for r in recs if r[0] != r[1]]) for t, recs in epochs]
    assert _changes(epochs, workers, buckets)[2:] == _changes(epochs, 1, 1)[2:]


@pytest.mark.parametrize("workers", [1, 3])
def test_the_fused_path_validates_too(workers):
    from apps.graph.stream import GraphStream

    bad = [("a", "b", 1), ("a", "a", 1), ("b", "c", 0), ("x", 1.5, 1), ["c", "d"], (None,), ("q", "r", True)]
    g = GraphStream(("degrees",), workers=workers, on_invalid="skip")
    g.advance(0, bad)
    assert g.view.degrees.data == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert (g.stats.self_loops, g.stats.zero, g.stats.invalid) == (1, 1, 3)
    g.close()
    g = GraphStream(("degrees",), workers=workers)
    with pytest.raises(OperatorError) as info:
        g.advance(0, bad)
    assert isinstance(info.value.__cause__, GraphInputError)


@pytest.mark.parametrize("buckets", [1, BUCKETS])
def test_consolidate_with_lists_gives_the_same_changes_as_lists(buckets):
    """``lists=True`` (the Spark layout): the same changes, each a list ``[u, v, d]``."""
    epochs = [(t, [(i % 5, (i * 7 + t) % 6, 1 if (i + t) % 3 else -1) for i in range(20)]) for t in range(6)]
    epochs = [(t, [r for r in recs if r[0] != r[1]]) for t, recs in epochs]

    def per_epoch(lists):
        res = {}

        def build(flow, s):
            ch = consolidate(flow, s, buckets=buckets, lists=lists)
            res["c"] = ch.changes.collect(name="changes")
            return res["c"]

        _run(epochs, build)
        out = {}
        for t, recs in res["c"].by_time().items():
            d = [c for r in recs for c in r[0]]
            u = [c for r in recs for c in r[1]]
            out[t] = (d, u)
        return out

    tuples, lists = per_epoch(False), per_epoch(True)
    assert tuples and any(d for d, _u in tuples.values())
    assert all(type(c) is tuple for d, u in tuples.values() for c in d + u)
    assert all(type(c) is list for d, u in lists.values() for c in d + u)
    assert {t: (sorted(map(tuple, d)), sorted(map(tuple, u))) for t, (d, u) in lists.items()} == {
        t: (sorted(d), sorted(u)) for t, (d, u) in tuples.items()
    }
