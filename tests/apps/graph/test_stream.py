"""GraphStream as a library: undirected streams, numpy arrays of integer ids, the
current edge set."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.graph.edges import GraphInputError
from apps.graph.stream import GraphStream
from tests.apps.graph.oracle import check_view

vertices = st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", "c"]))
updates = st.lists(st.tuples(vertices, vertices, st.sampled_from([1, 1, 2, -1, -1])), max_size=8)


class Undirected:
    """Occurrence counts per unordered pair: the reference of ``undirected=True``."""

    def __init__(self) -> None:
        self.counts: dict[frozenset[Any], int] = {}

    def epoch(self, ups: list[tuple[Any, Any, int]]) -> None:
        net: dict[frozenset[Any], int] = {}
        for u, v, d in ups:
            if u != v:
                p = frozenset((u, v))
                net[p] = net.get(p, 0) + d
        for p, d in net.items():
            c = max(0, self.counts.get(p, 0) + d)
            if c:
                self.counts[p] = c
            else:
                self.counts.pop(p, None)

    def digraph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for p in self.counts:
            a, b = tuple(p)
            g.add_edge(a, b)
            g.add_edge(b, a)
        return g


@settings(max_examples=20)
@given(st.lists(updates, min_size=1, max_size=5), st.integers(1, 4), st.sampled_from([1, 3]))
def test_undirected_streams_equal_networkx(epochs, workers, blocks):
    """An update is one of the undirected edge: retracting (b, a) undoes (a, b); PageRank
    sees every edge both ways (as networkx's pagerank of an undirected graph); the edge
    set holds both orientations."""
    g = GraphStream(workers=workers, undirected=True, tol=1e-7, blocks=blocks)
    ref = Undirected()
    for t, ups in enumerate(epochs):
        ref.epoch(ups)
        g.advance(t, ups)
        d = ref.digraph()
        check_view(g.view, d, t, ("degrees", "components", "pagerank", "triangles"))
        assert g.edges() == set(d.edges())
    g.close()


def test_without_undirected_pagerank_follows_the_orientation():
    g = GraphStream(("pagerank",))
    g.advance(0, [(1, 2), (3, 2)])
    assert g.edges() == {(1, 2), (3, 2)}
    assert g.view.ranks.data[2] > 0.5  # 2 gets everything, gives nothing
    h = GraphStream(("pagerank",), undirected=True)
    h.advance(0, [(1, 2), (3, 2)])
    assert h.edges() == {(1, 2), (2, 1), (3, 2), (2, 3)}
    assert h.view.ranks.data[2] == pytest.approx(nx.pagerank(nx.Graph([(1, 2), (3, 2)]), tol=1e-14, max_iter=10_000)[2], abs=1e-9)


def test_numpy_arrays_of_integer_ids():
    """(n, 2) and (n, 3) integer arrays go in without per-record conversion: the same
    results as the tuples; self-loops and zero deltas are dropped and counted; anything
    else is refused."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 30, size=(200, 2), dtype=np.int32)
    g, h = GraphStream(), GraphStream()
    g.advance(0, a)
    h.advance(0, [(int(u), int(v)) for u, v in a])
    assert g.view.labels.data == h.view.labels.data and g.view.triangles.data == h.view.triangles.data
    assert g.edges() == h.edges() and g.stats.self_loops == h.stats.self_loops > 0
    deltas = np.column_stack([a[:50], -np.ones(50, dtype=np.int32)])
    deltas[0, 2] = 0
    g.advance(1, deltas)
    h.advance(1, [(int(u), int(v), int(d)) for u, v, d in deltas[1:]])
    assert g.edges() == h.edges() and g.view.degrees.data == h.view.degrees.data
    assert g.stats.zero == 1 or deltas[0, 0] == deltas[0, 1]
    for bad in (np.zeros((3, 4), dtype=int), np.zeros(3, dtype=int), np.zeros((2, 2), dtype=float)):
        with pytest.raises(GraphInputError, match="shape"):
            g.advance(2, bad)
    with pytest.raises(GraphInputError, match="64 bits"):
        g.advance(2, np.array([[1, 1 << 63]], dtype=np.uint64))
    g.close()
    h.close()
