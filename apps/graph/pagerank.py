"""PageRank of the directed graph: incremental residual push in an iterate scope.

**The model** is networkx's ``nx.pagerank(G, alpha)`` on the directed simple graph
(unweighted; a vertex is in the graph while it has an edge in or out): teleport
``1/N`` to every vertex and the mass of *dangling* vertices (no out-edges)
redistributed uniformly.  With dangling mass redistributed like the teleport, the
PageRank vector is proportional to the solution ``y`` of the *local* system

    y = 1 + alpha * P^T y          (P: row-normalised adjacency; dangling rows zero)

so ``rank(v) = y(v) / sum(y)``.  Nothing in ``y`` depends on ``N`` or on the dangling
mass, which is what makes it maintainable edge by edge.

**Incremental push.**  Every vertex keeps ``y`` and a residual ``r`` with the invariant
``r = 1 + alpha P^T y - y``.  When the out-edges of ``u`` change, the residuals of its
old and new out-neighbours change by ``alpha * y(u) * (1/d_new - 1/d_old)`` terms (and a
vertex entering the graph gets ``r = 1``).  Then synchronous rounds push: a vertex with
``|r| > eps`` adds ``r`` to ``y`` and sends ``alpha * r / d`` to each out-neighbour.  The
epoch starts from the previous epoch's ``y`` (warm start) and stops when no residual
exceeds ``eps``.

**Tolerance.**  A vertex stops pushing when ``|r(v)| <= c y(v)``.  Then with
``S = sum(y)``: ``|y* - y|_1 <= |r|_1 / (1 - alpha) <= c S / (1 - alpha)``, so
``sum(y*) >= S (1 - c / (1 - alpha))`` and the ranks ``y / S`` are within
``2 c / ((1 - alpha) - c)`` of the exact PageRank in L1.  With
``c = tol (1 - alpha) / (2 + tol)`` that is ``tol``: the emitted ranks are within
``tol`` (L1, summed over all vertices) of the exact PageRank -- default
``tol = 1e-10``.  (A threshold relative to ``y`` is local, and looser than an absolute
one where ``y`` is large, so fewer rounds are needed for the same guarantee.)

**Arithmetic and workers.**  ``y`` and ``r`` are fixed-point integers (``2**60`` per
unit, shares rounded half up), so sums never depend on the order messages arrive in,
and rounding adds at most half a unit (~4e-19) per message.  State ints must fit in
64 bits (checkpoints, migration) and a hub's ``y`` exceeds 8 units, so stored scores
are split into ``(units, fraction)`` (``PRVertex.yu``/``yf``, :class:`PRScores`).  Each round's pushes are
summed per target vertex on each worker (by the loop's gate, before the exchange).  On
one worker a vertex gets one sum per round and pushes at most once; on ``W`` workers
it may get up to ``W`` partial sums and push after each, so results on different worker
counts differ slightly -- each within ``tol`` of the exact vector.  A run is
reproducible for a given worker count (the engine schedules deterministically).

**Cost.**  A push round touches the vertices with residual above ``eps``; after a
change the residual decays by about ``alpha`` per round, so an epoch takes roughly
``log(change / eps) / log(1 / alpha)`` rounds (about 100 on the airport graph at
``tol = 1e-10``), each one pass of the loop.

Outputs: ``scores``, ``Change(vertex, old_y, new_y)`` (fixed-point ints) from the loop;
``ranks``, ``Change(vertex, old_rank, new_rank)`` for every vertex whose rank changed
(when the sum of ``y`` changes, that is every vertex), from one global key that keeps
the scores and their sum.
"""

from __future__ import annotations

from fractions import Fraction
from operator import itemgetter
from typing import Any, Optional

from attrs import define, field

import tstate as ts
from apps.graph.edges import Vertex
from apps.graph.loop import END, Change, at, round_of, sequenced_loop
from tstate.progress import Product
from tstate.state.context import Context
from tstate.types import Map

__all__ = ["PRVertex", "PRScores", "PageRank", "pagerank", "SCALE"]

#: Fixed-point unit of ``y`` and ``r``.
SCALE = 1 << 60


