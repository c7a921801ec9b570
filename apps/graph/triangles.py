"""Triangle counts of the undirected graph, per vertex and in total, per epoch.

Per epoch: ``Change(vertex, old, new)`` for every vertex whose count (or presence)
changed (``None``: not in the graph), and ``Change("triangles", old, new)`` for the
total when it changed (``sum(nx.triangles(G).values()) // 3``).  Two layouts
(``blocks``, :func:`triangles`):

**blocks=1** (the default): one key holds the whole graph (typed state
:class:`TriBlock`: neighbour sets and counts).  The epoch's change lists are applied as
they arrive, one edge at a time: inserting ``{u, v}`` closes a triangle with every
common neighbour ``w`` of ``u`` and ``v`` (before it), deleting it opens one with every
common neighbour after it, so ``u`` and ``v`` change by the number of common neighbours
and each ``w`` by one -- a set intersection per changed edge, which costs the smaller
degree.  The counts after a sequence depend only on the final graph, so any order is
exact.  One timer at the epoch emits the changes.

**blocks > 1**: per vertex, spread over the bins, in an iterate scope; each epoch's
edge changes ``e_1 < e_2 < ... < e_k`` (ordered by their canonical pair,
:func:`~apps.graph.edges.vertex_rank` order) are applied as if one after another:

    T(new) - T(old) = sum_i s_i * |{ w : (u_i, w) and (v_i, w) are in G_{i-1} }|

where ``G_{i-1}`` is the old graph with the changes before ``e_i`` applied.  An edge
``(x, w)`` is in ``G_{i-1}`` if it did not change this epoch and is present, or if it
changed and is *new* when its pair is before ``e_i``, *old* when after.  So the changes
of one epoch can be evaluated all at once, in any order, on any worker, and each
triangle that appears or disappears is counted exactly once.

In an epoch-sequenced loop (:mod:`apps.graph.loop`):

- round 0: the changes update the adjacencies (keyed per vertex, typed state
  :class:`TriVertex`) and are remembered (``chg``) for the epoch; once all are in (a
  timer at round 0) each endpoint of a changed edge tells the other its degree;
- round 1: the endpoint ``u`` of each changed edge ``(u, v)`` with the smaller degree
  (ties: the smaller id) sends ``v`` the neighbours ``w`` with ``(u, w)`` in
  ``G_{i-1}`` -- so an edge at a hub costs the other endpoint's degree, not the hub's;
- round 2: ``v`` keeps those with ``(v, w)`` in ``G_{i-1}``: ``c`` common neighbours.
  ``u`` and ``v`` gain ``s * c`` triangles and every common neighbour ``s``;
- at ``END`` a vertex whose count or presence changed emits ``Change(vertex, old,
  new)`` (``None``: not in the graph); only those set the timer.

The total is one global key: ``Change("triangles", old, new)`` at every epoch where it
changed (the sum of the per-vertex counts over 3, as ``sum(nx.triangles(G).values()) // 3``).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Optional

from attrs import define, field

import tstate as ts
from apps.graph.edges import EdgeChanges, Vertex, vertex_lt
from apps.graph.loop import END, Change, at, round_of, sequenced_loop
from tstate.progress import Product
from tstate.state.context import Context
from tstate.types import Map

__all__ = ["TriBlock", "TriVertex", "TriangleTotal", "Triangles", "triangles"]


@define
class TriBlock:
    """The whole graph in one key (``blocks=1``): neighbour sets, the triangles through
    every vertex in the graph, their sum (3x the triangles), and the current epoch's
    scratch: the count at its start of every vertex whose count or presence it
    changed (``None``: absent), the sum at its start, and the epoch whose timer is set."""

    adj: Map[Vertex, set[Vertex]] = field(factory=Map)
    count: Map[Vertex, int] = field(factory=Map)
    sum3: int = 0
    old: dict[Vertex, Optional[int]] = field(factory=dict)
    before: int = 0
    armed: int = -1


def _block_step(st: TriBlock, rec: tuple[list[Any], list[tuple[Vertex, Vertex, int]]], ctx: Context) -> None:
    """A list of the epoch's undirected changes, applied one edge at a time."""
    changes = rec[1]
    if not changes:
        return
    t = ctx.time
    if st.armed != t:
        st.armed = t
        st.before = st.sum3
        ctx.notify_at(t)
    adj, count, old = st.adj, st.count, st.old
    apeek, cpeek = adj.peek, count.peek
    total = 0
    for a, b, s in changes:
        sa = apeek(a)
        sb = apeek(b)
        if s > 0:
            if sa is not None and b in sa:  # (present already: consolidate never sends that)
                continue
            if sa is None:
                if a not in old:
                    old[a] = None
                sa = set()
                adj[a] = sa
                count[a] = 0
            if sb is None:
                if b not in old:
                    old[b] = None
                sb = set()
                adj[b] = sb
                count[b] = 0
            common = sa & sb
            sa.add(b)
            sb.add(a)
        else:
            if sa is None or sb is None or b not in sa:  # (absent: likewise)
                continue
            sa.discard(b)
            sb.discard(a)
            common = sa & sb
        adj.touch(a)
        adj.touch(b)
        c = len(common)
        if c:
            for w in common:
                n = cpeek(w)
                if w not in old:
                    old[w] = n
                count[w] = n + s
            n = cpeek(a)
            if a not in old:
                old[a] = n
            count[a] = n + s * c
            n = cpeek(b)
            if b not in old:
                old[b] = n
            count[b] = n + s * c
            total += 3 * s * c
        if not sa:  # no edges left: not in the graph (and no triangles)
            if a not in old:
                old[a] = cpeek(a)
            del adj[a]
            del count[a]
        if not sb:
            if b not in old:
                old[b] = cpeek(b)
            del adj[b]
            del count[b]
    st.sum3 += total


