"""PageRank of the directed graph: vectorised residual push over blocks of vertices.

**The model** is networkx's ``nx.pagerank(G, alpha)`` on the directed simple graph
(unweighted; a vertex is in the graph while it has an edge in or out): teleport
``1/N`` to every vertex and the mass of *dangling* vertices (no out-edges)
redistributed uniformly.  With dangling mass redistributed like the teleport, the
PageRank vector is proportional to the solution ``y`` of the *local* system

    y = 1 + alpha * P^T y          (P: row-normalised adjacency; dangling rows zero)

so ``rank(v) = y(v) / sum(y)``.  Nothing in ``y`` depends on ``N`` or on the dangling
mass, which is what makes it maintainable edge by edge.

**Blocks.**  The vertices are spread over ``blocks`` blocks by a stable hash of their
id (:func:`block_of`); a block is one key of a ``@flow.stateful`` operator whose typed
state (:class:`PRBlock`) holds its vertices in *slots*: their ids, in-degrees,
out-degrees, ``y``, residual ``r`` and last emitted rank as numpy arrays (stored as
``bytes``), and their out-edges as two arrays (source slot, target slot) grouped by
the target's block.  A block does its work with numpy operations on whole arrays and
sends one message per other block per round (target slots and amounts).  Blocks are
the unit of parallelism (and of migration: they live in bins like any key; their keys
are chosen so that block ``b`` starts on worker ``b % workers``, :func:`block_keys`).
The default is **one block**: the embedded engine runs all its workers in one process,
and with a single block every message is for itself, so there is no loop at all: one
timer per epoch runs the rounds below one after another (a root-scope operator, like
the other algorithms' one-block layout); raise ``blocks`` to the number of Spark
partitions to spread the work there (an epoch-sequenced loop, one round per exchange).
``blocks`` is part of the state's layout: a restore must use the same number
(otherwise :class:`ConfigurationError`).

**Incremental push.**  An epoch starts from the previous epoch's ``y`` (warm start):

0. *round 0*: the edge changes ``(u, v, +1/-1)`` reach ``v``'s block (the in-edge; new
   vertices get slots, in ascending vertex order) and ``u``'s block (the out-edge);
   ``v``'s block replies with ``v``'s slot;
1. *round 1*: ``u``'s block applies its out-edge changes, and every block sends
   ``alpha * y(u) / d(u)`` along every out-edge;
2. *round 2*: every block recomputes its residuals from those sums,
   ``r = 1 + alpha P^T y - y`` (so they are exact at the start of every epoch: no
   rounding error carries over from one epoch to the next), and the pushing starts;
3. *pushes*: a vertex with ``|r| > c y`` adds ``r`` to ``y`` and pushes
   ``alpha * r / d`` to each out-neighbour -- at once (another pass) to the vertices of
   its own block, summed per edge and sent at the end of the round to the other
   blocks.  A block keeps passing over its vertices until it is *settled* (its
   residuals sum to at most ``c`` times its ``y``) or most of what it pushes leaves it
   (then the others go first: the next round); with one block an epoch's pushes are one
   round, with ``k`` blocks about one round per factor ``alpha (k - 1) / k`` of decay;
4. *sum*: every block sends the sum of its ``y`` to every block; then each block
   emits ``Change(vertex, old_rank, new_rank)`` for its vertices whose rank
   ``y / sum(y)`` changed by more than ``rank_threshold`` (by anything, with the default
   0), and ``Change(vertex, old_rank, None)`` for vertices that left the graph.

With **one block** (the default) the pushes start from a better ``y``: BiCGSTAB on
``(I - alpha P^T) y = 1`` from the warm start, about a dozen iterations of two
products each instead of ~50 push passes, then the residual of its result recomputed
exactly as at step 2 (and kept only if smaller than step 2's).  The pushes then stop at
once if the stopping rule already holds, and go on otherwise, so the guarantee below is
the pushes' whatever BiCGSTAB did; it only saves passes.  (With several blocks every
product would be a round, and the pushes work per block.)

The cost of an epoch is a handful of rounds and the passes, each a few numpy
operations over a block's vertices and out-edges; a pass pushes only the vertices above
the threshold.  (At a tight tolerance on a small-world graph a change reaches most
vertices within a few passes and takes about ``log(change / tol) / log(1 / alpha)``
passes to settle, so most epochs touch most vertices: that is what vectorising the
passes is for.)

**Tolerance.**  A block stops pushing when ``sum |r| <= c sum y`` over its vertices
(and no vertex with ``|r| <= c y`` ever pushes).  Then with ``S = sum(y)``: ``|y* - y|_1 <= |r|_1 / (1 - alpha) <= c S / (1 - alpha)``, so
``sum(y*) >= S (1 - c / (1 - alpha))`` and the ranks ``y / S`` are within
``2 c / ((1 - alpha) - c)`` of the exact PageRank in L1.  With
``c = tol (1 - alpha) / (2 + tol)`` that is ``tol``: the ranks are within ``tol``
(L1, summed over all vertices) of the exact PageRank -- default ``tol = 1e-10``.  (A
threshold relative to ``y`` is local, and looser than an absolute one where ``y`` is
large, so fewer rounds are needed for the same guarantee.)  With ``rank_threshold``
the ranks a consumer holds (the emitted ones) are moreover each within it of those.

**Arithmetic.**  float64, with the rounding kept out of the guarantee: ``y += r`` is
an error-free transformation (TwoSum: what rounding drops stays in ``r``), the
residuals are recomputed from ``y`` at every epoch's start with pairwise summation
(relative error below ``40 * 2**-53`` of the terms), and the threshold uses ``c``
made 1/8 smaller, which covers that for ``tol >= 1e-12`` (smaller tolerances are
refused).  Every sum is taken in an order fixed by the data (messages by source
block, edges in a canonical order), never by arrival, and with numpy's own sums (no
BLAS, whose rounding depends on the build): the results are **identical on any number
of workers**, after migration and after recovery.

Output: ``ranks``, ``Change(vertex, old_rank, new_rank)`` (``None``: not in the graph).
"""