def _split(y: int) -> tuple[int, int]:
    """A fixed-point value as ``(units, fraction)``: state ints must fit in 64 bits, and
    ``y`` does not once it exceeds 8 (hubs do; the sum of ``y`` is about the number of
    vertices), so stored scores are split (``units * SCALE + fraction``)."""
    return divmod(y, SCALE)


def _join(p: tuple[int, int]) -> int:
    """The fixed-point value of a :func:`_split` pair."""
    return p[0] * SCALE + p[1]


@define
class PRVertex:
    out: Map[Vertex, int] = field(factory=Map)  # out-neighbour -> epoch the edge appeared
    targets: tuple[Vertex, ...] = ()  # the keys of `out`, as pushed (rebuilt when `out` changes)
    indeg: int = 0
    yu: int = 0  # the fixed-point score y = yu * SCALE + yf (see _split)
    yf: int = 0
    r: int = 0  # fixed-point residual (small at the end of every epoch)
    epoch: int = -1  # the epoch the fields below belong to
    old: Optional[tuple[int, int]] = None  # y at the start of `epoch`, split (None: absent)
    was_present: bool = False  # in the graph at the start of `epoch`
    base: Optional[list[Vertex]] = None  # out-neighbours at the start of `epoch`, if they changed


def _touch(st: PRVertex, e: int, ctx: Context) -> None:
    st.epoch = e
    present = bool(st.out) or st.indeg > 0
    st.was_present = present
    st.old = (st.yu, st.yf) if present else None
    ctx.notify_at(at(e, END))


def _endpoints(c: tuple[Vertex, Vertex, int]) -> tuple[tuple[Any, ...], ...]:
    return ((c[0], "o", c[1], c[2]), (c[1], "i", c[0], c[2]))


@define(frozen=True)
class PageRank:
    """Outputs of :func:`pagerank` (see the module docstring)."""

    ranks: ts.Stream
    scores: ts.Stream


@define
class PRScores:
    """The global key of the rank view: every vertex's ``y`` and their sum (both
    ``(units, fraction)``, see :func:`_split`)."""

    y: dict[Vertex, tuple[int, int]] = field(factory=dict)
    total: tuple[int, int] = (0, 0)
    before_total: Optional[tuple[int, int]] = None  # the sum at the start of the pending epoch
    before: dict[Vertex, Optional[tuple[int, int]]] = field(factory=dict)  # old y of the vertices changed this epoch


