"""Degrees of the undirected graph and the degree distribution, per epoch.

Per vertex: the number of distinct neighbours, as ``nx.Graph.degree``.  Each epoch's
changes of a vertex are summed and one ``Change(vertex, old, new)`` is emitted once the
epoch is complete (``None`` when the degree is 0: the vertex is not in the graph, and
its state is dropped).  The distribution: ``Change(degree, old_count, new_count)`` for
every degree whose number of vertices changed (``None`` for 0), so the histogram is
``nx.degree_histogram`` without its zero entries.

Two layouts (``blocks``, :func:`degrees`):

- ``blocks=1``: one key holds every vertex's degree and the histogram (typed state
  :class:`DegreeBlock`); an epoch's change lists are summed per vertex as they arrive,
  and one timer at the epoch applies the sums and emits the changes: a few dict
  operations per changed edge;
- ``blocks > 1``: one key per vertex (:class:`DegreeState`, spread over the bins) with
  a timer per touched vertex, and the distribution in one global key
  (:class:`DegreeHistogram`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Optional

from attrs import define, field

import tstate as ts
from apps.graph.edges import EdgeChanges, Vertex
from apps.graph.loop import Change
from tstate.state.context import Context
from tstate.types import Map

__all__ = ["DegreeBlock", "DegreeState", "DegreeHistogram", "Degrees", "degrees"]


@define
class DegreeBlock:
    """Every vertex's degree and the degree histogram in one key (``blocks=1``), and
    the net degree changes of the current epoch (empty between epochs)."""

    deg: Map[Vertex, int] = field(factory=Map)
    hist: dict[int, int] = field(factory=dict)  # degree -> number of vertices
    delta: dict[Vertex, int] = field(factory=dict)  # this epoch: vertex -> net change


def _block_add(st: DegreeBlock, rec: tuple[list[Any], list[tuple[Vertex, Vertex, int]]], ctx: Context) -> None:
    """A list of the epoch's undirected changes: sum them per vertex."""
    changes = rec[1]
    if not changes:
        return
    delta = st.delta
    if not delta:
        ctx.notify_at(ctx.time)
    get = delta.get
    for a, b, s in changes:
        delta[a] = get(a, 0) + s
        delta[b] = get(b, 0) + s


def _block_settle(st: DegreeBlock, t: int, ctx: Context) -> None:
    """The epoch is complete: apply the sums, emit the vertices' and the histogram's
    changes (histogram ones as ``(HIST, degree, old, new)``, turned into ``Change``s
    by :func:`degrees`)."""
    deg, hist = st.deg, st.hist
    peek = deg.peek
    emit = ctx.emit
    before: dict[int, int] = {}
    for v, dd in st.delta.items():
        if not dd:
            continue
        d0 = peek(v, 0)
        d1 = d0 + dd
        if d1:
            deg[v] = d1
        else:
            del deg[v]
        emit(Change(v, d0 or None, d1 or None))
        if d0:
            n = hist[d0]
            if d0 not in before:
                before[d0] = n
            if n > 1:
                hist[d0] = n - 1
            else:
                del hist[d0]
        if d1:
            n = hist.get(d1, 0)
            if d1 not in before:
                before[d1] = n
            hist[d1] = n + 1
    st.delta = {}
    for d in sorted(before):
        n0, n1 = before[d], hist.get(d, 0)
        if n0 != n1:
            emit((_HIST, d, n0 or None, n1 or None))
    if not deg:
        ctx.clear()


_HIST = "hist"


@define
class DegreeState:
    degree: int = 0
    old: int = 0  # the degree at the start of the pending epoch
    pending: bool = False


def _add(st: DegreeState, rec: tuple[Vertex, int], ctx: Context) -> None:
    if not st.pending:
        st.pending = True
        st.old = st.degree
        ctx.notify_at(ctx.time)
    st.degree += rec[1]


def _settle(st: DegreeState, t: int, ctx: Context) -> None:
    st.pending = False
    if st.degree != st.old:
        ctx.emit(Change(ctx.key, st.old or None, st.degree or None))
    if st.degree <= 0:
        ctx.clear()


@define
class DegreeHistogram:
    counts: dict[int, int] = field(factory=dict)  # degree -> number of vertices
    before: Optional[dict[int, int]] = None  # counts of the degrees touched this epoch, at its start


def _count(st: DegreeHistogram, c: Change, ctx: Context) -> None:
    before = st.before
    if before is None:
        before = st.before = {}
        ctx.notify_at(ctx.time)
    counts = st.counts
    for d, by in ((c.old, -1), (c.new, 1)):
        if d is None:
            continue
        n = counts.get(d, 0)
        if d not in before:
            before[d] = n
        n += by
        if n:
            counts[d] = n
        else:
            del counts[d]


def _emit(st: DegreeHistogram, t: int, ctx: Context) -> None:
    counts = st.counts
    for d, n0 in sorted((st.before or {}).items()):
        n1 = counts.get(d, 0)
        if n1 != n0:
            ctx.emit(Change(d, n0 or None, n1 or None))
    st.before = None


@define(frozen=True)
class Degrees:
    """Outputs of :func:`degrees`: ``per_vertex`` and ``distribution`` changes."""

    per_vertex: ts.Stream
    distribution: ts.Stream
    op: Optional[ts.Stream] = None  # the stateful operator holding the state (for state queries)


def degrees(
    flow: ts.Dataflow, edges: EdgeChanges, name: str = "degrees", bins: int = 256, blocks: int = 1, key: int = 0
) -> Degrees:
    """Degrees and the degree distribution from the undirected edge changes of
    ``edges`` (see the module docstring for ``blocks``).  ``key``: with one block, the key
    holding the whole state (which bin, hence which Spark partition, runs it; part of the
    state's layout: a restore must use the same)."""
    flow.record_types(Change)  # the records it emits (they cross Spark exchanges)
    if blocks == 1:
        block = flow.stateful(edges.changes, key=_const(key), state=DegreeBlock, name=name, bins=bins)(_block_add)
        block.on_notify(_block_settle)
        per_vertex = block.filter(lambda r: r.__class__ is Change, name=f"{name}.vertices")
        distribution = block.filter(lambda r: r.__class__ is tuple, name=f"{name}.histogram").map(
            lambda r: Change(r[1], r[2], r[3]), name=f"{name}.distribution"
        )
        return Degrees(per_vertex, distribution, block)
    ends = edges.undirected.flat_map(lambda c: ((c[0], c[2]), (c[1], c[2])), name=f"{name}.endpoints")
    per_vertex = flow.stateful(ends, key=itemgetter(0), state=DegreeState, name=name, bins=bins)(_add)
    per_vertex.on_notify(_settle)
    hist = flow.stateful(per_vertex, key=_zero, state=DegreeHistogram, name=f"{name}.distribution")(_count)
    hist.on_notify(_emit)
    return Degrees(per_vertex, hist, per_vertex)


def _zero(r: Any) -> int:
    return 0


def _const(key: int) -> Any:
    """A key function giving ``key`` for every record."""

    def const(r: Any) -> int:
        return key

    return const
