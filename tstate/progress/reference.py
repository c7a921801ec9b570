"""The all-pairs reachability tracker: the reference the worklist tracker is checked against.

This was tstate's tracker before :class:`tstate.progress.reachability.Tracker`: the
summaries between all pairs of locations are computed when it is built
(:func:`all_pairs`, from a :class:`~tstate.progress.reachability.GraphBuilder`), and every
buffered count change is applied, through them, to the counts at **every** input it
can reach -- whether or not it moves a frontier there.  Simple enough to trust; the
tests compare the two trackers update by update, and ``benchmarks.loops`` times both
on the same recorded updates (it costs in proportion to the changes times the inputs
they reach, where the worklist tracker costs in proportion to the frontier moves).

>>> from tstate.progress.reachability import GraphBuilder
>>> b = GraphBuilder()
>>> b.add_node(0, "input", inputs=0, outputs=1)
>>> b.add_node(1, "map", inputs=1, outputs=1)
>>> b.add_edge((0, 0), (1, 0))
>>> t = all_pairs(b)
>>> t.update_source(0, 0, 5, +1)
>>> t.propagate()
[(1, 0)]
>>> t.frontier(1, 0)
Antichain([5])
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tstate.progress.change_batch import ChangeBatch
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.reachability import GraphBuilder, _Node
from tstate.progress.summary import PathSummary

__all__ = ["AllPairsTracker", "all_pairs"]


def all_pairs(builder: GraphBuilder) -> "AllPairsTracker":
    """Check ``builder``'s graph and return its all-pairs tracker."""
    return AllPairsTracker(builder.nodes, builder.paths())


class AllPairsTracker:
    """Maintains the frontier at every input port from pointstamp count changes, the
    all-pairs way (see the module docstring); the same interface as
    :class:`tstate.progress.reachability.Tracker`."""

    def __init__(
        self,
        nodes: dict[int, _Node],
        reach: dict[tuple[str, int, int], dict[tuple[int, int], list[PathSummary]]],
    ) -> None:
        self._nodes = nodes
        self._frontiers: dict[tuple[int, int], MutableAntichain] = {
            (n.index, i): MutableAntichain() for n in nodes.values() for i in range(n.inputs)
        }
        # (kind, node, port) -> [(target, None for identity else summary.results_in)]
        self._reach: dict[tuple[str, int, int], list[tuple[tuple[int, int], Any]]] = {}
        for loc, per_target in reach.items():
            lst: list[tuple[tuple[int, int], Any]] = []
            for tgt, summaries in per_target.items():
                for s in summaries:
                    lst.append((tgt, None if s.is_identity() else s.results_in))
            self._reach[loc] = lst
        self._pending: dict[tuple[str, int, int], ChangeBatch] = {}
        self._counts: dict[tuple[str, int, int], dict[Any, int]] = defaultdict(dict)

    def update_source(self, node: int, port: int, time: Any, delta: int) -> None:
        """A capability count change at output port ``(node, port)``."""
        self._update(("source", node, port), time, delta)

    def update_target(self, node: int, port: int, time: Any, delta: int) -> None:
        """A records-in-flight count change at input port ``(node, port)``."""
        self._update(("target", node, port), time, delta)

    def _update(self, loc: tuple[str, int, int], time: Any, delta: int) -> None:
        b = self._pending.get(loc)
        if b is None:
            b = self._pending[loc] = ChangeBatch()
        b.update(time, delta)

    def has_pending(self) -> bool:
        """Whether count changes wait for :meth:`propagate`."""
        return bool(self._pending)

    def propagate(self) -> list[tuple[int, int]]:
        """Apply buffered changes; return the input ports whose frontier changed."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, {}
        per_target: dict[tuple[int, int], list[tuple[Any, int]]] = defaultdict(list)
        for loc, batch in pending.items():
            changes = batch.drain()
            if not changes:
                continue
            counts = self._counts[loc]
            for t, d in changes:
                c = counts.get(t, 0) + d
                if c:
                    counts[t] = c
                else:
                    del counts[t]
            for tgt, fn in self._reach[loc]:
                acc = per_target[tgt]
                if fn is None:
                    acc.extend(changes)
                else:
                    for t, d in changes:
                        r = fn(t)
                        if r is not None:
                            acc.append((r, d))
        changed = []
        for tgt, ups in per_target.items():
            if ups and self._frontiers[tgt].update_iter(_consolidate(ups)):
                changed.append(tgt)
        changed.sort()
        return changed

    def frontier(self, node: int, port: int) -> Antichain:
        """The frontier at input port ``(node, port)``."""
        return self._frontiers[(node, port)].frontier

    def mutable_frontier(self, node: int, port: int) -> MutableAntichain:
        """The live frontier object at an input (read-only use)."""
        return self._frontiers[(node, port)]

    def pointstamps(self) -> dict[tuple[str, int, int], dict[Any, int]]:
        """Non-zero pointstamp counts per location (for diagnostics)."""
        return {loc: dict(c) for loc, c in self._counts.items() if c}

    def node_name(self, node: int) -> str:
        return self._nodes[node].name

    def is_idle(self) -> bool:
        """True when no pointstamp is held anywhere (everything is complete)."""
        return not self._pending and not any(self._counts.values())


def _consolidate(ups: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    if len(ups) <= 1:
        return ups
    acc: dict[Any, int] = {}
    for t, d in ups:
        acc[t] = acc.get(t, 0) + d
    return [(t, d) for t, d in acc.items() if d]
