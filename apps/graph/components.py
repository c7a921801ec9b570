"""Connected components, maintained incrementally.

Every vertex of the undirected graph is labelled with the smallest vertex id of its
component (:func:`~apps.graph.edges.vertex_lt` order); per epoch, ``Change(vertex,
old_label, new_label)`` for every vertex whose label changed (``None``: absent), and a
:class:`ComponentsSummary` (number of components, size of the largest) whenever it
changed.  Two layouts (``blocks``, :func:`components`):

**blocks=1** (the default): one key holds the whole graph as a
:class:`~apps.graph.forest.SpanningForest` (typed state :class:`CCBlock`): the epoch's
change lists are applied as they arrive, insertions first, one edge at a time -- a
deleted tree edge is replaced by another edge of the vertex below its children in
``O(deg)`` when there is one, and only otherwise is the subtree searched -- and one
timer at the epoch emits the label changes and the summary.  The cost of an epoch is
proportional to the changed edges, the degrees at their ends, and the components that
really merge or split.

**blocks > 1**: min-label propagation per vertex in an iterate scope, spread over the
bins.  Besides its adjacency and label,
a vertex keeps a ``parent``: the neighbour its label came from.  A vertex adopts a label
only after its parent held it, so the parents form a spanning forest rooted at the label
vertices, and **a deletion only matters if it cuts a tree edge**.

The vertices run with tstate's *local rounds* (``local_rounds=True``,
:mod:`tstate.plan.local_rounds`): a worker applies the messages for its own vertices
within the round, and only messages to other workers' vertices take a round (none on
one worker).  That is exact because within a phase nothing depends on the round a
message arrives in: the reset flood resets exactly the vertices whose parent chain is
cut (parents do not change during the flood), and propagation converges to the least
label whatever the order.  Records say what they are by their shape, not their round
(a reset ``(v, sender)`` may arrive in round 0 then).

One epoch is one pass of an epoch-sequenced loop (:mod:`apps.graph.loop`), in phases:

0. *round 0*: the epoch's edge changes update the adjacencies.  An inserted edge's
   endpoints will propose their labels to each other.  A deleted edge ``(x, p)`` with
   ``parent(x) == p`` starts a reset at ``x``.
1. *reset flood* (rounds ``1 ..``): a vertex whose parent was reset (or whose parent
   edge is gone) drops its label and parent and tells all its neighbours; so the whole
   subtree that lost its path to the root is unlabelled, nothing else.  A labelled
   neighbour of an unlabelled vertex remembers to propose its label to it.
2. *propagation* (timer at ``PHASE2``, once the flood is over): labelled vertices send
   their label over inserted edges and to unlabelled neighbours; a vertex adopts any
   smaller label (unlabelled = infinite), records the sender as its parent and forwards
   it.  Every label in flight is valid (the id of a vertex connected to the receiver),
   since only subtrees with an intact path to their root kept theirs.
3. *self labels* (timer at ``PHASE3``): an unlabelled vertex, or a reset / new vertex
   whose own id is smaller than its label, takes its own id and propagates it.  This
   covers components that lost their root, or whose minimum was reset.
4. *end* (timer at ``END``, set only by vertices whose label or presence may have
   changed): a vertex whose label changed emits ``Change(vertex, old, new)`` (``None``
   for absent), and a vertex left without edges is dropped.

Why it is exact: after phase 3 quiesces, every edge has equal labels at both ends (each
label change is sent to all neighbours; each edge whose ends could differ at a phase
start is sent over), every label is the id of a vertex of the component, and the
component's minimum vertex holds its own id -- so every vertex holds the minimum.
The cost of an epoch is proportional to the changed edges plus the subtrees cut off
from their roots, not to the graph.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple, Optional

from attrs import define, field

import tstate as ts
from apps.graph.edges import EdgeChanges, Vertex, vertex_lt
from apps.graph.forest import SpanningForest
from apps.graph.loop import END, Change, at, round_of, sequenced_loop
from tstate.progress import Product
from tstate.state.context import Context
from tstate.types import Map

__all__ = ["CCBlock", "CCVertex", "ComponentSizes", "ComponentsSummary", "Components", "components", "PHASE2", "PHASE3"]

PHASE2 = 1 << 27  # rounds of epoch e (loop times at(e, round), apps.graph.loop)
PHASE3 = 1 << 29
_P2, _P3, _END = 1, 2, 4  # bits of CCVertex.armed
#: blocks > 1: a worker applies the messages for its own bins within the round
#: (tstate's ``local_rounds``; the module docstring says why that is exact)
LOCAL_ROUNDS = True


@define
class CCVertex:
    """One vertex's state: adjacency (neighbour -> epoch the edge appeared), label,
    BFS parent, and the scratch of the current epoch."""

    adj: Map[Vertex, int] = field(factory=Map)
    label: Optional[Vertex] = None
    parent: Optional[Vertex] = None
    epoch: int = -1  # the epoch the fields below belong to
    old: Optional[Vertex] = None  # label at the start of `epoch` (None: absent)
    reset: bool = False  # unlabelled in this epoch (reset or new)
    armed: int = 0  # phase timers set in this epoch
    propose: list[Vertex] = field(factory=list)  # neighbours to send our label at PHASE2


def _touch(st: CCVertex, e: int, ctx: Context) -> None:
    st.epoch = e
    st.old = st.label


def _arm_end(st: CCVertex, e: int, ctx: Context) -> None:
    """The vertex's label or presence may change this epoch: emit its net change at the
    end (a vertex whose label cannot change -- an endpoint of an inserted edge, a
    proposer -- needs no timer)."""
    if not st.armed & _END:
        st.armed |= _END
        ctx.notify_at(at(e, END))


def _step(st: CCVertex, rec: tuple[Any, ...], ctx: Context) -> None:
    t = ctx.time
    k = round_of(t)
    v = ctx.key
    if k == 0 and len(rec) == 3:  # an edge change (v, w, +1/-1)
        e = t.outer
        if st.epoch != e:
            _touch(st, e, ctx)
        w = rec[1]
        if rec[2] > 0:
            st.adj[w] = e
            if st.label is None:  # a new vertex: labelled in phase 3 at the latest
                if not st.armed & _P3:
                    st.reset = True
                    st.armed |= _P3
                    ctx.notify_at(at(e, PHASE3))
                    _arm_end(st, e, ctx)
            else:
                st.propose.append(w)
                if not st.armed & _P2:
                    st.armed |= _P2
                    ctx.notify_at(at(e, PHASE2))
        else:
            st.adj.pop(w, None)
            if not st.adj:
                _arm_end(st, e, ctx)  # it leaves the graph
            if st.parent == w:
                ctx.emit((v, w))  # the path to the root is cut here: reset, next round
        return
    if len(rec) == 2:  # reset flood: (v, sender) (with local rounds, also in round 0)
        frm = rec[1]
        if st.label is None or st.reset:
            return
        e = t.outer
        if st.parent == frm:
            if st.epoch != e:
                _touch(st, e, ctx)
            st.label = None
            st.parent = None
            st.reset = True
            _arm_end(st, e, ctx)
            if not st.armed & _P3:
                st.armed |= _P3
                ctx.notify_at(at(e, PHASE3))
            emit = ctx.emit
            for z in st.adj:
                emit((z, v))
        else:
            st.propose.append(frm)
            if not st.armed & _P2:
                st.armed |= _P2
                ctx.notify_at(at(e, PHASE2))
        return
    # a proposal (v, label, sender)
    lab = rec[1]
    cur = st.label
    if cur is None or (lab < cur if lab.__class__ is cur.__class__ else lab.__class__ is int):  # type: ignore[operator]
        e = t.outer
        if st.epoch != e:
            _touch(st, e, ctx)
        frm = rec[2]
        st.label = lab
        st.parent = frm
        _arm_end(st, e, ctx)
        emit = ctx.emit
        for z in st.adj:
            if z != frm:
                emit((z, lab, v))


def _phase(st: CCVertex, t: Product, ctx: Context) -> None:
    k = round_of(t)
    v = ctx.key
    emit = ctx.emit
    if k == PHASE2:
        st.armed &= ~_P2
        lab = st.label
        if lab is not None and not st.reset:
            adj = st.adj
            for z in dict.fromkeys(st.propose):
                if z in adj:
                    emit((z, lab, v))
        st.propose.clear()
    elif k == PHASE3:
        st.armed &= ~_P3
        if st.reset and st.adj and (st.label is None or vertex_lt(v, st.label)):
            st.label = v
            st.parent = None
            for z in st.adj:
                emit((z, v, v))
    else:  # END
        new = st.label if st.adj else None
        old = st.old
        if new != old:
            emit(Change(v, old, new))
        if not st.adj:
            ctx.clear()
            return
        st.reset = False
        st.armed = 0
        st.old = None


@define
class CCBlock:
    """The whole graph in one key (``blocks=1``): the adjacency and the spanning forest
    of :class:`~apps.graph.forest.SpanningForest`, the component sizes (label -> size,
    size -> number of components), and the current epoch's scratch: the label at its
    start of every vertex it touched, and the epoch whose timer is set."""

    adj: Map[Vertex, set[Vertex]] = field(factory=Map)
    tree: Map[Vertex, list[Vertex]] = field(factory=Map)  # [label, parent, level]
    sizes: Map[Vertex, int] = field(factory=Map)
    hist: dict[int, int] = field(factory=dict)
    touched: dict[Vertex, Optional[Vertex]] = field(factory=dict)
    armed: int = -1


def _block_step(st: CCBlock, rec: tuple[list[Any], list[tuple[Vertex, Vertex, int]]], ctx: Context) -> None:
    """A list of the epoch's undirected changes: applied at once, insertions first (a
    new path may spare a deletion's search; a split that a later insertion would merge
    again costs two relabellings)."""
    changes = rec[1]
    if not changes:
        return
    t = ctx.time
    if st.armed != t:
        st.armed = t
        ctx.notify_at(t)
    f = SpanningForest(st.adj, st.tree, st.touched)
    for a, b, d in changes:
        if d > 0:
            f.insert(a, b)
    for a, b, d in changes:
        if d < 0:
            f.delete(a, b)


def _block_emit(st: CCBlock, t: int, ctx: Context) -> None:
    """The epoch is complete: emit the label changes and the summary."""
    sizes, hist = st.sizes, st.hist
    before = (len(sizes), max(hist) if hist else 0)
    peek = st.tree.peek
    emit = ctx.emit
    for v, old in st.touched.items():
        tv = peek(v)
        new = None if tv is None else tv[0]
        if new != old:
            emit(Change(v, old, new))
            if old is not None:
                _resize(sizes, hist, old, -1)
            if new is not None:
                _resize(sizes, hist, new, +1)
    st.touched = {}
    now = (len(sizes), max(hist) if hist else 0)
    if now != before:
        emit(ComponentsSummary(*now))
    if not st.adj:
        ctx.clear()


class ComponentsSummary(NamedTuple):
    """The number of components and the size of the largest (0 for an empty graph)."""

    components: int
    largest: int


@define
class ComponentSizes:
    """Global state of the summary: label -> size, and size -> number of components."""

    sizes: dict[Vertex, int] = field(factory=dict)
    hist: dict[int, int] = field(factory=dict)
    before: Optional[tuple[int, int]] = None  # the summary at the start of the epoch


def _summary_of(st: ComponentSizes) -> tuple[int, int]:
    return (len(st.sizes), max(st.hist) if st.hist else 0)


def _resize(sizes: Any, hist: dict[int, int], label: Vertex, by: int) -> None:
    """Add ``by`` to component ``label``'s size (``sizes``: a dict or a Map)."""
    s = sizes.get(label, 0)
    if s > 0:
        n = hist[s] - 1
        if n:
            hist[s] = n
        else:
            del hist[s]
    s += by
    if s > 0:
        sizes[label] = s
        hist[s] = hist.get(s, 0) + 1
    else:
        sizes.pop(label, None)


