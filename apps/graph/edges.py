"""Edge streams: validation, sliding windows, and the per-epoch edge changes.

An **edge update** is ``(src, dst, delta)`` at an integer epoch: ``delta > 0`` inserts
``delta`` occurrences of the directed edge ``src -> dst``, ``delta < 0`` retracts them
(``(src, dst)`` alone means ``delta = +1``).  The graph at epoch ``t`` is the set of
pairs whose occurrence count after all updates at epochs ``<= t`` is positive:

- :func:`clean` validates updates (vertex ids are ``str`` or ``int``, never ``bool``;
  numpy scalars are converted) and drops self-loops and zero deltas;
- :func:`window` turns insertions into a sliding window: every insertion at ``t`` is
  retracted again at ``t + width``;
- :func:`net_changes` sums the deltas of every unordered pair per epoch (and can do
  the validation and the window itself, in the same operator);
- :func:`consolidate` keeps the occurrence counts of every pair (keyed per unordered
  pair, typed state :class:`EdgeCount`) and emits, per epoch, only the *topology*
  changes: the directed graph's ``(u, v, +1/-1)`` and the undirected graph's
  ``(a, b, +1/-1)`` (``a < b`` in :func:`vertex_lt` order; ``{a, b}`` is present when
  ``a -> b`` or ``b -> a`` is), at most one per pair and epoch.

Counts are combined **per epoch**: the net delta of a pair over one epoch is added to
its count, which is clamped at zero, so a retraction of an absent edge is ignored and
the order of updates inside an epoch never matters.  Duplicate insertions raise the
count (a multi-edge is one edge of the simple graph, present until every occurrence
is retracted).
"""

from __future__ import annotations

import numbers
from operator import itemgetter
from typing import Any, Optional, Union

from attrs import define

import tstate as ts
from tstate.state.context import Context

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
    "net_changes",
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
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # vertex ids are state keys: 64-bit ints


def check_vertex(v: Any) -> Vertex:
    """``v`` as a vertex id, or :class:`GraphInputError`.

    ``str`` and ``int`` (64-bit: state must be encodable) are accepted as they are;
    numpy integer / string scalars are converted; ``bool``, floats (even integral
    ones), ``None`` and anything else are rejected (they would make ``1``, ``1.0`` and
    ``True`` the same vertex, or none)."""
    t = v.__class__
    if t is str:
        return v  # type: ignore[no-any-return]
    if isinstance(v, bool) or v is None:
        raise GraphInputError(f"vertex id {v!r} is not a str or an int")
    if isinstance(v, numbers.Integral):
        i = int(v)
        if not _INT_MIN <= i <= _INT_MAX:
            raise GraphInputError(f"vertex id {v!r} does not fit in 64 bits")
        return i
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
            if (
                (s.__class__ is str or (s.__class__ is int and _INT_MIN <= s <= _INT_MAX))
                and (d.__class__ is str or (d.__class__ is int and _INT_MIN <= d <= _INT_MAX))
                and k.__class__ is int
            ):
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
def _route_key(r: Any) -> Any:
    """The unordered pair of an update (``None`` for a record too malformed to have one:
    it is routed anywhere and rejected there)."""
    try:
        a = r[0]
        b = r[1]
    except Exception:
        return None
    ta = a.__class__
    tb = b.__class__
    if (ta is str or ta is int) and (tb is str or tb is int):
        if ta is tb:
            return (a, b) if a < b else (b, a)
        return (a, b) if ta is int else (b, a)
    return None