def pagerank(
    flow: ts.Dataflow,
    directed: ts.Stream,
    alpha: float = 0.85,
    tol: float = 1e-10,
    name: str = "pagerank",
    bins: int = 256,
) -> PageRank:
    """PageRank of the directed graph whose per-epoch edge changes ``(u, v, +1/-1)``
    are ``directed`` (see the module docstring)."""
    flow.record_types(Change)  # the records it emits (they cross Spark exchanges)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    damp = Fraction(alpha).limit_denominator(1 << 20)
    num, den = damp.numerator, damp.denominator
    # a vertex stops pushing once |r| <= c * y, c = tol (1 - alpha) / (2 + tol) (made a
    # little smaller as a fraction, so rounding can only tighten it): see the docstring
    c = Fraction(tol * (1 - alpha) / (2 + tol) * (1 - 1e-6)).limit_denominator(1 << 40)
    cnum, cden = c.numerator, c.denominator

    def share(r: int, d: int) -> int:
        """round(alpha * r / d) in fixed point, half up (deterministic for negatives)."""
        q = den * d
        return (2 * num * r + q) // (2 * q)

    def step(st: PRVertex, rec: tuple[Any, ...], ctx: Context) -> None:
        if len(rec) == 2:  # (v, delta r): this round's combined pushes to v
            r = st.r + rec[1]
            y = st.yu * SCALE + st.yf
            if (r if r >= 0 else -r) * cden <= y * cnum:
                st.r = r
                return
            t = ctx.time
            if st.epoch != t.outer:
                _touch(st, t.outer, ctx)
            st.yu, st.yf = divmod(y + r, SCALE)
            st.r = 0
            targets = st.targets
            if targets:
                ctx.emit((share(r, len(targets)), targets))
            return
        # round 0: (v, "o"/"i", w, +1/-1): an out-edge v -> w or an in-edge w -> v changed
        e = ctx.time.outer
        if st.epoch != e:
            _touch(st, e, ctx)
            ctx.notify_at(at(e, 0))
        if rec[1] == "o":
            if st.base is None:
                st.base = list(st.out)
            if rec[3] > 0:
                st.out[rec[2]] = e
            else:
                st.out.pop(rec[2], None)
        else:
            st.indeg += rec[3]

    def timer(st: PRVertex, t: Product, ctx: Context) -> None:
        v = ctx.key
        if round_of(t) == 0:  # all of the epoch's edge changes of v are in
            emit = ctx.emit
            base = st.base
            if base is not None:
                st.base = None
                st.targets = tuple(st.out)
                y = st.yu * SCALE + st.yf
                if y and set(base) != set(st.targets):
                    if base:
                        emit((-share(y, len(base)), tuple(base)))
                    if st.targets:
                        emit((share(y, len(st.targets)), st.targets))
            if not st.was_present and (st.out or st.indeg > 0):
                emit((SCALE, (v,)))  # a new vertex: teleport 1
            return
        present = bool(st.out) or st.indeg > 0  # END
        new = st.yu * SCALE + st.yf if present else None
        old = None if st.old is None else st.old[0] * SCALE + st.old[1]
        if new != old:
            ctx.emit(Change(v, old, new))
        if not present:
            ctx.clear()
            return
        st.old = None

    def combine(batches: list[list[Any]]) -> list[tuple[Vertex, int]]:
        """One round's pushes, summed per target vertex (on one worker: one record per
        vertex and round); the loop's other records (Change) are dropped."""
        acc: dict[Any, int] = {}
        get = acc.get
        for batch in batches:
            for rec in batch:
                if rec.__class__ is tuple:  # (amount, targets)
                    amount = rec[0]
                    for w in rec[1]:
                        acc[w] = get(w, 0) + amount
        return [p for p in acc.items() if p[1]]

    def body(scope: ts.Scope, inputs: ts.Stream) -> tuple[ts.Stream, ts.Stream]:
        vertex = flow.stateful(inputs, key=itemgetter(0), state=PRVertex, name=f"{name}.vertex", bins=bins)(step)
        vertex.on_notify(timer)
        results = vertex.filter(lambda r: r.__class__ is Change, name=f"{name}.results")
        return vertex, results  # the pushes are combined by the loop's gate

    scores = sequenced_loop(flow, directed, body, name=name, expand=_endpoints, combine=combine)

    def collect(st: PRScores, c: Change, ctx: Context) -> None:
        if st.before_total is None:
            st.before_total = st.total
            ctx.notify_at(ctx.time)
        v = c.key
        if v not in st.before:
            st.before[v] = None if c.old is None else _split(c.old)
        st.total = _split(_join(st.total) + (c.new or 0) - (c.old or 0))
        if c.new is None:
            st.y.pop(v, None)
        else:
            st.y[v] = _split(c.new)

    def normalise(st: PRScores, t: int, ctx: Context) -> None:
        s0 = 0 if st.before_total is None else _join(st.before_total)
        s1 = _join(st.total)
        before, ys = st.before, st.y
        # when the sum moved, every rank moved; otherwise only the changed vertices'
        for v in list(ys) + [v for v in before if v not in ys] if s0 != s1 else list(before):
            p = ys.get(v)
            q = before[v] if v in before else p
            y1 = None if p is None else _join(p)
            y0 = None if q is None else _join(q)
            old = y0 / s0 if y0 is not None and s0 else None
            new = y1 / s1 if y1 is not None and s1 else None
            if old != new:
                ctx.emit(Change(v, old, new))
        st.before_total = None
        st.before = {}

    ranks = flow.stateful(scores, key=lambda c: 0, state=PRScores, name=f"{name}.ranks")(collect)
    ranks.on_notify(normalise)
    return PageRank(ranks, scores)
