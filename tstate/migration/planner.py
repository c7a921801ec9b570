"""The migration planner: from bin map A to bin map B, in steps.

A *move* is ``(bin, from_worker, to_worker)``.  Strategies:

- ``all-at-once``: one step with every move;
- ``fluid``: one move per step;
- ``batched``: each step is a *matching* — every worker sends at most one bin and
  receives at most one bin — so no worker is swamped; moves are grouped greedily into
  maximal matchings (in bin order, deterministic), which needs at most about twice the
  optimal number of steps (the maximum number of moves at one worker);
- ``precopy``: the steps of ``batched`` (Rhino-style pre-copy moves each bin at its
  own step, so a step hands over the changes of a few bins only, whatever the state's
  size, and each bin is loaded from the checkpoint just before its step:
  :mod:`tstate.engine.precopy`).

>>> plan([0, 0, 1, 1], [0, 1, 1, 0], "batched")
[{1: 1, 3: 0}]
>>> plan([0, 0, 0, 0], [1, 1, 1, 1], "batched")
[{0: 1}, {1: 1}, {2: 1}, {3: 1}]
>>> plan([0, 0, 1, 1], [0, 1, 1, 0], "precopy")   # the steps of batched
[{1: 1, 3: 0}]
>>> rescale_map([0, 1, 0, 1], 3)
[0, 1, 0, 2]
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Sequence

from tstate.backend import Strategy
from tstate.errors import ConfigurationError

__all__ = ["plan", "rescale_map", "balanced_map"]


def balanced_map(bins: int, workers: int) -> list[int]:
    """The default assignment: bin ``b`` on worker ``b % workers``."""
    return [b % workers for b in range(bins)]


def rescale_map(current: Sequence[int], workers: int) -> list[int]:
    """A map over ``workers`` workers that moves as few bins as possible from
    ``current``: bins on workers that remain stay while their worker is under its fair
    share; the rest go to the least loaded workers (ties: lowest index)."""
    if workers < 1:
        raise ConfigurationError(f"cannot rescale to {workers} workers")
    bins = len(current)
    base, extra = divmod(bins, workers)
    quota = [base + (1 if w < extra else 0) for w in range(workers)]
    load = [0] * workers
    out = [-1] * bins
    for b, w in enumerate(current):
        if w < workers and load[w] < quota[w]:
            out[b] = w
            load[w] += 1
    # the least loaded worker relative to its share, lowest index first: a heap of
    # (load - quota, worker), one pop and push per placed bin
    heap = [(load[w] - quota[w], w) for w in range(workers)]
    heapq.heapify(heap)
    for b in range(bins):
        if out[b] < 0:
            d, w = heap[0]
            out[b] = w
            heapq.heapreplace(heap, (d + 1, w))
    return out


def plan(current: Sequence[int], target: Sequence[int], strategy: Strategy) -> list[dict[int, int]]:
    """Steps (each ``{bin: new_worker}``) that turn ``current`` into ``target``."""
    if len(current) != len(target):
        raise ConfigurationError(f"maps of different sizes: {len(current)} and {len(target)} bins")
    moves = [(b, current[b], target[b]) for b in range(len(current)) if current[b] != target[b]]
    if not moves:
        return []
    if strategy == "all-at-once":
        return [{b: dst for b, _, dst in moves}]
    if strategy == "fluid":
        return [{b: dst} for b, _, dst in moves]
    if strategy in ("batched", "precopy"):
        steps: list[dict[int, int]] = []
        remaining = moves
        # moves left per sending and per receiving worker: once every worker that still
        # sends (or receives) is busy, no later move fits the step and the scan stops
        # (the same steps, without a pass over every remaining move per step)
        left_src = Counter(m[1] for m in moves)
        left_dst = Counter(m[2] for m in moves)
        while remaining:
            n_src, n_dst = len(left_src), len(left_dst)
            senders: set[int] = set()
            receivers: set[int] = set()
            step: dict[int, int] = {}
            rest = []
            for i, (b, src, dst) in enumerate(remaining):
                if src not in senders and dst not in receivers:
                    senders.add(src)
                    receivers.add(dst)
                    step[b] = dst
                    for left, w in ((left_src, src), (left_dst, dst)):
                        left[w] -= 1
                        if not left[w]:
                            del left[w]
                    if len(senders) == n_src or len(receivers) == n_dst:
                        rest.extend(remaining[i + 1 :])
                        break
                else:
                    rest.append((b, src, dst))
            steps.append(step)
            remaining = rest
        return steps
    raise ConfigurationError(f"unknown migration strategy {strategy!r}")