def net_changes(
    flow: ts.Dataflow,
    updates: ts.Stream,
    window_width: Optional[int] = None,
    horizon: Optional[int] = None,
    validate: bool = True,
    on_invalid: str = "raise",
    stats: Optional[InputStats] = None,
    name: str = "net",
    bins: int = 256,
) -> ts.Stream:
    """The net occurrence deltas of every unordered pair per epoch: one record
    ``((a, b), d_ab, d_ba)`` per pair and epoch with a non-zero net (``a < b``;
    ``d_ab`` is the net of ``a -> b``, ``d_ba`` of ``b -> a``).

    Fuses :func:`clean` (with ``validate``), :func:`window` (with ``window_width`` and
    ``horizon``) and the per-epoch sums, in one operator routed by pair: the sums of
    an epoch are emitted once every update of it has arrived (a notification), so
    the counts downstream never depend on the order of updates within an epoch."""
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    if window_width is not None and (not isinstance(window_width, int) or window_width < 1):
        raise ValueError(f"window width must be an int >= 1, got {window_width!r}")
    st = stats if stats is not None else InputStats()
    skip = on_invalid == "skip"
    width = window_width

    def valid(r: Any) -> Optional[tuple[Vertex, Vertex, int]]:
        try:
            u = parse_update(r)
        except GraphInputError:
            if skip:
                st.invalid += 1
                return None
            raise
        if u is None:
            if isinstance(r, (tuple, list)) and len(r) >= 2 and r[0] == r[1]:
                st.self_loops += 1
            else:
                st.zero += 1
        return u

    def net(inp: Any, out: Any, ctx: Any) -> None:
        # ctx.state: "sums": epoch -> pair -> [d_ab, d_ba]; "cap": ONE capability, held at
        # the earliest epoch with sums (window expiries reach up to `width` epochs ahead;
        # one capability keeps the progress tracker's work independent of the window).
        state = ctx.state
        acc: dict[int, dict[Any, list[int]]] = state["sums"]
        for cap, batch in inp:
            t = cap.time
            held = state["cap"]
            if held is None or t < held.time:
                state["cap"] = cap.retain()
                if held is not None:
                    held.drop()
            a = acc.get(t)
            if a is None:
                a = acc[t] = {}
            later = None
            if width is not None and (horizon is None or t + width < horizon):
                later = acc.get(t + width)
                if later is None:
                    later = acc[t + width] = {}
            for r in batch:
                if validate:
                    if r.__class__ is tuple and len(r) == 3:
                        s, d, k = r
                        ts_, td = s.__class__, d.__class__
                        if not (
                            (ts_ is str or (ts_ is int and _INT_MIN <= s <= _INT_MAX))
                            and (td is str or (td is int and _INT_MIN <= d <= _INT_MAX))
                            and k.__class__ is int
                            and k
                            and s != d
                        ):
                            u = valid(r)
                            if u is None:
                                continue
                            s, d, k = u
                    else:
                        u = valid(r)
                        if u is None:
                            continue
                        s, d, k = u
                else:
                    s, d, k = r
                ts_ = s.__class__
                if ts_ is d.__class__:
                    fwd = s < d
                else:
                    fwd = ts_ is int
                key = (s, d) if fwd else (d, s)
                i = 0 if fwd else 1
                e = a.get(key)
                if e is None:
                    e = a[key] = [0, 0]
                e[i] += k
                if later is not None and k > 0:
                    e = later.get(key)
                    if e is None:
                        e = later[key] = [0, 0]
                    e[i] -= k
        held = state["cap"]
        if held is None:
            return
        frontier = inp.frontier
        for t in sorted(acc):
            if any(f <= t for f in frontier):
                break
            sums = acc.pop(t)
            recs = [(p, e[0], e[1]) for p, e in sums.items() if e[0] or e[1]]
            if recs:
                c = held.delayed(t)
                out.give_many(c, recs)
                c.drop()
        if acc:
            held.downgrade(min(acc))
        else:
            held.drop()
            state["cap"] = None

    return flow.unary_frontier(
        updates, exchange=_route_key, name=name, state=lambda: {"sums": {}, "cap": None}, bins=bins
    )(net)


@define
class EdgeCount:
    """Occurrence counts of the unordered pair ``(a, b)`` (``a < b``): ``fwd`` of
    ``a -> b``, ``bwd`` of ``b -> a`` (a pair with both zero holds no state)."""

    fwd: int = 0
    bwd: int = 0


@define(frozen=True)
class EdgeChanges:
    """The outputs of :func:`consolidate`: ``directed`` (``(u, v, +1/-1)`` when the
    edge ``u -> v`` appears / disappears) and ``undirected`` (``(a, b, +1/-1)``, ``a < b``)."""

    directed: ts.Stream
    undirected: ts.Stream
    op: ts.Stream  # the stateful operator (for state queries)


def _apply(st: EdgeCount, rec: tuple[tuple[Vertex, Vertex], int, int], ctx: Context) -> None:
    """One pair's net deltas of one epoch (exactly one record per pair and epoch)."""
    a, b = rec[0]
    f0, b0 = st.fwd, st.bwd
    f1 = f0 + rec[1]
    b1 = b0 + rec[2]
    if f1 < 0:
        f1 = 0
    if b1 < 0:
        b1 = 0
    emit = ctx.emit
    if (f0 > 0) != (f1 > 0):
        emit(("d", a, b, 1 if f1 else -1))
    if (b0 > 0) != (b1 > 0):
        emit(("d", b, a, 1 if b1 else -1))
    u1 = f1 > 0 or b1 > 0
    if (f0 > 0 or b0 > 0) != u1:
        emit(("u", a, b, 1 if u1 else -1))
    if not u1:
        ctx.clear()
        return
    st.fwd = f1
    st.bwd = b1


def consolidate(
    flow: ts.Dataflow,
    updates: ts.Stream,
    name: str = "edges",
    bins: int = 256,
    window_width: Optional[int] = None,
    horizon: Optional[int] = None,
    validate: bool = False,
    on_invalid: str = "raise",
    stats: Optional[InputStats] = None,
) -> EdgeChanges:
    """Occurrence counts per unordered pair (typed state :class:`EdgeCount`, keyed by
    the pair), and the per-epoch topology changes of the directed and the undirected
    simple graph (see the module docstring).  The per-epoch sums come from
    :func:`net_changes` (which also validates with ``validate=True`` and windows with
    ``window_width``); without ``validate`` the updates must be valid already."""
    sums = net_changes(
        flow, updates, window_width, horizon, validate, on_invalid, stats, name=f"{name}.net", bins=bins
    )
    counted = flow.stateful(sums, key=itemgetter(0), state=EdgeCount, name=name, bins=bins)(_apply)
    directed = counted.filter(lambda c: c[0] == "d", name=f"{name}.directed").map(
        lambda c: (c[1], c[2], c[3]), name=f"{name}.directed.strip"
    )
    undirected = counted.filter(lambda c: c[0] == "u", name=f"{name}.undirected").map(
        lambda c: (c[1], c[2], c[3]), name=f"{name}.undirected.strip"
    )
    return EdgeChanges(directed, undirected, counted)

