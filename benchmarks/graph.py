"""Streaming graph analytics under edge churn: incremental tstate vs recomputing from scratch.

Two graphs, each loaded whole at epoch 0 and then changed every epoch by *churn*: a
fraction of its edges deleted and as many inserted (the new edges by preferential
attachment: a uniform source and a destination drawn in proportion to degree, so the
degree distribution keeps its shape), deletions included:

- **airports**: the directed airport graph of the bundled flight slice
  (``apps/data/flights-sample.parquet``: one edge ``origin -> destination`` per route);
- **powerlaw**: ``nx.powerlaw_cluster_graph(n, 3, 0.1, seed=7)`` (``n = 20,000`` by
  default, about 60,000 edges, with triangles), every edge oriented at random (seed 1).

Per graph, churn (0.1%, 1%, 2% of the edges per epoch) and algorithm (degrees,
components, triangles, PageRank, and all four together) three contenders process the
same epochs, interleaved epoch by epoch so machine noise hits all alike:

- **tstate**: :class:`apps.graph.GraphStream` (embedded engine, one worker) fed the
  epoch's edge updates ``(u, v, +1/-1)``; the time is ``advance()`` -- consolidation,
  the algorithm, the changes into the sinks and the consumer's view of the results;
- **networkx**: from scratch every epoch: the graph built from the current edge list
  (``nx.DiGraph`` for PageRank, ``nx.Graph`` otherwise) and the algorithm run on it
  (``degree`` + ``degree_histogram``, ``connected_components``, ``triangles``,
  ``pagerank(tol=TOL / N)``: its stopping rule is an L1 change below ``TOL``);
- **igraph**: the same from scratch with python-igraph (C): the graph built from an
  integer edge array, ``degree``, ``connected_components``, ``list_triangles``
  (counted per vertex with numpy) and ``pagerank`` (PRPACK, a direct solver).

PageRank runs at ``--tol`` (default 1e-10, tstate's default: the L1 distance of its
ranks from the exact vector is at most ``tol``).  Every epoch's tstate results are
checked equal to networkx's after the last epoch (PageRank within 1e-6 L1).

The table has the median CPU milliseconds per epoch (``time.process_time``: every
contender runs on one thread, and other processes on a shared machine matter less
than to wall time) and the speedups (networkx / tstate, igraph / tstate); then the loop
micro-benchmark (:mod:`benchmarks.loops`); the last line is JSON with the ratios of
issue 14's targets and the loop figures.

    python -m benchmarks.graph                  # both graphs, 20 epochs per setting
    python -m benchmarks.graph --quick          # a smoke run: small graphs, 3 epochs
    python -m benchmarks.graph --graphs powerlaw --churn 0.01 --algorithms pagerank
    python -m benchmarks.graph --spark          # on Spark: local[1] vs local[2] vs embedded
                                                # (benchmarks.graph_spark; --vertices, --epochs, --churn)
"""

from __future__ import annotations

import argparse
import gc
import os
import json
import statistics
import sys
import time
from typing import Any, Callable, Optional, Sequence

import networkx as nx
import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # igraph's PRPACK: one thread, like the others

from apps.graph.stream import ALGORITHMS, GraphStream
from apps.graph.views import GraphView
from benchmarks.common import table
from benchmarks.graph_inputs import ROOT, SAMPLE, Churn, Edge, airport_edges, powerlaw_edges  # noqa: F401 (re-exported)

ALL = "all four"



# -- the contenders --------------------------------------------------------------------------
class TstateRunner:
    def __init__(self, algs: Sequence[str], edges: list[Edge], tol: float) -> None:
        self.g = GraphStream(algs, workers=1, validate=False, tol=tol)
        self.g.advance(0, [(u, v, 1) for u, v in edges])

    def step(self, t: int, updates: list[tuple[Any, Any, int]], edges: set[Edge]) -> None:
        self.g.advance(t, updates)

    @property
    def view(self) -> GraphView:
        assert self.g.view is not None
        return self.g.view


