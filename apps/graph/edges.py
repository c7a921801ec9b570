"""Edge streams: validation, sliding windows, and the per-epoch edge changes.

An **edge update** is ``(src, dst, delta)`` at an integer epoch: ``delta > 0`` inserts
``delta`` occurrences of the directed edge ``src -> dst``, ``delta < 0`` retracts them
(``(src, dst)`` alone means ``delta = +1``).  The graph at epoch ``t`` is the set of
pairs whose occurrence count after all updates at epochs ``<= t`` is positive:

- :func:`clean` validates updates (vertex ids are ``str`` or ``int``, never ``bool``;
  numpy scalars are converted) and drops self-loops and zero deltas;
- :func:`window` turns insertions into a sliding window: every insertion at ``t`` is
  retracted again at ``t + width``;
- :func:`consolidate` keeps the occurrence count of every pair (keyed per unordered
  pair, in typed state) and emits, per epoch, only the *topology* changes: the directed
  graph's ``(u, v, +1/-1)`` and the undirected graph's ``(a, b, +1/-1)`` (``a < b`` in
  :func:`vertex_lt` order; ``{a, b}`` is present when ``a -> b`` or ``b -> a`` is).

Counts are combined **per epoch**: the net delta of a pair over one epoch is added to
its count, which is clamped at zero, so a retraction of an absent edge is ignored and
the order of updates inside an epoch never matters.  Duplicate insertions raise the
count (a multi-edge is one edge of the simple graph, present until every occurrence
is retracted).
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Optional, Union

from attrs import define

import tstate as ts

__all__ = [
    "Vertex",
    "GraphInputError",
    "InputStats",
    "vertex_lt",
    "vertex_rank",
    "ordered",
    "check_vertex",
    "parse_update",
    "clean",
    "window",
    "consolidate",
    "EdgeChanges",
    "EdgeCount",
]

#: A vertex id: a ``str`` or an ``int`` (``1`` and ``"1"`` are different vertices).
Vertex = Union[int, str]


class GraphInputError(ValueError):
    """An edge update that is not ``(src, dst[, delta])`` with ``str``/``int`` ids and
    an ``int`` delta."""


# -- the vertex order ------------------------------------------------------------------
def vertex_lt(a: Vertex, b: Vertex) -> bool:
    """The total order on vertex ids used for component labels and canonical pairs:
    ints (numerically) before strs (lexicographically)."""
    ta = a.__class__
    if ta is b.__class__:
        return a < b  # type: ignore[operator]
    return ta is int


def vertex_rank(v: Vertex) -> tuple[bool, Vertex]:
    """A sort key for :func:`vertex_lt` (``sorted(vs, key=vertex_rank)``)."""
    return (v.__class__ is str, v)


def ordered(a: Vertex, b: Vertex) -> tuple[Vertex, Vertex]:
    """The canonical (smaller-first) form of the unordered pair ``{a, b}``."""
    return (a, b) if vertex_lt(a, b) else (b, a)


# -- validation ---------------------------------------------------------------------------
def check_vertex(v: Any) -> Vertex:
    """``v`` as a vertex id, or :class:`GraphInputError`.

    ``str`` and ``int`` are accepted as they are; numpy integer / string scalars are
    converted; ``bool``, floats (even integral ones), ``None`` and anything else are
    rejected (they would make ``1``, ``1.0`` and ``True`` the same vertex, or none)."""
    t = v.__class__
    if t is str or t is int:
        return v  # type: ignore[no-any-return]
    if isinstance(v, bool) or v is None:
        raise GraphInputError(f"vertex id {v!r} is not a str or an int")
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        return str(v)
    raise GraphInputError(f"vertex id {v!r} of type {t.__qualname__} is not a str or an int")


def parse_update(record: Any) -> Optional[tuple[Vertex, Vertex, int]]:
    """A record as ``(src, dst, delta)``; ``None`` for a self-loop or a zero delta
    (ignored); :class:`GraphInputError` for anything malformed."""
    if not isinstance(record, (tuple, list)) or len(record) not in (2, 3):
        raise GraphInputError(f"edge update {record!r} is not (src, dst) or (src, dst, delta)")
    src = check_vertex(record[0])
    dst = check_vertex(record[1])
    if len(record) == 3:
        d = record[2]
        if d.__class__ is not int:
            if isinstance(d, bool) or not isinstance(d, numbers.Integral):
                raise GraphInputError(f"edge update {record!r}: delta {d!r} is not an int")
            d = int(d)
    else:
        d = 1
    if d == 0 or src == dst:
        return None
    return (src, dst, d)


@define
class InputStats:
    """What :func:`clean` dropped (shared by all workers of an embedded run)."""

    self_loops: int = 0
    zero: int = 0
    invalid: int = 0

    def dropped(self) -> int:
        return self.self_loops + self.zero + self.invalid


def clean(
    stream: ts.Stream, on_invalid: str = "raise", stats: Optional[InputStats] = None, name: Optional[str] = None
) -> ts.Stream:
    """Validate edge updates (see :func:`parse_update`): self-loops and zero deltas are
    dropped; a malformed record raises :class:`GraphInputError` (the run fails with an
    :class:`~tstate.errors.OperatorError` whose cause it is) with ``on_invalid="raise"``,
    or is dropped with ``on_invalid="skip"``.  ``stats`` counts what was dropped."""
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    st = stats if stats is not None else InputStats()
    skip = on_invalid == "skip"

    def _clean(record: Any) -> list[tuple[Vertex, Vertex, int]]:
        # Fast path: a well-formed tuple of str/int ids.
        if record.__class__ is tuple and len(record) == 3:
            s, d, k = record
            if (s.__class__ is str or s.__class__ is int) and (d.__class__ is str or d.__class__ is int) and k.__class__ is int:
                if k == 0:
                    st.zero += 1
                    return []
                if s == d:
                    st.self_loops += 1
                    return []
                return [record]
        try:
            u = parse_update(record)
        except GraphInputError:
            if skip:
                st.invalid += 1
                return []
            raise
        if u is None:
            if record[0] == record[1]:
                st.self_loops += 1
            else:
                st.zero += 1
            return []
        return [u]

    return stream.flat_map(_clean, name=name)


# -- sliding windows ------------------------------------------------------------------------
def window(
    flow: ts.Dataflow, stream: ts.Stream, width: int, horizon: Optional[int] = None, name: Optional[str] = None
) -> ts.Stream:
    """A sliding window of ``width`` epochs over edge updates ``(src, dst, delta)``:
    every update passes at its epoch ``t``, and every *insertion* (``delta > 0``) is
    retracted again at ``t + width`` (so it is part of the graphs of epochs ``t`` to
    ``t + width - 1``).  Retractions (``delta < 0``) pass unchanged: they remove an
    occurrence early.  With ``horizon``, expiries at epochs ``>= horizon`` are not
    emitted (the stream then ends with the last input epoch instead of draining)."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"window width must be an int >= 1, got {width!r}")

    def slide(inp: Any, out: Any, ctx: Any) -> None:
        for cap, batch in inp:
            t = cap.time
            out.give_many(cap, batch)
            if horizon is not None and t + width >= horizon:
                continue
            expire = [(s, d, -k) for s, d, k in batch if k > 0]
            if expire:
                out.give_many(cap.delayed(t + width), expire)

    return flow.unary_frontier(stream, name=name or "window")(slide)


