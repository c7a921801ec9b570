"""The rounds of one PageRank epoch on one block of vertices (:mod:`apps.graph.pagerank`
describes the algorithm and wires them into a dataflow).

Round 0 gives new vertices slots and counts in-degrees (:func:`round0`); round 1
applies the out-edge changes and sends ``alpha y / d`` along every edge
(:func:`round1`); round 2 recomputes the residuals exactly and pushes
(:func:`refresh`), later rounds push what came in (:func:`push_round`); then each
block sends the sum of its ``y`` (:func:`send_sum`) and emits its ranks
(:func:`emit_ranks`).  Each takes the operator's :class:`Setting`, the block's state
and the context the block's records go out through.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from operator import itemgetter
from typing import Optional

import numpy as np
from attrs import frozen

from apps.graph.edges import Vertex, vertex_rank
from apps.graph.loop import Change, at
from apps.graph.pagerank_state import PRBlock
from tstate.progress import Product
from tstate.state.context import Context

__all__ = ["SUM", "Setting", "emit_ranks", "f8", "i8", "push_round", "refresh", "round0", "round1", "send_sum"]

#: the round of the sum phase (after any real round; apps.graph.loop.END)
SUM = 1 << 31
_F8, _I8 = np.float64, np.int64


@frozen
class Setting:
    """What the rounds know of the operator: the number of blocks and their keys, the
    damping factor ``alpha``, the stopping threshold ``c`` (the module docstring of
    :mod:`apps.graph.pagerank`), the ranks' ``rank_threshold``, the block of a
    vertex and BiCGSTAB's iteration limit (one block: see :func:`_krylov`)."""

    blocks: int
    keys: list[int]
    alpha: float
    c: float
    rank_threshold: float
    block: Callable[[Vertex], int]
    krylov_iterations: int


def f8(b: bytes, n: int, fill: float = 0.0) -> np.ndarray:
    """A float64 array stored as ``b``, padded with ``fill`` to ``n`` entries (a copy)."""
    a = np.frombuffer(b, dtype=_F8)
    if len(a) < n:
        a = np.concatenate([a, np.full(n - len(a), fill)])
    return a.copy()


def i8(b: bytes, n: Optional[int] = None) -> np.ndarray:
    """An int64 array stored as ``b``, padded with zeros to ``n`` entries."""
    a = np.frombuffer(b, dtype=_I8)
    if n is not None and len(a) < n:
        a = np.concatenate([a, np.zeros(n - len(a), dtype=_I8)])
    return a


# -- round 0: slots and in-degrees; tell the sources the targets' slots -----------------
def round0(setting: Setting, st: PRBlock, e: int, me: int, ctx: Context) -> None:
    KEYS, blk = setting.keys, setting.block
    st.epoch = e
    changes = sorted(st.changes, key=lambda c: (c[0], vertex_rank(c[1]), vertex_rank(c[2])))
    st.changes = []
    slots = st.slots
    new = sorted({c[1] for c in changes if c[1] not in slots}, key=vertex_rank)
    n0 = len(st.ids)
    for v in new:
        if st.free:
            s = st.free.pop(0)
            st.ids[s] = v
        else:
            s = len(st.ids)
            st.ids.append(v)
        slots[v] = s
    n = len(st.ids)
    if n != n0:
        st.y = f8(st.y, n).tobytes()
        st.r = f8(st.r, n).tobytes()
        st.shown = f8(st.shown, n, math.nan).tobytes()
        st.deg = i8(st.deg, n).tobytes()
    indeg = i8(st.indeg, n).copy()
    emit = ctx.emit
    for kind, v, u, d in changes:
        if kind == "i":
            s = slots[v]
            indeg[s] += d
            emit((KEYS[blk(u)], "e", u, me, s, d))
    st.indeg = indeg.tobytes()
    ctx.notify_at(at(e, 1))
    ctx.notify_at(at(e, SUM))


