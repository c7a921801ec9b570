"""The spanning forest behind ``blocks=1`` components, against networkx after every edge.

Random insertions and deletions (ints and strs as vertex ids) are applied one at a time;
after each, the labels must be every component's smallest vertex (networkx's
``connected_components`` on the same edges), and the forest must be a spanning forest
of the graph rooted at the labels with levels increasing away from the root; per
"epoch" (a run of operations), ``touched`` must hold the label at its start of every
vertex whose label changed.
"""

from __future__ import annotations

import random
from typing import Any

import networkx as nx
from attrs import define
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.graph.edges import Vertex, vertex_rank
from apps.graph.forest import SpanningForest
from tstate.types import Map, StateCodec


def check(f: SpanningForest, g: nx.Graph) -> None:
    """``f`` is exact for ``g`` (see the module docstring)."""
    assert {v: set(s) for v, s in f.adj.items()} == {v: set(g[v]) for v in g if g.degree(v)}
    assert set(f.tree) == set(f.adj)
    for comp in nx.connected_components(g):
        low = min(comp, key=vertex_rank)
        for v in comp:
            label, parent, level = f.tree.peek(v)
            assert label == low, (v, label, low)
            if parent == v:
                assert v == low, f"{v!r} is a root but not its component's smallest vertex"
            else:
                assert parent in g[v], f"{v!r}'s parent {parent!r} is not a neighbour"
                assert level > f.tree.peek(parent)[2], f"levels do not increase from {parent!r} to {v!r}"


vertices = st.one_of(st.integers(0, 9), st.sampled_from(["a", "b", "c", "x"]))
ops = st.lists(st.tuples(st.booleans(), vertices, vertices), max_size=40)


@settings(max_examples=200)
@given(st.lists(ops, min_size=1, max_size=4))
def test_labels_and_tree_equal_networkx_after_every_edge(epochs):
    f = SpanningForest(Map(), Map())
    g = nx.Graph()
    for epoch in epochs:
        start = {v: f.label(v) for v in set(g) | {v for _, a, b in epoch for v in (a, b)}}
        f.touched.clear()
        for insert, a, b in epoch:
            if a == b:
                continue
            if insert:
                f.insert(a, b)
                g.add_edge(a, b)
            else:
                f.delete(a, b)
                if g.has_edge(a, b):
                    g.remove_edge(a, b)
                    g.remove_nodes_from([v for v in (a, b) if not g.degree(v)])
            check(f, g)
        for v, old in start.items():
            if f.label(v) != old:
                assert v in f.touched and f.touched[v] == old, v
        assert all(start.get(v) == old for v, old in f.touched.items())


def grid_with_chords(n: int, rng: random.Random) -> list[tuple[Any, Any]]:
    es = [((i, j), (i + 1, j)) for i in range(n - 1) for j in range(n)]
    es += [((i, j), (i, j + 1)) for i in range(n) for j in range(n - 1)]
    es += [(rng.choice(es)[0], rng.choice(es)[1]) for _ in range(n)]
    return [(f"{a[0]}.{a[1]}", f"{b[0]}.{b[1]}") for a, b in es if a != b]


def test_deletions_mostly_repair_in_place_and_stay_exact():
    """Churn on a graph with many cycles (an edge deleted, an absent one inserted): most
    deleted tree edges are replaced by another edge of the vertex, without searching a
    subtree; components split and merge; everything stays exact, also after the state
    went through the codec."""
    rng = random.Random(4)
    edges = list(dict.fromkeys(grid_with_chords(12, rng)))
    f = SpanningForest(Map(), Map())
    g = nx.Graph()
    for a, b in edges[: len(edges) * 4 // 5]:
        f.insert(a, b)
        g.add_edge(a, b)
    check(f, g)
    codec = StateCodec(SpanningForestState)
    merged = split = 0
    for step in range(600):
        before = nx.number_connected_components(g)
        if step % 2:
            a, b = rng.choice([e for e in edges if not g.has_edge(*e)])
            f.insert(a, b)
            g.add_edge(a, b)
            merged += nx.number_connected_components(g) < before
        else:
            a, b = rng.choice(list(g.edges()))
            f.delete(a, b)
            g.remove_edge(a, b)
            g.remove_nodes_from([v for v in (a, b) if not g.degree(v)])
            split += nx.number_connected_components(g) > before
        if step == 300:
            st = codec.decode(codec.encode(SpanningForestState(f.adj, f.tree)))
            counts = (f.repairs, f.searches)
            f = SpanningForest(st.adj, st.tree)
            f.repairs, f.searches = counts
        check(f, g)
    assert merged and split
    assert f.repairs > f.searches > 0


@define
class SpanningForestState:
    adj: Map[Vertex, set[Vertex]]
    tree: Map[Vertex, list[Vertex]]