# -- the per-epoch topology changes ---------------------------------------------------------
@define
class EdgeCount:
    """Occurrence counts of the unordered pair ``(a, b)`` (``a < b``): ``fwd`` of
    ``a -> b``, ``bwd`` of ``b -> a``; ``dfwd``/``dbwd`` the net deltas of the epoch
    being collected (applied by the epoch's timer)."""

    fwd: int = 0
    bwd: int = 0
    dfwd: int = 0
    dbwd: int = 0
    pending: bool = False


@define(frozen=True)
class EdgeChanges:
    """The outputs of :func:`consolidate`: ``directed`` (``(u, v, +1/-1)`` when the
    edge ``u -> v`` appears / disappears) and ``undirected`` (``(a, b, +1/-1)``, ``a < b``)."""

    directed: ts.Stream
    undirected: ts.Stream
    op: ts.Stream  # the stateful operator (for state queries)


def _pair_key(r: tuple[Vertex, Vertex, int]) -> tuple[Vertex, Vertex]:
    a = r[0]
    b = r[1]
    ta = a.__class__
    if ta is b.__class__:
        return (a, b) if a < b else (b, a)  # type: ignore[operator]
    return (a, b) if ta is int else (b, a)


def _count(st: EdgeCount, r: tuple[Vertex, Vertex, int], ctx: ts.Context) -> None:
    if r[0] == ctx.key[0]:
        st.dfwd += r[2]
    else:
        st.dbwd += r[2]
    if not st.pending:
        st.pending = True
        ctx.notify_at(ctx.time)


def _settle(st: EdgeCount, t: int, ctx: ts.Context) -> None:
    a, b = ctx.key
    f0, b0 = st.fwd, st.bwd
    f1 = f0 + st.dfwd
    b1 = b0 + st.dbwd
    if f1 < 0:
        f1 = 0
    if b1 < 0:
        b1 = 0
    emit = ctx.emit
    if (f0 > 0) != (f1 > 0):
        emit(("d", a, b, 1 if f1 else -1))
    if (b0 > 0) != (b1 > 0):
        emit(("d", b, a, 1 if b1 else -1))
    u0 = f0 > 0 or b0 > 0
    u1 = f1 > 0 or b1 > 0
    if u0 != u1:
        emit(("u", a, b, 1 if u1 else -1))
    if not u1:
        ctx.clear()
        return
    st.fwd, st.bwd, st.dfwd, st.dbwd, st.pending = f1, b1, 0, 0, False


def consolidate(flow: ts.Dataflow, updates: ts.Stream, name: str = "edges", bins: int = 256) -> EdgeChanges:
    """Occurrence counts per unordered pair (typed state :class:`EdgeCount`), and the
    per-epoch topology changes of the directed and the undirected simple graph (see
    the module docstring).  ``updates`` must be valid (:func:`clean`)."""
    counted = flow.stateful(updates, key=_pair_key, state=EdgeCount, name=name, bins=bins)(_count)
    counted.on_notify(_settle)
    directed = counted.filter(lambda c: c[0] == "d", name=f"{name}.directed").map(
        lambda c: (c[1], c[2], c[3]), name=f"{name}.directed.strip"
    )
    undirected = counted.filter(lambda c: c[0] == "u", name=f"{name}.undirected").map(
        lambda c: (c[1], c[2], c[3]), name=f"{name}.undirected.strip"
    )
    return EdgeChanges(directed, undirected, counted)


def updates_of(edges: Iterable[Any], delta: int = 1) -> list[tuple[Any, Any, int]]:
    """``[(src, dst, delta), ...]`` from ``(src, dst)`` pairs (a convenience)."""
    return [(e[0], e[1], delta) for e in edges]

