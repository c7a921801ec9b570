"""Drivers shared by the graph tests: stream epochs, check every epoch against networkx."""

from __future__ import annotations

import random
from typing import Any, Iterable, Optional, Sequence

import attrs
import networkx as nx

import tstate as ts
from tstate.plan import Stateful
from apps.graph.stream import ALGORITHMS, EpochResult, GraphStream, build
from apps.graph.views import GraphView
from tests.apps.graph.oracle import EdgeMultiset, check_view

Epochs = list[tuple[int, list[tuple[Any, Any, int]]]]


def run_checked(
    epochs: Epochs,
    workers: int = 1,
    algorithms: Sequence[str] = ALGORITHMS,
    window: Optional[int] = None,
    tol: float = 1e-10,
    live: Optional[dict[int, list[Any]]] = None,
    **options: Any,
) -> list[EpochResult]:
    """Stream ``epochs`` (consecutive, from 0) and assert after every epoch that each
    algorithm's view equals networkx on the current graph; return the epochs' changes.

    ``live``: epoch -> reconfiguration commands issued (``at`` that epoch) just before
    it is sent; ``options`` go to :class:`GraphStream` (``max_workers``,
    ``reconfigure``, ``bins``, ...); the stream is returned as ``run_checked.last``."""
    g = GraphStream(algorithms, workers=workers, window=window, tol=tol, **options)
    run_checked.last = g  # type: ignore[attr-defined]
    ref = EdgeMultiset(window)
    out: list[EpochResult] = []
    for t, ups in epochs:
        for cmd in (live or {}).get(t, ()):
            g.execution.reconfigure(cmd)  # at the earliest time possible: >= t
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


def exact_by_epoch(results: Sequence[EpochResult]) -> dict[int, dict[str, list[Any]]]:
    """:func:`exact_changes` as a dict, without the epochs where none of them changed."""
    out: dict[int, dict[str, list[Any]]] = {}
    for t, ch in exact_changes(results):
        if any(ch.values()):
            out[t] = {k: v for k, v in ch.items() if v}
    return out


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


def pagerank_close(a: Sequence[EpochResult], b: Sequence[EpochResult], tol: float = 2e-7) -> None:
    """The PageRank changes of two runs (on different workers / layouts) agree within
    ``tol`` (L1) at every epoch: both are within the tolerance of the exact vector."""
    ca = {r.epoch: r.changes.get("pagerank", ()) for r in a}
    cb = {r.epoch: r.changes.get("pagerank", ()) for r in b}
    ra: dict[Any, float] = {}
    rb: dict[Any, float] = {}
    for t in sorted(set(ca) | set(cb)):
        for view, changes in ((ra, ca.get(t, ())), (rb, cb.get(t, ()))):
            for c in changes:
                if c.new is None:
                    view.pop(c.key, None)
                else:
                    view[c.key] = c.new
        assert ra.keys() == rb.keys(), t
        assert sum(abs(ra[v] - rb[v]) for v in ra) <= tol, t


# -- migration ---------------------------------------------------------------------------
def stateful_operators(algorithms: Sequence[str] = ALGORITHMS, root_only: bool = False) -> list[str]:
    """The names of the stateful operators of the graph dataflow (``root_only``: those
    outside iterate scopes, the ones tstate can migrate today)."""
    flow = ts.Dataflow("names")
    build(flow, flow.input("updates"), algorithms)
    return [n.name for _, n in flow.graph.of_type(Stateful) if not root_only or n.scope.depth == 0]


def per_operator(commands: Iterable[tuple[int, Any]], names: Optional[Sequence[str]]) -> list[tuple[int, Any]]:
    """Each ``(time, command)`` as one command per operator in ``names`` (``None``: the
    command as it is, for every stateful operator)."""
    if names is None:
        return list(commands)
    return [(t, attrs.evolve(cmd, operator=n)) for t, cmd in commands for n in names]


# -- checkpoints -------------------------------------------------------------------------
def source_flow(
    epochs: Epochs, algorithms: Sequence[str] = ALGORITHMS, window: Optional[int] = None, tol: float = 1e-7,
    blocks: int = 1,
) -> tuple[ts.Dataflow, dict[str, ts.Collected]]:
    """The graph dataflow over a replayable source of ``epochs`` (what a checkpoint
    replays from), with every output collected."""
    flow = ts.Dataflow("graph")
    data = [(t, list(ups)) for t, ups in epochs]
    src = flow.source(ts.io.from_batches(lambda: iter(data)), name="edge-updates")
    a = build(flow, src, algorithms, window_width=window, tol=tol, blocks=blocks)
    return flow, {name: s.collect(name=f"c.{name}") for name, s in a.outputs().items()}


def by_epoch(collected: dict[str, ts.Collected], keep: Any = None) -> list[EpochResult]:
    """Collected outputs as sorted per-epoch results (``keep(t)``: which epochs)."""
    times = sorted({t for c in collected.values() for t, _ in c.items if keep is None or keep(t)})
    return [
        EpochResult(t, {name: [r for tt, r in c.items if tt == t] for name, c in collected.items()}) for t in times
    ]


def check_epochs(
    results: Sequence[EpochResult], epochs: Epochs, algorithms: Sequence[str], window: Optional[int] = None
) -> None:
    """Fold per-epoch results into a view, epoch by epoch (with the window's drain
    after the last input epoch), and check it equals networkx at every epoch."""
    changes = {r.epoch: r.changes for r in results}
    view = GraphView()
    ref = EdgeMultiset(window)
    ups = dict(epochs)
    last = max([t for t, _ in epochs] + list(changes)) + (window or 0)
    for t in range(last + 1):
        ref.epoch(t, ups.get(t, []))
        view.apply(t, changes.get(t, {}))
        check_view(view, ref.digraph(), t, algorithms)
