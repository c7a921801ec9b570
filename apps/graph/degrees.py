"""Degrees of the undirected graph and the degree distribution, per epoch.

Per vertex (typed state :class:`DegreeState`, keyed by vertex): the number of distinct
neighbours, as ``nx.Graph.degree``.  Each epoch's changes of a vertex are summed and
one ``Change(vertex, old, new)`` is emitted by a timer at the epoch (``None`` when the
degree is 0: the vertex is not in the graph, and its state is dropped).

The distribution is one global key (:class:`DegreeHistogram`): ``Change(degree,
old_count, new_count)`` for every degree whose number of vertices changed (``None``
for 0), so the histogram is ``nx.degree_histogram`` without its zero entries.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Optional

from attrs import define, field

import tstate as ts
from apps.graph.edges import Vertex
from apps.graph.loop import Change
from tstate.state.context import Context

__all__ = ["DegreeState", "DegreeHistogram", "Degrees", "degrees"]


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


def degrees(flow: ts.Dataflow, undirected: ts.Stream, name: str = "degrees", bins: int = 256) -> Degrees:
    """Degrees and the degree distribution from undirected edge changes ``(a, b, +1/-1)``."""
    flow.record_types(Change)  # the records it emits (they cross Spark exchanges)
    ends = undirected.flat_map(lambda c: ((c[0], c[2]), (c[1], c[2])), name=f"{name}.endpoints")
    per_vertex = flow.stateful(ends, key=itemgetter(0), state=DegreeState, name=name, bins=bins)(_add)
    per_vertex.on_notify(_settle)
    hist = flow.stateful(per_vertex, key=lambda c: 0, state=DegreeHistogram, name=f"{name}.distribution")(_count)
    hist.on_notify(_emit)
    return Degrees(per_vertex, hist)