# -- round 1: out-edge changes; send alpha y / d along every edge -----------------------
def round1(setting: Setting, st: PRBlock, me: int, ctx: Context) -> None:
    B, alpha = setting.blocks, setting.alpha
    n = len(st.ids)
    src, tgt = i8(st.src), i8(st.tgt)
    if st.outs:
        outs = sorted(st.outs)
        st.outs = []
        starts = st.starts or [0] * (B + 1)
        tblk = np.repeat(np.arange(B, dtype=_I8), np.diff(starts))
        gone = np.array([(s << 40) | (t << 16) | j for s, j, t, d in outs if d < 0], dtype=_I8)
        add = np.array([(s, j, t) for s, j, t, d in outs if d > 0], dtype=_I8).reshape(-1, 3)
        if len(gone):
            keep = ~np.isin((src << 40) | (tgt << 16) | tblk, gone)
            src, tgt, tblk = src[keep], tgt[keep], tblk[keep]
        if len(add):  # appended (in sorted order), then grouped by target block, stably
            src = np.concatenate([src, add[:, 0]])
            tblk = np.concatenate([tblk, add[:, 1]])
            tgt = np.concatenate([tgt, add[:, 2]])
            order = np.argsort(tblk, kind="stable")
            src, tgt, tblk = src[order], tgt[order], tblk[order]
        st.src, st.tgt = src.tobytes(), tgt.tobytes()
        st.starts = np.searchsorted(tblk, np.arange(B + 1)).tolist()
        st.deg = np.bincount(src, minlength=n).astype(_I8).tobytes()
    if len(src):
        y = f8(st.y, n)
        deg = i8(st.deg, n)
        share = np.zeros(n)
        has = deg > 0
        share[has] = alpha * y[has] / deg[has]
        amounts = share[src]
        a, b = st.starts[me], st.starts[me + 1]
        if b > a:  # our own part of the sums: kept, added at round 2 with the rest
            st.inbox.append((me, tgt[a:b].tobytes(), amounts[a:b].tobytes()))
        _send(setting, st, tgt, amounts, me, ctx)


def _send(setting: Setting, st: PRBlock, tgt: np.ndarray, amounts: np.ndarray, me: int, ctx: Context) -> None:
    """Send the edges' ``amounts`` to the other blocks: one message per block (the
    non-zero amounts, with their target slots)."""
    B, KEYS = setting.blocks, setting.keys
    starts = st.starts
    emit = ctx.emit
    for j in range(B):
        a, b = starts[j], starts[j + 1]
        if b > a and j != me:
            am = amounts[a:b]
            nz = np.flatnonzero(am)
            if len(nz) == b - a:
                emit((KEYS[j], "m", me, tgt[a:b].tobytes(), am.tobytes()))
            elif len(nz):
                emit((KEYS[j], "m", me, tgt[a:b][nz].tobytes(), am[nz].tobytes()))


def _incoming(st: PRBlock) -> tuple[np.ndarray, np.ndarray]:
    """This round's messages, in source-block order: (slots, amounts)."""
    inbox = sorted(st.inbox, key=itemgetter(0))
    st.inbox = []
    if len(inbox) == 1:
        return np.frombuffer(inbox[0][1], dtype=_I8), np.frombuffer(inbox[0][2], dtype=_F8)
    return (
        np.concatenate([np.frombuffer(m[1], dtype=_I8) for m in inbox]),
        np.concatenate([np.frombuffer(m[2], dtype=_F8) for m in inbox]),
    )


def _present(st: PRBlock, n: int) -> np.ndarray:
    return (i8(st.deg, n) > 0) | (i8(st.indeg, n) > 0)


# -- round 2: exact residuals from y, then the pushes ----------------------------------
def refresh(setting: Setting, st: PRBlock, me: int, ctx: Context) -> None:
    B = setting.blocks
    n = len(st.ids)
    got = np.zeros(n)
    order: Optional[np.ndarray] = None
    if st.inbox:
        slots, amounts = _incoming(st)
        order = np.argsort(slots, kind="stable")
        got = _sums(slots, amounts, order, n)
    y = f8(st.y, n)
    present = _present(st, n)
    r = np.where(present, 1.0 + got - y, 0.0)
    if B == 1 and order is not None:
        y, r = _krylov(setting, st, y, r, present, order)
    _push(setting, st, y, r, present, me, ctx)


