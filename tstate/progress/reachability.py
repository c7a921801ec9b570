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

**How** (Timely Dataflow's worklist tracker).  Every location keeps two
multisets of times (:class:`~tstate.progress.frontier.MutableAntichain`): its *pointstamps* (the counts
recorded there) and its *implications* (the frontier elements of its own pointstamps
and of its predecessors' implications, each moved along the one step between them).
:meth:`Tracker.propagate` first applies the buffered count changes to the pointstamps;
only a change of a location's pointstamp *frontier* goes on, as ``(time, location,
+1/-1)`` into a worklist ordered by time.  Popping the worklist (equal entries summed
first) updates that location's implications, and only a change of *their* frontier is
pushed on to its immediate successors -- along the node's internal summaries from a
target, along the edges from a source.  So a pointstamp change travels exactly as far
as it moves some frontier: a batch at a time already in the frontier, or a capability
downgraded behind another one, stops at its own location, and an activation whose
changes cancel out costs a dictionary update per change.  Processing in time order
makes a retraction catch up with what it retracts before either goes around a loop
again, and every cycle strictly advances time, so the worklist empties.

Building the tracker checks the graph: every input connected, edges within a scope
depth, and every cycle strictly advancing time (a loop without a feedback edge is a
:class:`GraphError` naming the operators on it); the check computes the summaries
between all pairs of locations once.  :mod:`tstate.progress.reference` keeps the
previous tracker, which applies every count change to every reachable input through
those all-pairs summaries: the tests compare the two, ``benchmarks.loops`` times them.

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
from heapq import heappop, heappush
from typing import Any, Callable, Optional, Sequence

from attrs import frozen

from tstate.errors import GraphError
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import TIME_MAX, Product, to_vector

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
        """Check the graph (see the module docstring) and return its worklist tracker."""
        self._check()
        return Tracker(self._nodes, self._edges)

    @property
    def nodes(self) -> dict[int, "_Node"]:
        """The nodes added, by index."""
        return dict(self._nodes)

    def paths(self) -> dict[tuple[str, int, int], dict[tuple[int, int], list[PathSummary]]]:
        """Check the graph; the path summaries from every location to every target it
        reaches (what the all-pairs tracker of :mod:`tstate.progress.reference` needs)."""
        return self._check()

    def _check_edges(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """Check every edge (its ports exist, it stays in one scope) and that every
        input is connected; each output port's targets."""
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
        return out_edges

    def _check(self) -> dict[tuple[str, int, int], dict[tuple[int, int], list[PathSummary]]]:
        """Check the graph; return the path summaries from every location to every
        target reachable from it."""
        nodes = self._nodes
        out_edges = self._check_edges()

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
        return reach


def _compile(s: PathSummary) -> Optional[Callable[[Any], Any]]:
    """A summary as a function of a time (``None``: the identity), with fast paths for
    the summaries of plain loops: a delay or feedback at depth 0 or 1, entering and
    leaving a scope at depth 0."""
    if s.is_identity():
        return None
    add, tail = s.add, s.tail
    if s.src == s.dst == 0 and not tail:
        k0 = add[0]
        return lambda t: t + k0 if t + k0 <= TIME_MAX else None
    if s.src == s.dst == 1 and not tail and add[0] == 0:
        k1 = add[1]
        return lambda t: Product(t.outer, t.inner + k1) if t.inner + k1 <= TIME_MAX else None
    if s.src == 0 and s.dst == 1 and add == (0,) and tail == (0,):
        return lambda t: Product(t, 0)
    if s.src == 1 and s.dst == 0 and add == (0,) and not tail:
        return lambda t: t.outer
    return s.results_in


def _key_fn(depth: int) -> Callable[[Any], tuple[int, ...]]:
    """The worklist's order of times at ``depth``: their coordinate vectors,
    lexicographically (a linear extension of the product order; vectors of different
    depths compare too)."""
    if depth == 0:
        return lambda t: (t,)
    if depth == 1:
        return lambda t: (t.outer, t.inner)
    return to_vector


class Tracker:
    """Maintains the frontier at every input port from pointstamp count changes (the
    worklist algorithm of the module docstring).

    Record changes with :meth:`update_source` / :meth:`update_target` (cheap, buffered),
    then call :meth:`propagate` to apply them; it returns the inputs whose frontier
    changed."""

    def __init__(self, nodes: dict[int, _Node], edges: list[tuple[tuple[int, int], tuple[int, int]]]) -> None:
        self._nodes = nodes
        #: location id -> (kind, node, port); targets first, then sources
        self._locs: list[tuple[str, int, int]] = []
        self._tid: dict[int, list[int]] = {}
        self._sid: dict[int, list[int]] = {}
        for n in sorted(nodes):
            node = nodes[n]
            self._tid[n] = [self._add_loc(("target", n, i)) for i in range(node.inputs)]
        for n in sorted(nodes):
            node = nodes[n]
            self._sid[n] = [self._add_loc(("source", n, o)) for o in range(node.outputs)]
        count = len(self._locs)
        self._is_target = [k == "target" for k, _, _ in self._locs]
        depth = [
            nodes[n].input_depth[p] if k == "target" else nodes[n].output_depth[p] for k, n, p in self._locs
        ]
        self._key = [_key_fn(d) for d in depth]
        # successors: a target's are (source, summary fn) pairs, a source's are targets
        self._succ: list[list[Any]] = [[] for _ in range(count)]
        for n, node in nodes.items():
            for i in range(node.inputs):
                lst = self._succ[self._tid[n][i]]
                for o in range(node.outputs):
                    for s in node.summary[i][o]:
                        lst.append((self._sid[n][o], _compile(s)))
        for (sn, sp), (tn, tp) in edges:
            self._succ[self._sid[sn][sp]].append(self._tid[tn][tp])
        self._points = [MutableAntichain() for _ in range(count)]
        self._impl = [MutableAntichain() for _ in range(count)]
        #: the buffered count changes, ``(location id, time, delta)``, applied by
        #: :meth:`propagate` (which replaces the list: read the attribute each time)
        self.pending: list[tuple[int, Any, int]] = []
        self._total = 0  # the sum of the sizes of the pointstamp frontiers: 0 iff no count anywhere
        #: worklist entries processed so far (a measure of the tracker's work)
        self.work_done = 0

    def _add_loc(self, loc: tuple[str, int, int]) -> int:
        self._locs.append(loc)
        return len(self._locs) - 1

    def update_source(self, node: int, port: int, time: Any, delta: int) -> None:
        """A capability count change at output port ``(node, port)``."""
        self.pending.append((self._sid[node][port], time, delta))

    def update_target(self, node: int, port: int, time: Any, delta: int) -> None:
        """A records-in-flight count change at input port ``(node, port)``."""
        self.pending.append((self._tid[node][port], time, delta))

    def location_ids(self, node: int) -> tuple[list[int], list[int]]:
        """The location ids of node ``node``'s input ports and output ports (what
        :attr:`pending` entries name)."""
        return self._tid[node], self._sid[node]

    def has_pending(self) -> bool:
        """Whether count changes wait for :meth:`propagate`."""
        return bool(self.pending)

    def propagate(self) -> list[tuple[int, int]]:
        """Apply buffered changes; return the input ports whose frontier changed."""
        if not self.pending:
            return []
        pending, self.pending = self.pending, []
        net: dict[tuple[int, Any], int]
        if len(pending) == 1:
            net = {(pending[0][0], pending[0][1]): pending[0][2]}
        else:
            net = {}
            get = net.get
            for lid, t, d in pending:
                net[(lid, t)] = get((lid, t), 0) + d
        keys, points = self._key, self._points
        work: list[tuple[tuple[int, ...], int, int, Any]] = []
        for (lid, t), d in net.items():
            if d:
                for t2, d2 in points[lid].update_one(t, d):
                    self._total += d2
                    heappush(work, (keys[lid](t2), lid, d2, t2))
        if not work:
            return []
        is_target, succ, impl = self._is_target, self._succ, self._impl
        before: dict[int, list[Any]] = {}
        self.work_done += len(work)
        while work:
            k, lid, d, t = heappop(work)
            while work and work[0][1] == lid and work[0][0] == k:
                d += heappop(work)[2]
            if not d:
                continue
            if is_target[lid]:
                mine = impl[lid]
                if lid not in before:
                    before[lid] = list(mine._frontier)
                for t2, d2 in mine.update_one(t, d):
                    for src, fn in succ[lid]:
                        r = t2 if fn is None else fn(t2)
                        if r is not None:
                            heappush(work, (keys[src](r), src, d2, r))
                            self.work_done += 1
            else:
                for t2, d2 in impl[lid].update_one(t, d):
                    k2 = keys[lid](t2)
                    for tgt in succ[lid]:
                        heappush(work, (k2, tgt, d2, t2))
                    self.work_done += len(succ[lid])
        locs = self._locs
        changed = [
            (locs[lid][1], locs[lid][2]) for lid, old in before.items() if set(old) != set(impl[lid]._frontier)
        ]
        changed.sort()
        return changed

    def frontier(self, node: int, port: int) -> Antichain:
        """The frontier at input port ``(node, port)``."""
        return self._impl[self._tid[node][port]].frontier

    def mutable_frontier(self, node: int, port: int) -> MutableAntichain:
        """The live frontier object at an input (read-only use)."""
        return self._impl[self._tid[node][port]]

    def pointstamps(self) -> dict[tuple[str, int, int], dict[Any, int]]:
        """Non-zero pointstamp counts per location (for diagnostics)."""
        out = {}
        for lid, p in enumerate(self._points):
            if p._counts:
                out[self._locs[lid]] = dict(p._counts)
        return out

    def node_name(self, node: int) -> str:
        return self._nodes[node].name

    def is_idle(self) -> bool:
        """True when no pointstamp is held anywhere (everything is complete)."""
        return not self.pending and self._total == 0