def _block_emit(st: TriBlock, t: int, ctx: Context) -> None:
    """The epoch is complete: emit the count changes and the total's (as ``(TOTAL,
    old, new)``, turned into a ``Change`` by :func:`triangles`)."""
    peek = st.count.peek
    emit = ctx.emit
    for v, o in st.old.items():
        n = peek(v)
        if n != o:
            emit(Change(v, o, n))
    st.old = {}
    if st.sum3 != st.before:
        emit((_TOTAL, st.before // 3, st.sum3 // 3))
    if not st.adj:
        ctx.clear()


_TOTAL = "triangles"


@define
class TriVertex:
    adj: Map[Vertex, int] = field(factory=Map)  # neighbour -> epoch the edge appeared
    count: int = 0  # triangles through this vertex
    epoch: int = -1  # the epoch the fields below belong to
    old: Optional[int] = None  # count at the start of `epoch` (None: absent)
    chg: dict[Vertex, int] = field(factory=dict)  # this epoch's edge changes here: neighbour -> +1/-1
    owner: bool = False  # the round-0 timer is set (this vertex has a changed edge)
    armed: bool = False  # the END timer is set


def _rank(v: Vertex) -> tuple[bool, Vertex]:
    return (v.__class__ is str, v)


def _pair_rank(x: Vertex, z: Vertex) -> tuple[Any, Any]:
    a, b = _rank(x), _rank(z)
    return (a, b) if a < b else (b, a)


def _present(adj: Map, chg: dict[Vertex, int], x: Vertex, z: Vertex, stage: tuple[Any, Any]) -> bool:
    """Whether edge ``(x, z)`` is in the graph as it is before the change ``stage``."""
    if z not in chg:
        return z in adj
    return (z in adj) == (_pair_rank(x, z) < stage)


def _touch(st: TriVertex, e: int, ctx: Context) -> None:
    st.epoch = e
    st.old = st.count if st.adj else None
    st.chg.clear()  # (left from an epoch whose END timer this vertex did not need)
    st.owner = False
    st.armed = False


def _arm_end(st: TriVertex, e: int, ctx: Context) -> None:
    """The vertex's count or presence changes this epoch: emit it at the end (an
    endpoint of a changed edge that closes no triangle needs no timer)."""
    if not st.armed:
        st.armed = True
        ctx.notify_at(at(e, END))


def _view(adj: Map, chg: dict[Vertex, int], v: Vertex, w: Vertex) -> tuple[Vertex, ...]:
    """``v``'s neighbours ``z`` with ``(v, z)`` in the graph as it is before the change
    of edge ``(v, w)`` (see the module docstring)."""
    stage = _pair_rank(v, w)
    return tuple(z for z in adj if z != w and (z not in chg or (_pair_rank(v, z) < stage) == (z in adj))) + tuple(
        z for z in chg if z != w and z not in adj and _pair_rank(v, z) > stage
    )


def _step(st: TriVertex, rec: tuple[Any, ...], ctx: Context) -> None:
    t = ctx.time
    e = t.outer
    v = ctx.key
    k = round_of(t)
    if k == 0:  # an edge change (v, w, +1/-1)
        if st.epoch != e:
            _touch(st, e, ctx)
        w = rec[1]
        if rec[2] > 0:
            st.adj[w] = e
            if st.old is None:
                _arm_end(st, e, ctx)  # it enters the graph
        else:
            st.adj.pop(w, None)
            if not st.adj:
                _arm_end(st, e, ctx)  # it leaves the graph
        st.chg[w] = rec[2]
        if not st.owner:
            st.owner = True
            ctx.notify_at(at(e, 0))
        return
    if len(rec) == 2:  # (v, delta): triangles through v appeared / disappeared
        if st.epoch != e:
            _touch(st, e, ctx)
        st.count += rec[1]
        _arm_end(st, e, ctx)
        return
    if k == 1:  # (v, u, degree of u): the endpoint with the smaller degree sends its view
        u, du = rec[1], rec[2]
        dv = len(st.adj)
        if dv < du or (dv == du and vertex_lt(v, u)):
            ctx.emit((u, v, st.chg[u], _view(st.adj, st.chg, v, u)))
        return
    # (v, u, s, view): the changed edge (u, v) by s; view = u's neighbours before it
    u, s, view = rec[1], rec[2], rec[3]
    stage = _pair_rank(u, v)
    adj, chg = st.adj, st.chg
    common = [w for w in view if _present(adj, chg, v, w, stage)]
    if common:
        if st.epoch != e:
            _touch(st, e, ctx)
        n = s * len(common)
        st.count += n
        _arm_end(st, e, ctx)
        emit = ctx.emit
        emit((u, n))
        for w in common:
            emit((w, s))


def _timer(st: TriVertex, t: Product, ctx: Context) -> None:
    v = ctx.key
    if round_of(t) == 0:  # all of this epoch's changes are in: tell the other ends our degree
        d = len(st.adj)
        emit = ctx.emit
        for w in st.chg:
            emit((w, v, d))
        return
    new = st.count if st.adj else None  # END
    if new != st.old:
        ctx.emit(Change(v, st.old, new))
    if not st.adj:
        ctx.clear()
        return
    st.chg.clear()
    st.owner = False
    st.armed = False
    st.old = None


@define
class TriangleTotal:
    sum3: int = 0  # sum of the per-vertex counts: 3 x the triangles
    before: Optional[int] = None


def _add(st: TriangleTotal, c: Change, ctx: Context) -> None:
    if st.before is None:
        st.before = st.sum3
        ctx.notify_at(ctx.time)
    st.sum3 += (c.new or 0) - (c.old or 0)


def _emit_total(st: TriangleTotal, t: int, ctx: Context) -> None:
    if st.before is not None and st.before != st.sum3:
        ctx.emit(Change("triangles", st.before // 3, st.sum3 // 3))
    st.before = None


def _endpoints(c: tuple[Vertex, Vertex, int]) -> tuple[tuple[Vertex, Vertex, int], ...]:
    return ((c[0], c[1], c[2]), (c[1], c[0], c[2]))


@define(frozen=True)
class Triangles:
    """Outputs of :func:`triangles`: ``per_vertex`` and ``total`` changes."""

    per_vertex: ts.Stream
    total: ts.Stream
    op: Optional[ts.Stream] = None  # the stateful operator holding the state (for state queries)


def triangles(
    flow: ts.Dataflow, edges: EdgeChanges, name: str = "triangles", bins: int = 256, blocks: int = 1, key: int = 0
) -> Triangles:
    """Triangle counts from the undirected edge changes of ``edges`` (see the module
    docstring for ``blocks``)."""
    flow.record_types(Change)  # the records it emits (they cross Spark exchanges)
    if blocks == 1:
        block = flow.stateful(edges.changes, key=_const(key), state=TriBlock, name=name, bins=bins)(_block_step)
        block.on_notify(_block_emit)
        per_vertex = block.filter(lambda r: r.__class__ is Change, name=f"{name}.vertices")
        total = block.filter(lambda r: r.__class__ is tuple, name=f"{name}.totals").map(
            lambda r: Change(r[0], r[1], r[2]), name=f"{name}.total"
        )
        return Triangles(per_vertex, total, block)

    ops = []

    def body(scope: ts.Scope, inputs: ts.Stream) -> tuple[ts.Stream, ts.Stream]:
        vertex = flow.stateful(inputs, key=itemgetter(0), state=TriVertex, name=f"{name}.vertex", bins=bins)(_step)
        vertex.on_notify(_timer)
        ops.append(vertex)
        results = vertex.filter(lambda r: r.__class__ is Change, name=f"{name}.results")
        return vertex, results  # the gate drops the results from the loop

    per_vertex = sequenced_loop(flow, edges.undirected, body, name=name, expand=_endpoints)
    total = flow.stateful(per_vertex, key=_zero, state=TriangleTotal, name=f"{name}.total")(_add)
    total.on_notify(_emit_total)
    return Triangles(per_vertex, total, ops[0])


def _zero(r: Any) -> int:
    return 0


def _const(key: int) -> Any:
    """A key function giving ``key`` for every record."""

    def const(r: Any) -> int:
        return key

    return const