def _sums(slots: np.ndarray, amounts: np.ndarray, order: np.ndarray, n: int) -> np.ndarray:
    """Per slot, the sum of its ``amounts`` (pairwise summation, in the order
    ``order`` sorts ``slots`` into, stably: fixed by the data)."""
    got = np.zeros(n)
    slots, amounts = slots[order], amounts[order]
    heads = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
    got[slots[heads]] = np.add.reduceat(amounts, heads)  # pairwise summation
    return got


def _krylov(
    setting: Setting, st: PRBlock, y0: np.ndarray, r0: np.ndarray, present: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One block: a better start for the pushes by BiCGSTAB on ``(I - alpha P^T) y =
    1`` from ``y0`` (residual ``r0``), then the residual of its result recomputed
    exactly as at the epoch's start (:func:`_sums`): returned if it is smaller than
    ``r0`` in L1, else ``(y0, r0)``.  The pushes that follow stop at once when the
    result already meets the stopping rule, so the guarantee is the pushes' (the
    module docstring); BiCGSTAB only saves passes (about 11 iterations of two
    products instead of ~50 passes on the airport graph).  Only element-wise numpy
    operations and sums (no BLAS), in an order fixed by the data."""
    alpha, c = setting.alpha, setting.c
    n = len(y0)
    src, tgt = i8(st.src), i8(st.tgt)
    deg = i8(st.deg, n)
    has = deg > 0
    ainv = np.zeros(n)
    ainv[has] = alpha / deg[has]

    def A(x: np.ndarray) -> np.ndarray:
        return x - np.bincount(tgt, weights=(x * ainv)[src], minlength=n)

    r1 = float(np.abs(r0).sum())
    goal = 0.5 * c * float(y0.sum())
    if r1 <= goal:
        return y0, r0
    y, r = y0, r0
    rhat = r0
    rho = a = w = 1.0
    v = p = np.zeros(n)
    for _ in range(setting.krylov_iterations):
        rho1 = float((rhat * r).sum())
        if rho1 == 0.0 or w == 0.0:
            break
        p = r + (rho1 / rho) * (a / w) * (p - w * v)
        v = A(p)
        d = float((rhat * v).sum())
        if d == 0.0:
            break
        a = rho1 / d
        s_ = r - a * v
        t = A(s_)
        tt = float((t * t).sum())
        w = float((t * s_).sum()) / tt if tt > 0 else 0.0
        y = y + a * p + w * s_
        r = s_ - w * t
        rho = rho1
        if not math.isfinite(rho) or float(np.abs(r).sum()) <= goal:
            break
    if not np.isfinite(y).all():
        return y0, r0
    share = np.zeros(n)
    share[has] = alpha * y[has] / deg[has]
    got = _sums(tgt, share[src], order, n)
    r = np.where(present, 1.0 + got - y, 0.0)
    y = np.where(present, y, y0)  # (off the graph nothing moved)
    if float(np.abs(r).sum()) >= r1:
        return y0, r0
    return y, r


def push_round(setting: Setting, st: PRBlock, me: int, ctx: Context) -> None:
    n = len(st.ids)
    y, r = f8(st.y, n), f8(st.r, n)
    if st.inbox:
        slots, amounts = _incoming(st)
        r += np.bincount(slots, weights=amounts, minlength=n)
    _push(setting, st, y, r, _present(st, n), me, ctx)


def _push(setting: Setting, st: PRBlock, y: np.ndarray, r: np.ndarray, present: np.ndarray, me: int, ctx: Context) -> None:
    """Push until this block is settled or what stays here is small next to what
    leaves it: every present vertex with ``|r| > c y`` moves ``r`` into ``y``
    (TwoSum: the rounding stays in ``r``) and pushes ``alpha * r / d`` along its
    out-edges -- to its own block's vertices at once (another pass), to other
    blocks summed per edge and sent at the end of the round.  The block counts as
    settled once its residuals sum to at most ``c`` times its ``y``."""
    B, alpha, c = setting.blocks, setting.alpha, setting.c
    n = len(y)
    src, tgt = i8(st.src), i8(st.tgt)
    starts = st.starts or [0] * (B + 1)
    a, b = starts[me], starts[me + 1]
    whole = a == 0 and b == len(src)  # every edge stays in this block
    mine = tgt[a:b]
    deg = i8(st.deg, n)
    ainv = np.zeros(n)  # alpha / out-degree (0: dangling)
    has = deg > 0
    ainv[has] = alpha / deg[has]
    cross: Optional[np.ndarray] = None
    sent = 0.0
    # r is 0 off the graph and so is y here (a vertex that left has its y dropped
    # when the ranks are emitted anyway): whole-array operations need no mask, and
    # the stopping rule's sum of y is y.sum() (no BLAS anywhere: its threads)
    y = np.where(present, y, 0.0)
    while True:
        ar = np.abs(r)
        big = ar > c * y
        if not big.any() or ar.sum() <= c * y.sum():
            break
        rb = np.where(big, r, 0.0)  # what moves
        s = y + rb
        bp = s - y
        err = (y - (s - bp)) + (rb - bp)  # TwoSum: y + rb == s + err exactly
        y = s
        r = np.where(big, err, r)
        pushed = (rb - err) * ainv
        if whole:  # one block: every edge stays here
            r += np.bincount(mine, weights=pushed[src], minlength=n)
            continue
        amounts = pushed[src]
        if b > a:
            r += np.bincount(mine, weights=amounts[a:b], minlength=n)
        if cross is None:
            cross = amounts
        else:
            cross += amounts
        sent += float(np.abs(amounts[:a]).sum()) + float(np.abs(amounts[b:]).sum())
        if 4 * float(np.abs(r).sum()) < sent:
            # most of it leaves: let the other blocks catch up first, and go on
            # next round even if nothing comes back
            t = ctx.time
            ctx.notify_at(Product(t.outer, t.inner + 1))
            break
    if cross is not None:
        _send(setting, st, tgt, cross, me, ctx)
    st.y, st.r = y.tobytes(), r.tobytes()


# -- the sum and the ranks ----------------------------------------------------------------
def send_sum(setting: Setting, st: PRBlock, me: int, ctx: Context) -> None:
    KEYS = setting.keys
    n = len(st.ids)
    part = float(np.sum(f8(st.y, n)[_present(st, n)]))
    emit = ctx.emit
    for k in KEYS:
        emit((k, "p", me, part))


def emit_ranks(setting: Setting, st: PRBlock, ctx: Context) -> None:
    rank_threshold = setting.rank_threshold
    total = math.fsum(p for _, p in st.parts)  # correctly rounded: no order matters
    st.parts = []
    n = len(st.ids)
    if not n:
        ctx.clear()
        return
    y = f8(st.y, n)
    shown = f8(st.shown, n, math.nan)
    present = _present(st, n)
    rank = np.where(present, y / total if total > 0 else 0.0, math.nan)
    old = shown
    if rank_threshold > 0:
        moved = present & (np.isnan(old) | (np.abs(rank - old) > rank_threshold))
    else:
        moved = present & ~(rank == old)
    left = ~present & ~np.isnan(old)
    ids = st.ids
    emit = ctx.emit
    idx = np.flatnonzero(moved)
    if len(idx):
        olds = old[idx].tolist()
        news = rank[idx].tolist()
        for i, o, w in zip(idx.tolist(), olds, news):
            emit(Change(ids[i], None if o != o else o, w))
        shown[idx] = rank[idx]
    gone = [i for i in np.flatnonzero(~present).tolist() if ids[i] is not None]
    if gone:
        for i in np.flatnonzero(left).tolist():
            emit(Change(ids[i], float(old[i]), None))
        y[gone] = 0.0
        shown[gone] = math.nan
        r = f8(st.r, n)
        r[gone] = 0.0
        st.r = r.tobytes()
        for i in gone:
            del st.slots[ids[i]]  # type: ignore[arg-type]
            ids[i] = None
            insort(st.free, i)
    if not st.slots:
        ctx.clear()
        return
    st.y, st.shown = y.tobytes(), shown.tobytes()
