"""The reachability tracker: from pointstamp counts to the frontier at every input.

The dataflow graph has *nodes* (operators) with numbered input ports (*targets*) and
output ports (*sources*); *edges* connect a source to a target; each node declares, for
every (input, output) pair, an antichain of *internal summaries* (how a time at the
input can change on its way to the output; none = not connected).  Pointstamps are
counts of times at locations: records in flight count at the target they travel to,
capabilities at the source they may produce on.

The tracker promises, after :meth:`Tracker.propagate`: the frontier at target ``T`` is
the antichain of minimal ``s(t)`` over every location ``L`` holding a positive count at
``t`` and every path summary ``s`` from ``L`` to ``T`` (including ``T`` itself with the
identity).  No time not ``>=`` some frontier element can ever arrive at ``T``.

Summaries between all pairs of locations are computed once when the tracker is built,
so an update costs a few dictionary operations per reachable input.  Building rejects
a cycle whose summary does not strictly advance time (a loop without a feedback edge)
with a :class:`GraphError` naming the operators on it.

>>> b = GraphBuilder()
>>> b.add_node(0, "input", inputs=0, outputs=1)
>>> b.add_node(1, "map", inputs=1, outputs=1)
>>> b.add_edge((0, 0), (1, 0))
>>> t = b.build()
>>> t.update_source(0, 0, 5, +1)
>>> t.propagate()
[(1, 0)]
>>> t.frontier(1, 0)
Antichain([5])
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

from attrs import frozen

from tstate.errors import GraphError
from tstate.progress.change_batch import ChangeBatch
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.summary import PathSummary

__all__ = ["Location", "GraphBuilder", "Tracker"]


@frozen
class Location:
    """A port: ``kind`` is ``"source"`` (an output port) or ``"target"`` (an input port)."""

    node: int
    port: int
    kind: str


@frozen
class _Node:
    index: int
    name: str
    inputs: int
    outputs: int
    input_depth: tuple[int, ...]
    output_depth: tuple[int, ...]
    summary: tuple[tuple[tuple[PathSummary, ...], ...], ...]  # [input][output] -> antichain


class GraphBuilder:
    """Describes the graph; :meth:`build` checks it and returns a :class:`Tracker`."""

    def __init__(self) -> None:
        self._nodes: dict[int, _Node] = {}
        self._edges: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def add_node(
        self,
        index: int,
        name: str,
        inputs: int,
        outputs: int,
        summary: Optional[Sequence[Sequence[Sequence[PathSummary]]]] = None,
        depth: int = 0,
        input_depth: Optional[Sequence[int]] = None,
        output_depth: Optional[Sequence[int]] = None,
    ) -> None:
        """Add a node.  ``summary[i][o]`` lists the internal path summaries from input
        ``i`` to output ``o`` (default: identity at ``depth`` between every pair)."""
        in_d = tuple(input_depth) if input_depth is not None else (depth,) * inputs
        out_d = tuple(output_depth) if output_depth is not None else (depth,) * outputs
        if summary is None:
            summary = [[[PathSummary.identity(depth)] for _ in range(outputs)] for _ in range(inputs)]
        summ = tuple(tuple(tuple(s) for s in row) for row in summary)
        if len(summ) != inputs or any(len(row) != outputs for row in summ):
            raise GraphError(f"node {name!r}: summary must be {inputs} x {outputs}")
        self._nodes[index] = _Node(index, name, inputs, outputs, in_d, out_d, summ)

    def add_edge(self, source: tuple[int, int], target: tuple[int, int]) -> None:
        """Connect output port ``source = (node, port)`` to input ``target = (node, port)``."""
        self._edges.append((source, target))

    def build(self) -> "Tracker":
        """Check the graph and compute all-pairs path summaries."""
        nodes = self._nodes
        out_edges: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        connected: set[tuple[int, int]] = set()
        for (sn, sp), (tn, tp) in self._edges:
            for n, p, what, count in ((sn, sp, "output", "outputs"), (tn, tp, "input", "inputs")):
                if n not in nodes or not 0 <= p < getattr(nodes[n], count):
                    raise GraphError(f"edge names a missing {what} port ({n}, {p})")
            if nodes[sn].output_depth[sp] != nodes[tn].input_depth[tp]:
                raise GraphError(
                    f"edge from {nodes[sn].name!r} to {nodes[tn].name!r} crosses a scope boundary "
                    "without entering or leaving it"
                )
            out_edges[(sn, sp)].append((tn, tp))
            connected.add((tn, tp))
        for node in nodes.values():
            for i in range(node.inputs):
                if (node.index, i) not in connected:
                    raise GraphError(f"operator {node.name!r}: input {i} is never connected")

        # Successors of a location with the summary of the step.
        def steps(loc: tuple[str, int, int]) -> list[tuple[tuple[str, int, int], PathSummary]]:
            kind, n, p = loc
            if kind == "source":
                d = nodes[n].output_depth[p]
                return [(("target", tn, tp), PathSummary.identity(d)) for tn, tp in out_edges.get((n, p), ())]
            node = nodes[n]
            return [(("source", n, o), s) for o in range(node.outputs) for s in node.summary[p][o]]

        targets = [("target", n.index, i) for n in nodes.values() for i in range(n.inputs)]
        sources = [("source", n.index, o) for n in nodes.values() for o in range(n.outputs)]
        reach: dict[tuple[str, int, int], dict[tuple[int, int], list[PathSummary]]] = {}
        for start in targets + sources:
            found: dict[tuple[str, int, int], list[PathSummary]] = defaultdict(list)
            work = list(steps(start))
            while work:
                loc, s = work.pop()
                ac = found[loc]
                if any(e.less_equal(s) for e in ac):
                    continue
                ac[:] = [e for e in ac if not s.less_equal(e)]
                ac.append(s)
                for nxt, step in steps(loc):
                    work.append((nxt, s.followed_by(step)))
            # a loop back to the start must strictly advance time
            for s in found.get(start, ()):
                if not s.strictly_advances():
                    raise GraphError(
                        f"cycle through operator {nodes[start[1]].name!r} does not advance time "
                        f"(summary {s!r}): a loop needs a feedback edge"
                    )
            per_target: dict[tuple[int, int], list[PathSummary]] = {}
            if start[0] == "target":
                d = nodes[start[1]].input_depth[start[2]]
                per_target[(start[1], start[2])] = [PathSummary.identity(d)]
            for loc, ac in found.items():
                if loc[0] == "target" and loc != start:
                    per_target[(loc[1], loc[2])] = sorted(ac, key=lambda s: (s.add, s.tail))
                elif loc[0] == "target":  # loc == start
                    # a loop back to the start that re-enters a scope (resetting its
                    # coordinate) is not dominated by the identity: keep it too
                    ident = per_target[(loc[1], loc[2])][0]
                    ac = [ident] + [s for s in ac if not ident.less_equal(s)]
                    per_target[(loc[1], loc[2])] = sorted(ac, key=lambda s: (s.add, s.tail))
            reach[start] = per_target
        return Tracker(nodes, reach)


class Tracker:
    """Maintains the frontier at every input port from pointstamp count changes.

    Record changes with :meth:`update_source` / :meth:`update_target` (cheap, buffered),
    then call :meth:`propagate` to apply them; it returns the inputs whose frontier
    changed."""

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