from __future__ import annotations

import zlib
from operator import itemgetter
from typing import Any, Optional, Union

import numpy as np
from attrs import define, field

import tstate as ts
from apps.graph.edges import EdgeChanges, Vertex
from apps.graph.loop import Change, at, round_of, sequenced_loop
from apps.graph.pagerank_state import PRBlock
from apps.graph.pagerank_rounds import (
    SUM,
    Setting,
    emit_ranks,
    push_round,
    refresh,
    round0,
    round1,
    send_sum,
)
from tstate.errors import ConfigurationError
from tstate.keys import bin_of, check_bins, key_hash
from tstate.progress import Product
from tstate.state.context import Context

__all__ = ["PRBlock", "PageRank", "pagerank", "block_of", "block_keys", "BLOCKS", "MIN_TOL"]

#: Default number of blocks: one (the embedded engine runs every worker in one process,
#: and one block converges every epoch in one round); raise it to spread the work over
#: Spark partitions.
BLOCKS = 1
#: The smallest tolerance float64 arithmetic supports (see the module docstring).
MIN_TOL = 1e-12

_KRYLOV_ITERATIONS = 40  # BiCGSTAB's limit (one block: see apps.graph.pagerank_rounds._krylov)



def block_keys(blocks: int, bins: int) -> list[int]:
    """The key of each block: the smallest ints whose bins are ``0, 1, 2, ...`` (modulo
    ``bins``), so that the default assignment (bin ``b`` on worker ``b % workers``)
    puts block ``b`` on worker ``b % workers`` -- one block per worker when there are
    as many."""
    check_bins(bins)
    keys: list[int] = []
    want = 0
    k = 0
    taken: set[int] = set()
    while len(keys) < blocks:
        b = want % bins
        k = 0
        while k in taken or bin_of(key_hash(k), bins) != b:
            k += 1
        keys.append(k)
        taken.add(k)
        want += 1
    return keys


