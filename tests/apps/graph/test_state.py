"""The graph state is typed tstate state: it encodes, decodes and takes deltas (so it
can be checkpointed and migrated), and the docstring examples run."""

from __future__ import annotations

import doctest
import importlib

import pytest

from apps.graph.components import CCBlock, CCVertex, ComponentSizes
from apps.graph.degrees import DegreeBlock, DegreeHistogram, DegreeState
from apps.graph.edges import EdgeBucket
import numpy as np

from apps.graph.pagerank import PRBlock
from apps.graph.stream import GraphStream
from apps.graph.triangles import TriangleTotal, TriBlock, TriVertex
from tstate.plan import Stateful
from tstate.types import Map, StateCodec


def _states():
    return [
        EdgeBucket(counts=Map({(1, "a"): [2, 0], ("a", "b"): [0, 1]}), due={7: {(1, "a"): [1, -2]}, 9: {("a", "b"): [0, -1]}}, buckets=64),
        DegreeState(degree=3, old=2, pending=True),
        DegreeBlock(deg=Map({1: 2, "a": 1}), hist={2: 1, 1: 1}, delta={"a": -1}),
        CCBlock(
            adj=Map({1: {"a", 2}, "a": {1}, 2: {1}}), tree=Map({1: [1, 1, 0], "a": [1, 1, 1 << 20], 2: [1, 1, 7]}),
            sizes=Map({1: 3}), hist={3: 1}, touched={"a": None, 2: 5}, armed=4,
        ),
        TriBlock(adj=Map({1: {2, 3}, 2: {1, 3}, 3: {1, 2}}), count=Map({1: 1, 2: 1, 3: 1}), sum3=3, old={1: None}, before=0, armed=2),
        DegreeHistogram(counts={1: 4, 3: 1}, before={1: 3}),
        CCVertex(adj=Map({"ATL": 3, 7: 4}), label=7, parent="ATL", epoch=4, old=None, reset=True, armed=3, propose=["x"]),
        ComponentSizes(sizes={"a": 3, 1: 2}, hist={3: 1, 2: 1}, before=(2, 3)),
        PRBlock(
            ids=["a", None, 7], slots={"a": 0, 7: 2}, free=[1], indeg=np.array([1, 0, 2]).tobytes(),
            deg=np.array([2, 0, 0]).tobytes(), y=np.array([1.5, 0.0, 40.25]).tobytes(), r=np.zeros(3).tobytes(),
            shown=np.array([0.1, np.nan, 0.5]).tobytes(), src=np.array([0, 0]).tobytes(), tgt=np.array([17, 9]).tobytes(),
            starts=[0, 1, 2], blocks=2, epoch=3, changes=[("i", "a", 5, -1)], outs=[(0, 1, 17, 1)],
            inbox=[(3, np.array([2]).tobytes(), np.array([0.25]).tobytes())], parts=[(1, 41.75)],
        ),
        TriVertex(adj=Map({1: 0, "z": 2}), count=4, epoch=2, old=3, chg={1: -1}, owner=True),
        TriangleTotal(sum3=9, before=6),
    ]


@pytest.mark.parametrize("value", _states(), ids=lambda v: type(v).__name__)
def test_states_round_trip_through_the_codec(value):
    codec = StateCodec(type(value))
    codec.check(value)
    assert codec.decode(codec.encode(value)) == value


def test_adjacency_maps_give_deltas():
    codec = StateCodec(CCVertex)
    v = codec.decode(codec.encode(CCVertex(adj=Map({"a": 0, "b": 0}), label="a")))
    v.adj.mark_clean()
    v.adj["c"] = 5
    del v.adj["a"]
    base = CCVertex(adj=Map({"a": 0, "b": 0}), label="a")
    assert codec.apply_delta(base, codec.encode_delta(v)) == v


def _encode_every_state(g: GraphStream) -> int:
    """Encode and decode every key's state of every stateful operator; how many."""
    seen = 0
    for workers in g.execution.operators:
        for op in workers:
            bins = getattr(op, "bins", None)
            if not isinstance(bins, dict) or not isinstance(op.node, Stateful):
                continue
            codec = StateCodec(op.node.state)
            for b in bins.values():
                for value in b.states.values():
                    assert codec.decode(codec.encode(value)) == value
                    seen += 1
    return seen


@pytest.mark.parametrize("blocks, keys", [(1, 5), (3, 20)])
def test_state_of_a_running_graph_is_encodable(blocks, keys):
    """One key per algorithm (and one bucket of edge counts) with blocks=1, per vertex
    with more."""
    g = GraphStream(workers=3, window=2, blocks=blocks)
    g.advance(0, [("a", "b"), ("b", "c"), (1, "a"), ("c", "a")])
    g.advance(1, [("a", "b", -1), (2, 1)])
    assert _encode_every_state(g) >= keys  # pending window expiries included
    g.close()


def test_pagerank_state_is_encodable_after_every_step():
    """A PageRank block holds its vertices' arrays as bytes and the round's messages as
    lists: the state encodes after every step (Spark writes the loop's state after every
    round), not only between epochs -- hubs included."""
    g = GraphStream(("pagerank",), workers=2, blocks=2)
    g.advance(0, [(i, 0) for i in range(1, 40)] + [(0, "x")])
    assert max(g.view.ranks.data.values()) > 0.3
    g.input.send([(i, 0) for i in range(40, 50)] + [("x", 1)])
    g.input.advance_to(2)
    steps = 0
    while g._pending(1):
        g.execution.step()
        steps += 1
        assert _encode_every_state(g) > 0
    assert steps > 10
    g.close()


@pytest.mark.parametrize("name", ["apps.graph", "apps.graph.stream"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


def test_root_scope_state_is_queryable_as_arrow_and_dict():
    g = GraphStream(("degrees",), workers=2)
    g.advance(0, [("a", "b"), ("b", "c"), ("c", "a"), ("c", "a")])
    edges = g.flow.state(g.analytics.edges.op, format="dict")
    assert {p: c for b in edges.values() for p, c in b.counts.items()} == {
        ("a", "b"): [1, 0],
        ("a", "c"): [0, 2],
        ("b", "c"): [1, 0],
    }
    table = g.flow.state(g.analytics.edges.op, format="arrow")
    assert table.num_rows == 1 and "counts" in table.column_names  # one bucket (blocks=1)
    (block,) = g.flow.state(g.analytics.degrees.op, format="dict").values()
    assert dict(block.deg) == {"a": 2, "b": 2, "c": 2} and block.hist == {2: 3}
    g.close()
    g = GraphStream(("degrees",), workers=2, blocks=3)  # one key per vertex
    g.advance(0, [("a", "b"), ("b", "c"), ("c", "a"), ("c", "a")])
    degrees = g.flow.state(g.analytics.degrees.op, format="dict")
    assert {v: s.degree for v, s in degrees.items()} == {"a": 2, "b": 2, "c": 2}
    g.close()
