"""Edge streams: validation, sliding windows, and the per-epoch edge changes.

An **edge update** is ``(src, dst, delta)`` at an integer epoch: ``delta > 0`` inserts
``delta`` occurrences of the directed edge ``src -> dst``, ``delta < 0`` retracts them
(``(src, dst)`` alone means ``delta = +1``).  The graph at epoch ``t`` is the set of
pairs whose occurrence count after all updates at epochs ``<= t`` is positive:

- :func:`clean` validates updates (vertex ids are ``str`` or ``int``, never ``bool``;
  numpy scalars are converted) and drops self-loops and zero deltas;
- :func:`window` turns insertions into a sliding window: every insertion at ``t`` is
  retracted again at ``t + width``;
- :func:`consolidate` sums the deltas of every pair per epoch (with a window, the
  expiries too), keeps the occurrence counts of every pair (in buckets of pairs, typed
  state :class:`EdgeBucket`) and emits, per epoch, only the *topology* changes: the
  directed graph's ``(u, v, +1/-1)`` and the undirected graph's ``(a, b, +1/-1)``
  (``a < b`` in :func:`vertex_lt` order; ``{a, b}`` is present when ``a -> b`` or
  ``b -> a`` is), at most one per pair and epoch, as lists (one record per bucket and
  epoch, :class:`EdgeChanges`).

Counts are combined **per epoch**: the net delta of a pair over one epoch is added to
its count, which is clamped at zero, so a retraction of an absent edge is ignored and
the order of updates inside an epoch never matters.  What the epoch's updates retract
beyond a pair's count (before the window's expiries of that epoch) is counted in
:attr:`InputStats.absent`.  Duplicate insertions raise the
count (a multi-edge is one edge of the simple graph, present until every occurrence
is retracted).
"""

from __future__ import annotations

import numbers
import zlib
from operator import itemgetter
from typing import Any, Optional, Union

from attrs import define, field

import tstate as ts
from tstate.errors import ConfigurationError
from tstate.state.context import Context
from tstate.types import Map

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
    "EdgeBucket",
    "BUCKETS",
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
    #: occurrences retracted from edges that had none (a retraction of an absent edge, or
    #: the part of one beyond the edge's count): not applied (counted by
    #: :func:`consolidate` -- in this process: an embedded run's)
    absent: int = 0

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

#: The default number of pair buckets of :func:`_bucket` (``consolidate(buckets=...)``
#: spreads the edge counts over that many keys; :func:`~apps.graph.stream.build` keeps
#: them in one).
BUCKETS = 64


@define
class EdgeBucket:
    """One bucket of unordered pairs ``(a, b)`` (``a < b``): the occurrence counts
    ``[fwd, bwd]`` of ``a -> b`` and ``b -> a`` of every pair present (a pair with both
    zero has no entry), and the pending net deltas per epoch, ``epoch -> (a, b) ->
    [d_ab, d_ba, x_ab, x_ba]``: the updates of the epoch (``d``) and, with a window, the
    expiries of earlier insertions (``x``; a state written before they were kept apart
    has ``[d_ab, d_ba]`` with both).  The bucket has a timer at its earliest pending epoch; a bucket
    with nothing in it holds no state."""

    # (lists, not tuples: a dict holding only tuples of ints is untracked by every
    # garbage collection and tracked again, as new, by the next tuple put in it -- so each
    # epoch's first young-generation collection would walk all the pairs)
    counts: Map[tuple[Vertex, Vertex], list[int]] = field(factory=Map)
    #: epoch -> pair -> [updates a->b, updates b->a, expiries a->b, expiries b->a]
    due: dict[int, dict[tuple[Vertex, Vertex], list[int]]] = field(factory=dict)
    buckets: int = 0  # the number of buckets the state was built for (0: not yet set)


class EdgeChanges:
    """The outputs of :func:`consolidate`.

    ``changes`` carries, per epoch and bucket, one record ``(directed, undirected)``: the
    lists of the epoch's topology changes of the directed graph (``(u, v, +1/-1)`` when
    ``u -> v`` appears / disappears) and of the undirected graph (``(a, b, +1/-1)``,
    ``a < b``), at most one per pair -- what the algorithms read, a list at a time.
    ``directed`` and ``undirected`` are the same changes one record each (built on first
    use); ``op`` is the stateful operator (for state queries)."""

    def __init__(self, flow: ts.Dataflow, changes: ts.Stream, op: ts.Stream, buckets: int, name: str) -> None:
        self.flow = flow
        self.changes = changes
        self.op = op
        self.buckets = buckets
        self.name = name
        self._directed: Optional[ts.Stream] = None
        self._undirected: Optional[ts.Stream] = None

    @property
    def directed(self) -> ts.Stream:
        if self._directed is None:
            self._directed = self.changes.flat_map(itemgetter(0), name=f"{self.name}.directed")
        return self._directed

    @property
    def undirected(self) -> ts.Stream:
        if self._undirected is None:
            self._undirected = self.changes.flat_map(itemgetter(1), name=f"{self.name}.undirected")
        return self._undirected