def _nx_run(alg: str, edges: Sequence[Edge], tol: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    u = nx.Graph(edges) if alg != "pagerank" else None
    if alg in ("degrees", ALL):
        u = u if u is not None else nx.Graph(edges)
        out["degrees"] = (dict(u.degree()), nx.degree_histogram(u))
    if alg in ("components", ALL):
        u = u if u is not None else nx.Graph(edges)
        out["components"] = list(nx.connected_components(u))
    if alg in ("triangles", ALL):
        u = u if u is not None else nx.Graph(edges)
        out["triangles"] = nx.triangles(u)
    if alg in ("pagerank", ALL):
        d = nx.DiGraph(edges)
        out["pagerank"] = nx.pagerank(d, tol=tol / max(1, d.number_of_nodes()), max_iter=10_000)
    return out


class NetworkxRunner:
    def __init__(self, alg: str, tol: float) -> None:
        self.alg, self.tol = alg, tol
        self.result: dict[str, Any] = {}

    def step(self, t: int, updates: list[tuple[Any, Any, int]], edges: set[Edge]) -> None:
        self.result = _nx_run(self.alg, list(edges), self.tol)


class IgraphRunner:
    """igraph from scratch; vertex ids are mapped to ints once (the input of a C
    library), the mapping is not timed."""

    def __init__(self, alg: str, vertices: dict[Any, int]) -> None:
        self.alg = alg
        self.index = vertices

    def step(self, t: int, updates: list[tuple[Any, Any, int]], edges: set[Edge]) -> None:
        import igraph as ig

        idx = self.index
        for u, v, _ in updates:  # not timed in spirit: a few dict inserts
            if u not in idx:
                idx[u] = len(idx)
            if v not in idx:
                idx[v] = len(idx)
        arr = [(idx[u], idx[v]) for u, v in edges]
        n = len(idx)
        alg = self.alg
        if alg != "pagerank":
            g = ig.Graph(n=n, edges=arr, directed=False)
            g.simplify()
            present = np.asarray(g.degree()) > 0
            if alg in ("degrees", ALL):
                deg = np.asarray(g.degree())
                np.bincount(deg[present])
            if alg in ("components", ALL):
                g.connected_components().membership
            if alg in ("triangles", ALL):
                tri = np.asarray(g.list_triangles(), dtype=np.int64).reshape(-1)
                np.bincount(tri, minlength=n)
        if alg in ("pagerank", ALL):
            d = ig.Graph(n=n, edges=arr, directed=True)
            pr = np.asarray(d.pagerank())
            present = np.asarray(d.degree()) > 0
            pr = pr[present] / pr[present].sum()  # without the isolated ids igraph still counts


# -- checking --------------------------------------------------------------------------------
def check(alg: str, view: GraphView, edges: set[Edge], tol: float) -> None:
    exp = _nx_run(alg, list(edges), 1e-13)
    if "degrees" in exp:
        assert view.degrees.data == exp["degrees"][0], "degrees differ from networkx"
    if "components" in exp:
        got = sorted(sorted(map(repr, c)) for c in view.components().values())
        assert got == sorted(sorted(map(repr, c)) for c in exp["components"]), "components differ from networkx"
    if "triangles" in exp:
        assert view.triangles.data == exp["triangles"], "triangles differ from networkx"
    if "pagerank" in exp:
        pr = exp["pagerank"]
        assert view.ranks.data.keys() == pr.keys(), "PageRank vertices differ"
        l1 = sum(abs(view.ranks.data[v] - pr[v]) for v in pr)
        assert l1 <= max(1e-6, 2 * tol), f"PageRank L1 distance {l1}"


# -- driving ---------------------------------------------------------------------------------
def run_setting(
    graph: str, edges: list[Edge], churn: float, algs: Sequence[str], epochs: int, tol: float, contenders: Sequence[str]
) -> list[dict[str, Any]]:
    """One graph and churn level: every algorithm row (interleaved contenders)."""
    rows = []
    for alg in algs:
        ch = Churn(edges, churn, seed=11)
        vertices = {v: i for i, v in enumerate(ch.vertices)}
        runners: dict[str, Any] = {}
        if "tstate" in contenders:
            runners["tstate"] = TstateRunner(ALGORITHMS if alg == ALL else (alg,), edges, tol)
        if "networkx" in contenders:
            runners["networkx"] = NetworkxRunner(alg, tol)
        if "igraph" in contenders:
            runners["igraph"] = IgraphRunner(alg, vertices)
        lat: dict[str, list[float]] = {k: [] for k in runners}
        for t in range(1, epochs + 1):
            ups = ch.epoch()
            gc.collect()
            gc.freeze()  # the long-lived heap out of the cyclic GC (as benchmarks.common.EpochDriver)
            for name, r in runners.items():
                t0 = time.process_time()
                r.step(t, ups, ch.present)
                lat[name].append(time.process_time() - t0)
        if "tstate" in runners:
            check(alg, runners["tstate"].view, ch.present, tol)
        med = {k: statistics.median(v) * 1e3 for k, v in lat.items()}
        rows.append({"graph": graph, "churn": churn, "changes": 2 * ch.k, "algorithm": alg, **med})
        print(f"  {graph} churn {churn:.1%} {alg}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items()),
              file=sys.stderr, flush=True)
        del runners
        gc.unfreeze()
        gc.collect()
    return rows


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of issue 14's targets: networkx (or igraph) ms / tstate ms."""
    out: dict[str, Any] = {}
    for r in rows:
        if "tstate" not in r:
            continue
        alg = "all" if r["algorithm"] == ALL else r["algorithm"]
        key = f"{r['graph']}.{alg}.{r['churn'] * 100:g}pct"
        for peer in ("networkx", "igraph"):
            if peer in r:
                out[f"{key}.{peer}_over_tstate"] = round(r[peer] / r["tstate"], 2)
    return out


def main(argv: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--spark" in argv:  # the Spark comparison (benchmarks.graph_spark), its own options
        from benchmarks.graph_spark import main as spark_main

        rest = [a for a in argv if a != "--spark"]
        if "--churn" in rest:  # one fraction there
            i = rest.index("--churn") + 1
            rest[i] = rest[i].split(",")[0]
        spark_main(rest)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2,000-vertex power-law graph, 3 epochs")
    ap.add_argument("--graphs", default="airports,powerlaw")
    ap.add_argument("--vertices", type=int, default=None, help="vertices of the power-law graph (default 20,000)")
    ap.add_argument("--churn", default="0.001,0.01,0.02", help="fractions of the edges changed per epoch")
    ap.add_argument("--algorithms", default=",".join((*ALGORITHMS, "all")))
    ap.add_argument("--epochs", type=int, default=None, help="timed epochs per setting (default 20; --quick 3)")
    ap.add_argument("--tol", type=float, default=1e-10, help="PageRank L1 tolerance")
    ap.add_argument("--contenders", default="tstate,networkx,igraph")
    ap.add_argument("--no-loops", action="store_true", help="skip the loop micro-benchmark")
    ap.add_argument("--spark", action="store_true", help="instead: the Spark comparison (benchmarks.graph_spark)")
    args = ap.parse_args(argv)
    epochs = args.epochs or (3 if args.quick else 20)
    n = args.vertices or (2_000 if args.quick else 20_000)
    algs = [ALL if a == "all" else a for a in args.algorithms.split(",") if a]
    for a in algs:
        if a not in ALGORITHMS and a != ALL:
            ap.error(f"unknown algorithm {a!r}")
    contenders = [c for c in args.contenders.split(",") if c]
    graphs: dict[str, Callable[[], list[Edge]]] = {"airports": airport_edges, "powerlaw": lambda: powerlaw_edges(n)}
    rows: list[dict[str, Any]] = []
    for name in [g for g in args.graphs.split(",") if g]:
        if name not in graphs:
            ap.error(f"unknown graph {name!r}")
        edges = graphs[name]()
        nv = len({x for e in edges for x in e})
        print(f"{name}: {nv:,} vertices, {len(edges):,} directed edges", file=sys.stderr, flush=True)
        for c in (float(x) for x in args.churn.split(",")):
            rows.extend(run_setting(name, edges, c, algs, epochs, args.tol, contenders))
    header = ["graph", "churn/epoch", "edge changes", "algorithm", *[f"{c} ms" for c in contenders]]
    header += [f"{c} / tstate" for c in contenders if c != "tstate" and "tstate" in contenders]
    body = []
    for r in rows:
        line = [r["graph"], f"{r['churn']:.1%}", r["changes"], r["algorithm"], *[f"{r[c]:.2f}" for c in contenders]]
        if "tstate" in contenders:
            line += [f"{r[c] / r['tstate']:.2f}x" for c in contenders if c != "tstate"]
        body.append(line)
    print(
        f"graph analytics under churn: median CPU ms per epoch over {epochs} epochs, PageRank tol {args.tol:g}, "
        "1 worker; 'x / tstate' > 1: tstate is faster"
    )
    print(table(header, body))
    figures = ratios(rows)
    if not args.no_loops:
        from benchmarks.loops import tracker_figures

        figures.update(tracker_figures(quick=args.quick))
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
