"""Streaming graph analytics on the flight stream: incremental tstate vs networkx recomputation.

The airport graph (one edge ``origin -> destination`` per flight, hourly epochs, a
sliding window of 24 epochs) is maintained epoch by epoch, and for each algorithm --
degrees (+ distribution), connected components, PageRank, triangles -- three ways:

- **tstate, end to end**: the raw flights go into the dataflow (window, edge counts,
  topology changes, the algorithm) on the embedded engine, one epoch at a time;
- **tstate, algorithm only**: the same algorithm fed the per-epoch topology changes
  (computed beforehand), i.e. the incremental part alone;
- **networkx, from scratch**: at every epoch the window's edge counts are updated
  (a dict), the graph is built from the present edges and the algorithm recomputed,
  and the result diffed with the previous epoch's (so both sides produce changes).

For each: edge updates per second (flight insertions + window expiries; for "algorithm
only" the topology changes it was fed) and the per-epoch latency (median, p99); the
speedup column is networkx's median epoch latency over the row's.  The last epoch's
results are checked equal between tstate and networkx (PageRank within 1e-6 L1).

    python -m benchmarks.graph                 # the bundled 2-day slice (48 epochs)
    python -m benchmarks.graph --full          # all 3M flights (~4,350 epochs; slow)
    python -m benchmarks.graph --epochs 100 --algorithms components,degrees

Targets (issue 8): incremental >= 20x faster per epoch than recomputation for components
and degrees, >= 5x for PageRank.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import networkx as nx

import tstate as ts
from apps.graph.components import components
from apps.graph.degrees import degrees
from apps.graph.io import EdgeFile
from apps.graph.pagerank import pagerank
from apps.graph.stream import ALGORITHMS, GraphStream
from apps.graph.triangles import triangles
from apps.graph.views import GraphView
from benchmarks.common import table

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "apps" / "data" / "flights-sample.parquet"
FULL = ROOT.parent / "shared" / "data" / "flights-3m.parquet"
WINDOW = 24

Batches = dict[int, list[tuple[Any, Any, int]]]


# -- the stream ----------------------------------------------------------------------------
def load(path: Path, epochs: Optional[int]) -> tuple[Batches, int]:
    f = EdgeFile(path, epoch="1h")
    n = f.epochs if epochs is None else min(epochs, f.epochs)
    return dict(f.batches(limit=n)), n


class Window:
    """The window's edge counts as plain dicts (what recomputation has to keep anyway)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[Any, Any], int] = {}
        self.expiring: dict[int, list[tuple[Any, Any]]] = {}

    def epoch(self, t: int, flights: list[tuple[Any, Any, int]], horizon: int) -> int:
        counts = self.counts
        n = 0
        for s, d, _ in flights:
            if s != d:
                counts[(s, d)] = counts.get((s, d), 0) + 1
                if t + WINDOW < horizon:
                    self.expiring.setdefault(t + WINDOW, []).append((s, d))
                n += 1
        for p in self.expiring.pop(t, ()):
            c = counts[p] - 1
            if c:
                counts[p] = c
            else:
                del counts[p]
            n += 1
        return n


def topology_changes(batches: Batches, epochs: int) -> tuple[dict[int, list[Any]], dict[int, list[Any]], int]:
    """Per epoch: the directed and undirected edge changes of the windowed graph."""
    w = Window()
    directed: dict[int, list[Any]] = {}
    undirected: dict[int, list[Any]] = {}
    dprev: set[tuple[Any, Any]] = set()
    uprev: set[tuple[Any, Any]] = set()
    updates = 0
    for t in range(epochs):
        updates += w.epoch(t, batches.get(t, []), epochs)
        dnow = set(w.counts)
        unow = {(a, b) if a < b else (b, a) for a, b in dnow}
        directed[t] = [(a, b, 1) for a, b in dnow - dprev] + [(a, b, -1) for a, b in dprev - dnow]
        undirected[t] = [(a, b, 1) for a, b in unow - uprev] + [(a, b, -1) for a, b in uprev - unow]
        dprev, uprev = dnow, unow
    return directed, undirected, updates


# -- networkx, from scratch ---------------------------------------------------------------
def _diff(prev: dict[Any, Any], now: dict[Any, Any]) -> list[tuple[Any, Any, Any]]:
    out = [(k, prev.get(k), v) for k, v in now.items() if prev.get(k) != v]
    out += [(k, v, None) for k, v in prev.items() if k not in now]
    return out


def nx_result(alg: str, edges: Any, tol: float) -> dict[str, Any]:
    if alg == "degrees":
        g = nx.Graph(edges)
        hist = nx.degree_histogram(g)
        return {"degrees": dict(g.degree()), "distribution": {d: n for d, n in enumerate(hist) if n and d}}
    if alg == "components":
        g = nx.Graph(edges)
        return {"components": {v: min(c) for c in nx.connected_components(g) for v in c}}
    if alg == "pagerank":
        g = nx.DiGraph(edges)
        n = max(1, g.number_of_nodes())
        return {"pagerank": nx.pagerank(g, tol=tol / n, max_iter=10_000) if n else {}}
    if alg == "triangles":
        g = nx.Graph(edges)
        return {"triangles": nx.triangles(g)}
    raise ValueError(alg)


class NetworkxRunner:
    """Recomputation: per epoch, update the window's counts, build the graph, run
    networkx, diff with the previous epoch's result."""

    def __init__(self, alg: str, batches: Batches, epochs: int, tol: float) -> None:
        self.alg, self.batches, self.epochs, self.tol = alg, batches, epochs, tol
        self.window = Window()
        self.result: dict[str, Any] = {}
        self.updates = 0

    def step(self, t: int) -> None:
        self.updates += self.window.epoch(t, self.batches.get(t, []), self.epochs)
        res = nx_result(self.alg, list(self.window.counts), self.tol)
        changes = {k: _diff(self.result.get(k, {}), v) for k, v in res.items()}
        self.result = res
        del changes

    def finish(self) -> None:
        pass


