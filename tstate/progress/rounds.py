"""Rounds of iterate scopes: which pending times one round processes, and its frontier.

An engine that runs a loop in *rounds* (the Spark backend, :mod:`tstate.spark.rounds`,
on the driver for a stage per round or in one task for small loops) knows every time
that still has work in the loop: the times of records in flight to its keyed
operators and, per bin, the minimal times of pending timers.  One round processes the
**minimal** pending times ``M`` with the frontier

    ``F = min( (pending - M)  ∪  { m + (0, 1) : m in M }  ∪  { (hi, 0) } )``

(``hi``: the first epoch not in the batch; None when the inputs are closed).
:func:`next_round` is that computation, for several independent loops at once (each
its own frontier: their times are unrelated); every engine running rounds uses it.

>>> P = Product
>>> r = next_round([(4, 5)], {4: {P(0, 0), P(0, 2)}, 5: set()}, {4: {}, 5: {1: [P(0, 1)]}}, hi=1)
>>> r.active, r.frontier[4], r.due[5]
((0,), (Product(outer=0, inner=1), Product(outer=1, inner=0)), frozenset())
>>> next_round([(4,)], {4: {P(1, 0)}}, {4: {}}, hi=1) is None   # only a later epoch is left
True
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

from attrs import frozen

from tstate.progress.frontier import minimal_elements
from tstate.progress.timestamp import Product

__all__ = ["Round", "minimal", "next_round", "passed", "round_frontier"]


def minimal(times: Iterable[Product]) -> list[Product]:
    """The minimal elements of ``times`` under the product order (sorted)."""
    return minimal_elements(times)


def round_frontier(pending: Iterable[Product], ready: list[Product], hi: Optional[int]) -> list[Product]:
    """The frontier of a round that processes ``ready`` (the minimal pending times)
    out of ``pending`` (see the module docstring)."""
    done = set(ready)
    cand = [t for t in pending if t not in done]
    cand.extend(Product(m.outer, m.inner + 1) for m in ready)
    if hi is not None:
        cand.append(Product(hi, 0))
    return minimal(cand)


def passed(frontier: Iterable[Product], t: Product) -> bool:
    """Whether the frontier has passed ``t`` (no element ``<= t``)."""
    return not any(f.less_equal(t) for f in frontier)


@frozen
class Round:
    """One round of independent loops: the loops with work (``active``: their indices),
    per boundary of those the round's ``frontier``, and per boundary the bins with a
    timer the frontier passed (``due``)."""

    active: tuple[int, ...]
    frontier: dict[int, tuple[Product, ...]]
    due: dict[int, frozenset[int]]


def next_round(
    loops: Sequence[Sequence[int]],
    pending: Mapping[int, Iterable[Product]],
    timers: Mapping[int, Mapping[int, Iterable[Product]]],
    hi: Optional[int],
) -> Optional[Round]:
    """The next round of ``loops`` (each its boundaries): ``pending``, per boundary, the
    times of the records in flight to it; ``timers``, per boundary and bin, the pending
    timer times.  None: no loop has a time before ``hi`` left (the batch is done)."""
    active: list[int] = []
    fronts: dict[int, tuple[Product, ...]] = {}
    due: dict[int, frozenset[int]] = {}
    for i, lp in enumerate(loops):
        every: set[Product] = set()
        for b in lp:
            every.update(pending[b])
            every.update(t for ts_ in timers[b].values() for t in ts_)
        ready = [t for t in every if hi is None or t.outer < hi]
        if not ready:
            continue
        active.append(i)
        front = tuple(round_frontier(every, minimal(ready), hi))
        for b in lp:
            fronts[b] = front
            due[b] = frozenset(bn for bn, ts_ in timers[b].items() if any(passed(front, t) for t in ts_))
    return Round(tuple(active), fronts, due) if active else None
