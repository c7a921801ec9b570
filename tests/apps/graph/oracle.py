"""The test oracle: the graph of every epoch, and networkx computed on it from scratch.

:class:`EdgeMultiset` replays the edge-update semantics of :mod:`apps.graph.edges`
(net delta per pair per epoch, counts clamped at zero, self-loops ignored, optional
sliding window) with plain dicts; :func:`expected` runs networkx on the current graph.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import networkx as nx

from apps.graph.edges import parse_update
from apps.graph.views import GraphView

PR_TOL = 1e-6  # L1 distance allowed between our PageRank and networkx's


class EdgeMultiset:
    """Occurrence counts per directed pair, updated per epoch like the dataflow."""

    def __init__(self, window: Optional[int] = None) -> None:
        self.window = window
        self.counts: dict[tuple[Any, Any], int] = {}
        self.expiring: dict[int, list[tuple[Any, Any, int]]] = {}

    def epoch(self, t: int, updates: Iterable[Any]) -> None:
        net: dict[tuple[Any, Any], int] = {}
        for s, d, k in self.expiring.pop(t, []):
            net[(s, d)] = net.get((s, d), 0) + k
        for rec in updates:
            u = parse_update(rec)
            if u is None:
                continue
            s, d, k = u
            net[(s, d)] = net.get((s, d), 0) + k
            if self.window is not None and k > 0:
                self.expiring.setdefault(t + self.window, []).append((s, d, -k))
        for p, k in net.items():
            c = max(0, self.counts.get(p, 0) + k)
            if c:
                self.counts[p] = c
            else:
                self.counts.pop(p, None)

    def digraph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_edges_from(self.counts)
        return g


def expected(g: nx.DiGraph, alpha: float = 0.85) -> dict[str, Any]:
    u = nx.Graph(g)
    return {
        "degrees": dict(u.degree()),
        "histogram": nx.degree_histogram(u)[:] if u else [],
        "components": sorted(sorted(map(repr, c)) for c in nx.connected_components(u)),
        "pagerank": nx.pagerank(g, alpha=alpha, tol=1e-14, max_iter=10000) if g else {},
        "triangles": nx.triangles(u) if u else {},
    }


def check_view(view: GraphView, g: nx.DiGraph, epoch: Any, algorithms: Iterable[str], alpha: float = 0.85) -> None:
    """Assert the view holds networkx's results for ``g`` (PageRank within PR_TOL)."""
    exp = expected(g, alpha)
    algs = set(algorithms)
    where = f"epoch {epoch}"
    if "degrees" in algs:
        assert view.degrees.data == exp["degrees"], where
        hist = exp["histogram"]
        if hist:
            hist = hist[:]
            hist[0] = 0
            while hist and hist[-1] == 0:
                hist.pop()
        assert view.histogram() == hist, where
    if "components" in algs:
        comps = view.components()
        got = sorted(sorted(map(repr, c)) for c in comps.values())
        assert got == exp["components"], where
        for lab, members in comps.items():  # the label is the smallest member
            assert lab in members, where
            assert all(not (type(m) is type(lab) and m < lab) and not (type(m) is int and type(lab) is str) for m in members), where
        sizes = [len(c) for c in comps.values()]
        assert (view.component_count(), view.largest_component()) == (len(sizes), max(sizes, default=0)), where
    if "pagerank" in algs:
        pr = exp["pagerank"]
        assert set(view.ranks.data) == set(pr), where
        l1 = sum(abs(view.ranks.data[v] - pr[v]) for v in pr)
        assert l1 <= PR_TOL, f"{where}: PageRank L1 distance {l1}"
    if "triangles" in algs:
        assert view.triangles.data == exp["triangles"], where
        assert view.triangle_total == sum(exp["triangles"].values()) // 3, where