class EndToEndRunner:
    """tstate, from the raw flights: window, edge counts, the algorithm."""

    def __init__(self, alg: str, batches: Batches, epochs: int, workers: int, tol: float, updates: int) -> None:
        self.batches = batches
        self.g = GraphStream((alg,), workers=workers, window=WINDOW, horizon=epochs, validate=False, tol=tol)
        self.updates = updates

    def step(self, t: int) -> None:
        self.g.advance(t, self.batches.get(t, []))

    def finish(self) -> None:
        self.g.close()


class AlgorithmOnlyRunner:
    """tstate, the algorithm alone, fed the per-epoch topology changes."""

    def __init__(self, alg: str, changes: dict[int, list[Any]], workers: int, tol: float) -> None:
        flow = ts.Dataflow(f"{alg}-only")
        self.inp = inp = flow.input("changes")
        build: dict[str, Callable[[], ts.Stream]] = {
            "degrees": lambda: degrees(flow, inp).distribution,
            "components": lambda: components(flow, inp).summary,
            "pagerank": lambda: pagerank(flow, inp, tol=tol).ranks,
            "triangles": lambda: triangles(flow, inp).total,
        }
        out = build[alg]()
        self.probe = out.probe()
        out.sink(lambda t, recs: None)
        self.changes = changes
        self.updates = sum(len(v) for v in changes.values())
        self.ex = flow.start(workers)

    def step(self, t: int) -> None:
        self.inp.send(self.changes[t])
        self.inp.advance_to(t + 1)
        probe = self.probe
        self.ex.step_while(lambda: probe.less_equal(t))

    def finish(self) -> None:
        self.inp.close()
        self.ex.run()


def check(alg: str, view: GraphView, expected: dict[str, Any]) -> None:
    if alg == "degrees":
        assert view.degrees.data == expected["degrees"], "degrees differ from networkx"
        assert view.distribution.data == expected["distribution"], "degree distribution differs"
    elif alg == "components":
        assert view.labels.data == expected["components"], "components differ from networkx"
    elif alg == "pagerank":
        exp = expected["pagerank"]
        assert view.ranks.data.keys() == exp.keys(), "PageRank vertices differ"
        l1 = sum(abs(view.ranks.data[v] - exp[v]) for v in exp)
        assert l1 <= 1e-6, f"PageRank L1 distance {l1}"
    elif alg == "triangles":
        assert view.triangles.data == expected["triangles"], "triangles differ from networkx"


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help=f"all of {FULL}")
    ap.add_argument("--input", type=Path, default=None, help="another flights parquet")
    ap.add_argument("--epochs", type=int, default=None, help="only the first N hourly epochs")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--tol", type=float, default=1e-10, help="PageRank L1 tolerance (both sides)")
    ap.add_argument("--no-check", action="store_true", help="skip comparing the final results")
    args = ap.parse_args(argv)
    path = args.input or (FULL if args.full else SAMPLE)
    algs = [a for a in args.algorithms.split(",") if a]
    for a in algs:
        if a not in ALGORITHMS:
            ap.error(f"unknown algorithm {a!r}")
    t0 = time.perf_counter()
    batches, epochs = load(path, args.epochs)
    directed, undirected, updates = topology_changes(batches, epochs)
    flights = sum(len(v) for v in batches.values())
    print(
        f"graph analytics: {path.name}, {flights:,} flights, {epochs} hourly epochs, window {WINDOW} epochs, "
        f"{updates:,} edge updates (insertions + expiries), "
        f"{sum(len(v) for v in undirected.values()):,} undirected / {sum(len(v) for v in directed.values()):,} "
        f"directed topology changes; {args.workers} worker(s); loaded in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    rows = []
    for alg in algs:
        runners: dict[str, Any] = {
            "networkx from scratch": NetworkxRunner(alg, batches, epochs, args.tol),
            "tstate end to end": EndToEndRunner(alg, batches, epochs, args.workers, args.tol, updates),
            "tstate algorithm only": AlgorithmOnlyRunner(
                alg, directed if alg == "pagerank" else undirected, args.workers, args.tol
            ),
        }
        lat: dict[str, list[float]] = {k: [] for k in runners}
        for t in range(epochs):  # interleaved epoch by epoch: machine noise hits all alike
            for name, r in runners.items():
                t0 = time.perf_counter()
                r.step(t)
                lat[name].append(time.perf_counter() - t0)
        for r in runners.values():
            r.finish()
        if not args.no_check:
            view = runners["tstate end to end"].g.view
            check(alg, view, runners["networkx from scratch"].result)
        base = statistics.median(lat["networkx from scratch"])
        for name, r in runners.items():
            ls = lat[name]
            med = statistics.median(ls)
            rows.append(
                (alg, name, f"{r.updates / sum(ls):,.0f}", f"{med * 1e3:.2f}", f"{_p99(ls) * 1e3:.2f}", f"{base / med:.1f}x")
            )
        print(f"  {alg}: done", file=sys.stderr, flush=True)
    print(table(["algorithm", "mode", "updates/s", "median ms/epoch", "p99 ms/epoch", "speedup vs networkx"], rows))
    print(
        "updates/s: flight insertions + window expiries per second of epoch processing "
        "(tstate algorithm only: topology changes per second)."
    )


if __name__ == "__main__":
    main()
