"""Drivers shared by the graph tests: stream epochs, check every epoch against networkx."""

from __future__ import annotations

import random
from typing import Any, Optional, Sequence

import networkx as nx

import tstate as ts
from apps.graph.stream import ALGORITHMS, EpochResult, GraphStream, build
from tests.apps.graph.oracle import EdgeMultiset, check_view

Epochs = list[tuple[int, list[tuple[Any, Any, int]]]]


def run_checked(
    epochs: Epochs,
    workers: int = 1,
    algorithms: Sequence[str] = ALGORITHMS,
    window: Optional[int] = None,
    tol: float = 1e-10,
) -> list[EpochResult]:
    """Stream ``epochs`` (consecutive, from 0) and assert after every epoch that each
    algorithm's view equals networkx on the current graph; return the epochs' changes."""
    g = GraphStream(algorithms, workers=workers, window=window, tol=tol)
    ref = EdgeMultiset(window)
    out: list[EpochResult] = []
    for t, ups in epochs:
        ref.epoch(t, ups)
        out.extend(g.advance(t, ups))
        check_view(g.view, ref.digraph(), t, algorithms)
    out.extend(g.close())
    return out


def run_all_at_once(epochs: Epochs, workers: int = 1, algorithms: Sequence[str] = ALGORITHMS, tol: float = 1e-10) -> dict[int, dict[str, list[Any]]]:
    """Send every epoch before running (epochs overlap in the dataflow as much as the
    engine likes); return the changes per epoch."""
    flow = ts.Dataflow("all-at-once")
    inp = flow.input("updates")
    a = build(flow, inp, algorithms, tol=tol)
    sinks = {name: s.collect(name=f"c.{name}") for name, s in a.outputs().items()}
    for t, ups in epochs:
        inp.advance_to(t)
        inp.send(ups)
    inp.close()
    flow.run(workers=workers)
    times = sorted({t for c in sinks.values() for t, _ in c.items})
    return {t: {name: [r for tt, r in c.items if tt == t] for name, c in sinks.items()} for t in times}


def exact_changes(results: list[EpochResult]) -> list[tuple[int, dict[str, list[Any]]]]:
    """The changes of every output but PageRank's (float ranks / scores), sorted."""
    return [
        (r.epoch, {k: v for k, v in r.sorted().items() if k not in ("pagerank", "scores")}) for r in results
    ]


def stream_of(
    edges: Sequence[tuple[Any, Any]], rng: random.Random, epochs: int = 6, delete: float = 0.3
) -> Epochs:
    """A real graph's edges streamed in a random order: each epoch inserts a chunk (in a
    random orientation, sometimes both ways, sometimes twice) and retracts a random
    sample of the edges present (sometimes one that is absent)."""
    es = list(edges)
    rng.shuffle(es)
    chunks = [es[i::epochs] for i in range(epochs)]
    present: list[tuple[Any, Any]] = []
    out: Epochs = []
    for t, chunk in enumerate(chunks):
        ups: list[tuple[Any, Any, int]] = []
        for u, v in chunk:
            if rng.random() < 0.5:
                u, v = v, u
            ups.append((u, v, 1))
            present.append((u, v))
            if rng.random() < 0.15:
                ups.append((v, u, 1))
                present.append((v, u))
            if rng.random() < 0.1:
                ups.append((u, v, 1))
                present.append((u, v))
        for _ in range(int(delete * len(present) / 2)):
            if not present:
                break
            u, v = present.pop(rng.randrange(len(present)))
            ups.append((u, v, -1))
        if rng.random() < 0.5:
            ups.append((es[0][1], es[0][0], -1))  # maybe absent: ignored then
        rng.shuffle(ups)
        out.append((t, ups))
    return out


def real_graphs() -> dict[str, nx.Graph]:
    return {
        "karate": nx.karate_club_graph(),
        "les_miserables": nx.les_miserables_graph(),
        "florentine": nx.florentine_families_graph(),
    }