def _count_sizes(st: ComponentSizes, c: Change, ctx: Context) -> None:
    if st.before is None:
        st.before = _summary_of(st)
        ctx.notify_at(ctx.time)
    if c.old is not None:
        _resize(st.sizes, st.hist, c.old, -1)
    if c.new is not None:
        _resize(st.sizes, st.hist, c.new, +1)


def _emit_summary(st: ComponentSizes, t: int, ctx: Context) -> None:
    now = _summary_of(st)
    if now != st.before:
        ctx.emit(ComponentsSummary(*now))
    st.before = None


def _endpoints(c: tuple[Vertex, Vertex, int]) -> tuple[tuple[Vertex, Vertex, int], ...]:
    return ((c[0], c[1], c[2]), (c[1], c[0], c[2]))


@define(frozen=True)
class Components:
    """Outputs of :func:`components`: ``labels`` (``Change(vertex, old_label,
    new_label)`` per epoch) and ``summary`` (a :class:`ComponentsSummary` at every
    epoch where it changed)."""

    labels: ts.Stream
    summary: ts.Stream
    op: Optional[ts.Stream] = None  # the stateful operator holding the state (for state queries)


def components(
    flow: ts.Dataflow, edges: EdgeChanges, name: str = "components", bins: int = 256, blocks: int = 1, key: int = 0
) -> Components:
    """Connected components of the undirected graph whose per-epoch edge changes are
    ``edges``'s (see the module docstring for ``blocks``).  ``key``: with one block, the key
    holding the whole state (which bin, hence which Spark partition, runs it; part of the
    state's layout: a restore must use the same)."""
    flow.record_types(Change, ComponentsSummary)  # the records it emits (they cross Spark exchanges)
    if blocks == 1:
        block = flow.stateful(edges.changes, key=_const(key), state=CCBlock, name=name, bins=bins)(_block_step)
        block.on_notify(_block_emit)
        labels = block.filter(lambda r: r.__class__ is Change, name=f"{name}.labels")
        summary = block.filter(lambda r: r.__class__ is ComponentsSummary, name=f"{name}.summary")
        return Components(labels, summary, block)

    ops = []

    def body(scope: ts.Scope, inputs: ts.Stream) -> tuple[ts.Stream, ts.Stream]:
        vertex = flow.stateful(
            inputs, key=itemgetter(0), state=CCVertex, name=f"{name}.vertex", bins=bins, local_rounds=LOCAL_ROUNDS
        )(_step)
        vertex.on_notify(_phase)
        ops.append(vertex)
        results = vertex.filter(lambda r: r.__class__ is Change, name=f"{name}.results")
        return vertex, results  # the gate drops the results from the loop

    labels = sequenced_loop(flow, edges.undirected, body, name=name, expand=_endpoints, local_rounds=LOCAL_ROUNDS)
    sizes = flow.stateful(labels, key=_zero, state=ComponentSizes, name=f"{name}.summary")(_count_sizes)
    sizes.on_notify(_emit_summary)
    return Components(labels, sizes, ops[0])


def _zero(r: Any) -> int:
    return 0


def _const(key: int) -> Any:
    """A key function giving ``key`` for every record."""

    def const(r: Any) -> int:
        return key

    return const