def block_of(v: Vertex, blocks: int) -> int:
    """The block of vertex ``v``: a hash of its id that is the same in every process
    (ints by a multiplicative hash, strs by CRC-32)."""
    if v.__class__ is int:
        return (((v * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 32) % blocks  # type: ignore[operator]
    return zlib.crc32(v.encode()) % blocks  # type: ignore[union-attr]


@define(frozen=True)
class PageRank:
    """Outputs of :func:`pagerank` (see the module docstring)."""

    ranks: ts.Stream


idx0 = np.zeros(0, dtype=np.intp)


def pagerank(
    flow: ts.Dataflow,
    edges: EdgeChanges,
    alpha: float = 0.85,
    tol: float = 1e-10,
    name: str = "pagerank",
    bins: int = 256,
    blocks: int = BLOCKS,
    rank_threshold: float = 0.0,
) -> PageRank:
    """PageRank of the directed graph whose per-epoch edge changes are ``edges``'s
    (see the module docstring)."""
    flow.record_types(Change)  # the records it emits (they cross Spark exchanges)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not tol >= MIN_TOL:
        raise ValueError(f"tol must be >= {MIN_TOL} (float64 arithmetic), got {tol!r}")
    if not (isinstance(blocks, int) and 1 <= blocks <= 1 << 16):
        raise ValueError(f"blocks must be an int in [1, 65536], got {blocks!r}")
    if not rank_threshold >= 0:
        raise ValueError(f"rank_threshold must be >= 0, got {rank_threshold!r}")
    B = blocks
    c = tol * (1 - alpha) / (2 + tol) * (7 / 8)  # the stopping threshold (module docstring)
    KEYS = block_keys(B, bins)
    INDEX = {k: i for i, k in enumerate(KEYS)}

    def blk(v: Vertex) -> int:
        return block_of(v, B)

    setting = Setting(B, KEYS, alpha, c, rank_threshold, blk, _KRYLOV_ITERATIONS)

    def expand(rec: tuple[list[tuple[Vertex, Vertex, int]], Any]) -> list[tuple[Any, ...]]:
        """A list of directed changes ``(u, v, +1/-1)`` as one record per block: its
        in-edge changes ``("i", v, u, d)`` and out-edge changes ``("o", u, v, d)``."""
        if B == 1:
            out = [("i", v, u, d) for u, v, d in rec[0]]
            out += [("o", u, v, d) for u, v, d in rec[0]]
            return [(KEYS[0], "c", out)] if out else []
        per: dict[int, list[tuple[str, Vertex, Vertex, int]]] = {}
        for u, v, d in rec[0]:
            per.setdefault(blk(v), []).append(("i", v, u, d))
            per.setdefault(blk(u), []).append(("o", u, v, d))
        return [(KEYS[b], "c", lst) for b, lst in per.items()]

    def announce(e: int) -> list[tuple[Any, ...]]:
        return [(k, "s") for k in KEYS]  # every block takes part in every epoch with changes

    def step(st: PRBlock, rec: tuple[Any, ...], ctx: Context) -> None:
        kind = rec[1]
        if kind == "m":  # a round's pushes from one block
            st.inbox.append((rec[2], rec[3], rec[4]))
        elif kind == "c":
            st.changes.extend(rec[2])
        elif kind == "e":  # round 1: an out-edge change, with the target's block and slot
            st.outs.append((st.slots[rec[2]], rec[3], rec[4], rec[5]))
        elif kind == "p":
            st.parts.append((rec[2], rec[3]))
        ctx.notify_at(ctx.time)  # once all of this round's records are in (kind "s" too)

    def check_layout(st: PRBlock, ctx: Context) -> None:
        if st.blocks != B:
            if st.blocks:
                raise ConfigurationError(
                    f"operator {name!r}: block {ctx.key!r} holds state built for {st.blocks} blocks, "
                    f"but this dataflow has {B} (pagerank(blocks=...) must not change across a restore)"
                )
            st.blocks = B

    def timer(st: PRBlock, t: Product, ctx: Context) -> None:
        check_layout(st, ctx)
        k = round_of(t)
        me = INDEX[ctx.key]
        if k == 0:
            round0(setting, st, t.outer, me, ctx)
        elif k == 1:
            round1(setting, st, me, ctx)
            ctx.notify_at(at(t.outer, 2))
        elif k == 2:
            refresh(setting, st, me, ctx)
        elif k == SUM:
            send_sum(setting, st, me, ctx)
        elif k == SUM + 1:
            emit_ranks(setting, st, ctx)
        else:
            push_round(setting, st, me, ctx)

    # -- one block: every round of an epoch in one timer call --------------------------------
    class _Local:
        """The context the rounds see with one block: every record they send is for the
        block itself and goes straight to ``step``; the ranks go out; no timers are
        needed (the rounds run one after another)."""

        __slots__ = ("st", "out")
        time = None

        def __init__(self, st: PRBlock, out: Context) -> None:
            self.st, self.out = st, out

        def emit(self, rec: Any) -> None:
            if rec.__class__ is Change:
                self.out.emit(rec)
            else:
                step(self.st, rec, self)  # type: ignore[arg-type]

        def notify_at(self, t: Any) -> None:
            pass

    def take(st: PRBlock, rec: tuple[list[tuple[Vertex, Vertex, int]], Any], ctx: Context) -> None:
        """A list of the epoch's directed changes (one block: every change is its own)."""
        ch = rec[0]
        if not ch:
            return
        if not st.changes:
            ctx.notify_at(ctx.time)
        st.changes.extend([("i", v, u, d) for u, v, d in ch])
        st.changes.extend([("o", u, v, d) for u, v, d in ch])

    def epoch(st: PRBlock, t: int, ctx: Context) -> None:
        """Every change of epoch ``t`` is in: the rounds of the loop, one after another."""
        check_layout(st, ctx)
        loc: Any = _Local(st, ctx)
        round0(setting, st, t, 0, loc)
        round1(setting, st, 0, loc)
        refresh(setting, st, 0, loc)
        send_sum(setting, st, 0, loc)
        emit_ranks(setting, st, ctx)

    if B == 1:
        k0 = KEYS[0]  # the key of block 0 with any number of blocks: a restore with more sees it
        one = flow.stateful(edges.changes, key=lambda r: k0, state=PRBlock, name=name, bins=bins)(take)
        one.on_notify(epoch)
        return PageRank(one)

    def body(scope: ts.Scope, inputs: ts.Stream) -> tuple[ts.Stream, ts.Stream]:
        block = flow.stateful(inputs, key=itemgetter(0), state=PRBlock, name=f"{name}.block", bins=bins)(step)
        block.on_notify(timer)
        results = block.filter(lambda r: r.__class__ is Change, name=f"{name}.results")
        return block, results  # the gate drops the results from the loop

    ranks = sequenced_loop(flow, edges.changes, body, name=name, expand=expand, announce=announce)
    return PageRank(ranks)

