"""The graphs and the edge churn the graph benchmarks share (benchmarks/graph.py,
graph_spark.py, loops.py): the bundled flight slice's airport graph, a power-law
graph with triangles, and :class:`Churn`, the evolving edge set."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "apps" / "data" / "flights-sample.parquet"

Edge = tuple[Any, Any]


def airport_edges() -> list[Edge]:
    """The directed airport graph of the bundled flight slice (one edge per route)."""
    import pyarrow.parquet as pq

    t = pq.read_table(SAMPLE, columns=["origin", "destination"])
    pairs = zip(t.column("origin").to_pylist(), t.column("destination").to_pylist())
    return sorted({(a, b) for a, b in pairs if a != b})


def powerlaw_edges(n: int, seed: int = 7) -> list[Edge]:
    """A power-law graph with triangles, every edge oriented at random."""
    g = nx.powerlaw_cluster_graph(n, 3, 0.1, seed=seed)
    rng = random.Random(1)
    return [(u, v) if rng.random() < 0.5 else (v, u) for u, v in g.edges()]


class Churn:
    """The evolving edge set: per epoch, ``k`` present edges deleted (uniformly) and
    ``k`` absent ones inserted (uniform source, degree-proportional destination)."""

    def __init__(self, edges: list[Edge], fraction: float, seed: int) -> None:
        self.present: set[Edge] = set(edges)
        self.order = list(edges)  # a list of the present edges, for sampling
        self.where = {e: i for i, e in enumerate(self.order)}
        self.vertices = sorted({x for e in edges for x in e}, key=lambda v: (v.__class__ is str, v))
        self.k = max(1, round(fraction * len(edges)))
        self.rng = random.Random(seed)

    def _remove(self, e: Edge) -> None:
        i = self.where.pop(e)
        last = self.order.pop()
        if last != e:
            self.order[i] = last
            self.where[last] = i
        self.present.discard(e)

    def _add(self, e: Edge) -> None:
        self.where[e] = len(self.order)
        self.order.append(e)
        self.present.add(e)

    def epoch(self) -> list[tuple[Any, Any, int]]:
        rng, present = self.rng, self.present
        dels = [self.order[i] for i in rng.sample(range(len(self.order)), self.k)]
        ins: list[Edge] = []
        seen: set[Edge] = set()
        while len(ins) < self.k:
            u = rng.choice(self.vertices)
            v = rng.choice(self.order[rng.randrange(len(self.order))])  # an endpoint of a random edge
            if u != v and (u, v) not in present and (u, v) not in seen:
                ins.append((u, v))
                seen.add((u, v))
        for e in dels:
            self._remove(e)
        for e in ins:
            self._add(e)
        return [(u, v, -1) for u, v in dels] + [(u, v, 1) for u, v in ins]