def _vertex_hash(v: Vertex) -> int:
    return v if v.__class__ is int else zlib.crc32(v.encode())  # type: ignore[union-attr, return-value]


def _bucket(r: tuple[Vertex, Vertex, int], buckets: int = BUCKETS) -> int:
    """A pair's bucket: symmetric, cheap, and the same in every process (not
    ``hash()``, which is salted per process for strings): a restored checkpoint's sums
    and the new updates of a pair must meet in one bucket, or the pair would get two
    net deltas in one epoch."""
    return (_vertex_hash(r[0]) ^ _vertex_hash(r[1])) % buckets


def _grouper(flow: ts.Dataflow, updates: ts.Stream, buckets: int, name: str, lists: bool = False) -> ts.Stream:
    """Each batch of updates as one record ``(bucket, [updates...])`` per bucket it
    touches (stateless: nothing is kept between batches), so the bucket operator is
    called once per bucket and batch, not once per update.  ``lists``: each update as
    one record, the list ``[bucket, src, dst, delta]`` (see :func:`consolidate`)."""
    if lists:
        return updates.map(lambda r: [_bucket(r, buckets), r[0], r[1], r[2]], name=name)

    @flow.unary_frontier(updates, name=name)
    def group(inp: Any, out: Any, ctx: Any) -> None:
        for cap, batch in inp:
            if not batch:
                continue
            if buckets == 1:
                out.give(cap, (0, list(batch)))
                continue
            by: dict[int, list[Any]] = {}
            for r in batch:
                k = _bucket(r, buckets)
                lst = by.get(k)
                if lst is None:
                    by[k] = [r]
                else:
                    lst.append(r)
            out.give_many(cap, list(by.items()))

    return group


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
    undirected: bool = False,
    buckets: int = 1,
    lists: bool = False,
) -> EdgeChanges:
    """Occurrence counts per unordered pair and the per-epoch topology changes of the
    directed and the undirected simple graph (see the module docstring).

    The pairs are spread over ``buckets`` buckets (typed state :class:`EdgeBucket`, one
    key each; default one: the work per update is a few dict operations, and one key
    needs one timer per epoch).  The number is part of the state's layout: a restore
    must use the same (a bucket holding state for another number raises
    :class:`~tstate.errors.ConfigurationError` when it is next used).  Each batch of updates reaches a
    bucket as one record (a stateless grouping step), an update at epoch ``t`` is added
    to the bucket's sums of ``t`` and, with ``window_width``, an insertion is subtracted
    again from the sums of ``t + window_width`` (unless that is ``>= horizon``).  The
    bucket's timer at ``t`` fires once every update of ``t`` has arrived: it adds each
    pair's net delta to its counts (clamped at zero) and emits the epoch's topology
    changes as one record of two lists (:class:`EdgeChanges`), so the counts never
    depend on the order of updates within an epoch, and the cost of an epoch is a few
    dict operations per update.  Everything pending -- future expiries too -- is typed
    state, carried by checkpoints and migration.  With ``validate`` the updates are
    checked first (:func:`clean`, with ``on_invalid`` and ``stats``; ``stats.absent``
    counts what updates retract from absent edges, either way); without it they
    must be valid ``(src, dst, delta)`` tuples without self-loops or zero deltas.

    With ``undirected``, an update ``(a, b, delta)`` is one of the *undirected* edge
    ``{a, b}``: it counts for both ``a -> b`` and ``b -> a`` (so the directed graph has
    every edge both ways, and ``(b, a, -1)`` retracts an ``(a, b, +1)``).

    ``lists=True``: the updates inside the dataflow and the changes of the ``changes``
    records are lists, not tuples (the same values; what the algorithms with one block
    read): each update goes to its bucket alone, as ``[bucket, u, v, d]`` (a map, not
    the batch-grouping frontier operator: a dataflow without frontier operators lets
    the Spark backend skip, per stage, the job that looks for records given at later
    times), and the changes as lists ``[u, v, d]``.  On Spark a list crosses an
    exchange as a msgpack array, encoded and decoded in C, where a tuple is an
    extension packed and unpacked in Python one at a time: an edge list 4-5x cheaper
    to ship.  (The per-edge streams ``directed`` and ``undirected``, which the loops of
    ``blocks > 1`` read, want tuples: keep the default there.)"""
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}")
    if window_width is not None and (not isinstance(window_width, int) or window_width < 1):
        raise ValueError(f"window width must be an int >= 1, got {window_width!r}")
    if not (isinstance(buckets, int) and 1 <= buckets <= 1 << 16):
        raise ValueError(f"buckets must be an int in [1, 65536], got {buckets!r}")
    width = window_width
    both = undirected
    B = buckets
    L = lists
    if validate:
        updates = clean(updates, on_invalid, stats, name=f"{name}.clean")

    def add(st: EdgeBucket, rec: Any, ctx: Context) -> None:
        """``rec``: ``(bucket, [(u, v, d), ...])``, or with ``lists`` ``[bucket, u, v, d]``."""
        t = ctx.time
        due = st.due
        sums = due.get(t)
        if sums is None:
            if not due or t < min(due):
                ctx.notify_at(t)  # otherwise the timer at min(due) <= t is set
            sums = due[t] = {}
        later: Optional[dict[tuple[Vertex, Vertex], list[int]]] = None
        if width is not None and (horizon is None or t + width < horizon):
            later = due.get(t + width)
            if later is None:
                later = due[t + width] = {}
        get = sums.get
        for s, d, k in (rec[1:],) if L else rec[1]:
            if s.__class__ is d.__class__:
                fwd = s < d  # type: ignore[operator]
            else:
                fwd = s.__class__ is int
            p = (s, d) if fwd else (d, s)
            e = get(p)
            if e is None:
                e = sums[p] = [0, 0, 0, 0]
            if both:
                e[0] += k
                e[1] += k
            else:
                e[0 if fwd else 1] += k
            if later is not None and k > 0:
                e = later.get(p)
                if e is None:
                    e = later[p] = [0, 0, 0, 0]
                if both:
                    e[2] -= k
                    e[3] -= k
                else:
                    e[2 if fwd else 3] -= k

    def release(st: EdgeBucket, t: int, ctx: Context) -> None:
        """Every update of epoch ``t`` is in: apply its net deltas, emit the changes."""
        if st.buckets != B:
            if st.buckets:
                raise ConfigurationError(
                    f"operator {name!r}: bucket {ctx.key!r} holds state built for {st.buckets} buckets, but this "
                    f"dataflow has {B} (consolidate(buckets=...) must not change across a restore)"
                )
            st.buckets = B
        sums = st.due.pop(t, None)
        if sums:
            counts = st.counts
            peek = counts.peek
            dch: list[tuple[Vertex, Vertex, int]] = []
            uch: list[tuple[Vertex, Vertex, int]] = []
            absent = 0
            for p, e in sums.items():
                df, db = e[0], e[1]
                xf, xb = (e[2], e[3]) if len(e) == 4 else (0, 0)  # (a 2-entry list: an older checkpoint's)
                if not (df or db or xf or xb):
                    continue
                c = peek(p)
                if c is None:
                    f0 = b0 = 0
                else:
                    f0, b0 = c
                # the epoch's updates first: what they retract beyond the count is not applied
                if f0 + df < 0:
                    absent -= f0 + df
                if b0 + db < 0 and not both:
                    absent -= b0 + db
                f1 = f0 + df + xf
                b1 = b0 + db + xb
                if f1 < 0:
                    f1 = 0
                if b1 < 0:
                    b1 = 0
                if f1 == f0 and b1 == b0:
                    continue
                a, b = p
                if (f0 > 0) != (f1 > 0):
                    dch.append((a, b, 1 if f1 else -1))
                if (b0 > 0) != (b1 > 0):
                    dch.append((b, a, 1 if b1 else -1))
                if f1 or b1:
                    if c is None:
                        counts[p] = [f1, b1]
                        uch.append((a, b, 1))
                    else:
                        c[0] = f1
                        c[1] = b1
                        counts.touch(p)
                else:
                    del counts[p]
                    uch.append((a, b, -1))
            if absent and stats is not None:
                stats.absent += absent
            if dch or uch:
                if L:
                    ctx.emit(([[*c] for c in dch], [[*c] for c in uch]))
                else:
                    ctx.emit((dch, uch))
        if st.due:
            ctx.notify_at(min(st.due))
        elif not st.counts:
            ctx.clear()

    grouped = _grouper(flow, updates, B, f"{name}.group", lists)
    op = flow.stateful(grouped, key=itemgetter(0), state=EdgeBucket, name=name, bins=bins)(add)
    op.on_notify(release)
    return EdgeChanges(flow, op, op, B, name)
