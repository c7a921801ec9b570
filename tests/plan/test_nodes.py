"""The plan's nodes: each stateless node's per-batch rule against a per-record model,
the scope edges' re-timing against the formulas of the time types, and what a graph
refuses when it is built."""

from __future__ import annotations

from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.errors import ConfigurationError, GraphError, ProgressError
from tstate.plan import Concat, Enter, Exchange, Feedback, Filter, FlatMap, Graph, Inspect, Leave, Map, Pact, Scope, Sink
from tstate.plan.ends import Input
from tstate.io.inputs import InputHandle
from tstate.io.sinks import Collected
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import MAX_SEQUENCED_EPOCH, SEQUENCE_SPAN, TIME_MAX, Product

ROOT = Scope("f")
LOOP = Scope("loop", depth=1, parent=ROOT)
SEQ = Scope("seq", depth=1, parent=ROOT, sequenced=True)

batches = st.lists(st.integers(-1000, 1000), max_size=30)


@given(batches, st.integers(0, 50))
def test_stateless_rules_are_their_per_record_definitions(recs: list[int], t: int) -> None:
    assert Map(name="m", scope=ROOT, fn=lambda x: x * 3).apply(t, recs) == [x * 3 for x in recs]
    assert Filter(name="f", scope=ROOT, predicate=lambda x: x % 2 == 0).apply(t, recs) == [x for x in recs if x % 2 == 0]
    flat = FlatMap(name="fm", scope=ROOT, fn=lambda x: [x] * (abs(x) % 3)).apply(t, recs)
    assert flat == [x for x in recs for _ in range(abs(x) % 3)]
    seen: list[tuple[int, int]] = []
    out = Inspect(name="i", scope=ROOT, fn=lambda tt, x: seen.append((tt, x))).apply(t, recs)
    assert out is recs and seen == [(t, x) for x in recs]
    assert Exchange(name="x", scope=ROOT, key=abs, bins=4).apply(t, recs) is recs


@given(batches)
def test_failing_record_is_the_first_record_that_raises(recs: list[int]) -> None:
    node = Map(name="m", scope=ROOT, fn=lambda x: 1 // (x % 7))
    expected = next((x for x in recs if x % 7 == 0), None)
    assert node.failing_record(0, recs) == expected


def test_pacts_store_the_bins_once() -> None:
    key = lambda r: r  # noqa: E731
    assert Exchange(name="x", scope=ROOT, key=key, bins=8).pacts() == (Pact(key, 8),)
    assert Concat(name="c", scope=ROOT, inputs=3).pacts() == (None, None, None)
    with pytest.raises(ConfigurationError, match="power of two"):
        Exchange(name="x", scope=ROOT, key=key, bins=6)


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 5), st.one_of(st.none(), st.integers(0, 50)),
       st.booleans())
def test_feedback_advances_and_drops_past_its_limit(outer: int, k: int, step: int, limit: Optional[int], seq: bool) -> None:
    scope = SEQ if seq else LOOP
    fb = Feedback(name="fb", scope=scope, step=step, max_iterations=limit)
    t = scope.at(outer, k) if seq and outer <= MAX_SEQUENCED_EPOCH else Product(outer, k)
    if seq and outer > MAX_SEQUENCED_EPOCH:
        return
    nxt = fb.next_time(t)
    round_after = k + step
    if limit is not None and round_after > limit:
        assert nxt is None
    else:
        assert nxt == (scope.at(outer, round_after) if seq else Product(outer, round_after))
        assert nxt is not None and fb.round_of(nxt) == round_after
        assert fb.advance(t) == (nxt, round_after)
    assert fb.summaries() == [[[PathSummary.feedback(1, step)]]]


def test_feedback_overflows_at_time_max() -> None:
    assert Feedback(name="fb", scope=LOOP).next_time(Product(0, TIME_MAX)) is None


def test_enter_and_leave_retime() -> None:
    assert Enter(name="e", scope=LOOP).time_inside(5) == Product(5, 0)
    assert Enter(name="e", scope=SEQ).time_inside(5) == Product(5, 5 * SEQUENCE_SPAN)
    with pytest.raises(ProgressError, match="'e': epoch -1 entering a sequenced scope"):
        Enter(name="e", scope=SEQ).time_inside(-1)
    assert Leave(name="l", scope=ROOT, inner=LOOP).time_outside(Product(3, 9)) == 3
    assert Enter(name="e", scope=LOOP).input_depths() == [0]
    assert Leave(name="l", scope=ROOT, inner=LOOP).input_depths() == [1]


def test_feedback_needs_a_loop_and_a_positive_step() -> None:
    with pytest.raises(GraphError, match="needs an iterate scope"):
        Feedback(name="fb", scope=ROOT)
    with pytest.raises(GraphError, match="step must be >= 1"):
        Feedback(name="fb", scope=LOOP, step=0)


def test_graph_checks_names_arity_scopes_and_connections() -> None:
    g = Graph("g")
    i = g.add(Input(name="in", scope=g.root, handle=InputHandle("in", 10)), [])
    m = g.add(Map(name="m", scope=g.root, fn=str), [(i, 0)])
    with pytest.raises(GraphError, match="two operators are named 'm'"):
        g.add(Map(name="m", scope=g.root, fn=str), [(i, 0)])
    with pytest.raises(GraphError, match="has 2 inputs, got 1"):
        g.add(Concat(name="c", scope=g.root), [(i, 0)])
    loop = Scope("loop", depth=1, parent=g.root)
    with pytest.raises(GraphError, match="input 0 reads 'm' in Scope\\('g', depth=0\\), but the port reads Scope\\('loop'"):
        g.add(Map(name="inner", scope=loop, fn=str), [(m, 0)])
    e = g.add(Enter(name="e", scope=loop), [(m, 0)])
    fb = g.add(Feedback(name="fb", scope=loop), [None], later=[0])
    with pytest.raises(GraphError, match="'fb' \\(feedback\\): input 0 is not connected"):
        g.validate()
    c = g.add(Concat(name="c", scope=loop), [(e, 0), (fb, 0)])
    g.connect(fb, 0, (c, 0))
    g.validate()
    lv = g.add(Leave(name="l", scope=g.root, inner=loop), [(c, 0)])
    g.add(Sink(name="s", scope=g.root, sink=Collected()), [(lv, 0)])
    assert g.consumers(c) == [(fb, 0), (lv, 0)]
    assert g.index("fb") == fb and [n.kind for _, n in g.of_type(Map)] == ["map"]
    with pytest.raises(GraphError, match="already connected"):
        g.connect(fb, 0, (c, 0))
    with pytest.raises(GraphError, match="no operator named 'x'"):
        g.index("x")


def test_the_former_exchange_contract_name_still_works() -> None:
    import tstate as ts

    with pytest.warns(DeprecationWarning, match="tstate.Exchange is tstate.plan.Pact"):
        assert ts.Exchange is Pact
