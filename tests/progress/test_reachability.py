"""The reachability tracker against a brute-force reachability computation.

Graphs are described by a small model (:class:`Graph`) whose internal summaries are
*steps* with their own vector semantics (``model_step``); the tracker is built from
the matching :class:`PathSummary` objects.  The brute force explores ``(location,
time)`` pairs from every positive pointstamp, applying one step at a time, and stops
expanding a time at a location once an already-found time there is ``<=`` it (every
cycle strictly advances time, so this terminates).  The frontier at a target is then
the set of minimal times found there, which the tracker must reproduce exactly after
each :meth:`Tracker.propagate`.
"""

from __future__ import annotations

import doctest
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

import networkx as nx
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import tstate.progress.reachability as reachability_mod
import tstate.progress.reference as reference_mod
from tstate.errors import GraphError
from tstate.progress.frontier import Antichain
from tstate.progress.reachability import GraphBuilder, Tracker
from tstate.progress.reference import all_pairs
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import TIME_MAX, Product, depth, minimum

from tests.progress.strategies import vec_le, vec_to_time

Step = tuple[Any, ...]  # ("adv", adds) | ("feedback",) | ("enter",) | ("leave",)
Loc = tuple[str, int, int]  # (kind, node, port)


# -- the graph model ------------------------------------------------------------------


def model_step(step: Step, v: tuple[int, ...]) -> tuple[int, ...]:
    if step[0] == "adv":
        return tuple(x + a for x, a in zip(v, step[1], strict=True))
    if step[0] == "feedback":
        return v[:-1] + (v[-1] + 1,)
    if step[0] == "enter":
        return v + (0,)
    assert step[0] == "leave"
    return v[:-1]


def step_summary(step: Step, d: int) -> PathSummary:
    if step[0] == "adv":
        return PathSummary(d, d, tuple(step[1]))
    if step[0] == "feedback":
        return PathSummary.feedback(d)
    if step[0] == "enter":
        return PathSummary.enter(d)
    return PathSummary.leave(d)


@dataclass
class Node:
    name: str
    in_depth: tuple[int, ...]
    out_depth: tuple[int, ...]
    steps: list[list[list[Step]]]  # [input][output] -> steps


@dataclass
class Graph:
    nodes: dict[int, Node] = field(default_factory=dict)
    edges: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)

    def add(self, name: str, in_depth: tuple[int, ...], out_depth: tuple[int, ...], steps: list[list[list[Step]]]) -> int:
        idx = len(self.nodes)
        self.nodes[idx] = Node(name, in_depth, out_depth, steps)
        return idx

    def targets(self) -> list[tuple[int, int]]:
        return [(n, i) for n, node in self.nodes.items() for i in range(len(node.in_depth))]

    def locations(self) -> list[tuple[Loc, int]]:
        """Every port with its depth."""
        out: list[tuple[Loc, int]] = []
        for n, node in self.nodes.items():
            out += [(("target", n, i), d) for i, d in enumerate(node.in_depth)]
            out += [(("source", n, o), d) for o, d in enumerate(node.out_depth)]
        return out

    def successors(self) -> dict[Loc, list[tuple[Loc, Optional[Step]]]]:
        succ: dict[Loc, list[tuple[Loc, Optional[Step]]]] = defaultdict(list)
        for (sn, sp), (tn, tp) in self.edges:
            succ[("source", sn, sp)].append((("target", tn, tp), None))
        for n, node in self.nodes.items():
            for i, row in enumerate(node.steps):
                for o, steps in enumerate(row):
                    for step in steps:
                        succ[("target", n, i)].append((("source", n, o), step))
        return succ

    def builder(self) -> GraphBuilder:
        b = GraphBuilder()
        for n, node in self.nodes.items():
            b.add_node(
                n,
                node.name,
                inputs=len(node.in_depth),
                outputs=len(node.out_depth),
                summary=[
                    [[step_summary(s, node.in_depth[i]) for s in steps] for steps in row]
                    for i, row in enumerate(node.steps)
                ],
                input_depth=node.in_depth,
                output_depth=node.out_depth,
            )
        for s, t in self.edges:
            b.add_edge(s, t)
        return b

    def non_advancing_cycle_nodes(self) -> set[int]:
        """Nodes with a port on a cycle that does not strictly advance time: a cycle
        from ``L`` back to ``L`` that maps some time ``w`` to a time ``<= w``.  Brute
        force: explore from ``L`` at a time ``w`` with huge coordinates (coordinates
        re-entered on the way restart from small values) and look for ``<= w`` at ``L``."""
        succ = self.successors()
        bad = set()
        for loc, d in self.locations():
            w = (10**6,) * (d + 1)
            found = explore(succ, [(nxt, w if step is None else model_step(step, w)) for nxt, step in succ[loc]])
            if any(vec_le(v, w) for v in found[loc]):
                bad.add(loc[1])
        return bad


def explore(
    succ: dict[Loc, list[tuple[Loc, Optional[Step]]]], work: list[tuple[Loc, tuple[int, ...]]]
) -> dict[Loc, list[tuple[int, ...]]]:
    """The minimal times reachable at every location from ``work``, applying one step
    at a time; a time is not expanded once a time ``<=`` it was found at its location."""
    found: dict[Loc, list[tuple[int, ...]]] = defaultdict(list)
    while work:
        loc, v = work.pop()
        here = found[loc]
        if any(vec_le(u, v) for u in here):
            continue
        here[:] = [u for u in here if not vec_le(v, u)]
        here.append(v)
        for nxt, step in succ[loc]:
            work.append((nxt, v if step is None else model_step(step, v)))
    return found


def brute_frontiers(graph: Graph, counts: dict[Loc, Counter]) -> dict[tuple[int, int], list[Any]]:
    """The minimal times that can reach every target from the positive pointstamps."""
    found = explore(graph.successors(), [(loc, v) for loc, c in counts.items() for v, k in c.items() if k > 0])
    return {
        (n, i): sorted(vec_to_time(v) for v in found[("target", n, i)]) for n, i in graph.targets()
    }


# -- graph strategies ------------------------------------------------------------------

adds_values = st.sampled_from([0, 0, 0, 1, 2])


def adv_steps(d: int) -> st.SearchStrategy[Step]:
    return st.tuples(*([adds_values] * (d + 1))).map(lambda a: ("adv", a))


@st.composite
def operator(draw, graph: Graph, name: str, d: int) -> int:
    n_in, n_out = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    steps = [[draw(st.lists(adv_steps(d), max_size=2)) for _ in range(n_out)] for _ in range(n_in)]
    return graph.add(name, (d,) * n_in, (d,) * n_out, steps)


@st.composite
def graphs(
    draw,
    back_edges: bool = False,
    max_depth: int = 2,
    min_feedback: int = 0,
    max_feedback: int = 2,
    scope: Optional[bool] = None,
    deep: bool = False,
) -> Graph:
    """An input node at depth 0 followed by a *region*: a sequence of units, each an
    operator or a nested iterate scope (``enter`` node -> region one level deeper,
    with its own feedback nodes -> ``leave`` node), up to ``max_depth``.

    Inside a region edges go forward from the region's entry and earlier units, and
    from the region's feedback nodes to anywhere in it, so every cycle runs through a
    feedback node (``PathSummary.feedback(1)`` at its depth).  With ``back_edges`` up
    to two more edges per region go between any of its units (cycles without
    feedback, which may or may not advance time).  ``scope`` forces (or forbids) a
    scope at depth 0; ``deep`` forces a scope nested in the first one, on a loop."""
    g = Graph()
    names = iter(range(1000))

    def outs(nodes: list[int]) -> list[tuple[int, int]]:
        return [(n, o) for n in nodes for o in range(len(g.nodes[n].out_depth))]

    def connect(node: int, pool: list[int], max_size: int = 2) -> None:
        for i in range(len(g.nodes[node].in_depth)):
            for src in draw(st.lists(st.sampled_from(outs(pool)), min_size=1, max_size=max_size, unique=True)):
                g.edges.append((src, (node, i)))

    def region(d: int, entry: list[int]) -> list[int]:
        """Create a region at depth ``d`` fed by ``entry``; return the nodes whose
        outputs may feed what follows it."""
        n_fb = draw(st.integers(min_feedback, max_feedback)) if d > 0 else 0
        fbs = [g.add(f"fb{next(names)}", (d,), (d,), [[[("feedback",)]]]) for _ in range(n_fb)]
        units: list[tuple[int, int]] = []  # (node fed by the region, node feeding it)
        n_units = draw(st.integers(1, (5, 4, 2, 1)[min(d, 3)]))
        nested = [d < max_depth and draw(st.integers(0, 2 + d)) == 0 for _ in range(n_units)]
        if d == 0 and scope is False:
            nested = [False] * n_units
        if ((d == 0 and scope) or (d == 1 and deep)) and not any(nested):
            nested.insert(draw(st.integers(0, n_units)), True)
        for is_scope in nested:
            if is_scope:
                k = next(names)
                enter = g.add(f"enter{k}", (d,), (d + 1,), [[[("enter",)]]])
                inner = region(d + 1, [enter])
                leave = g.add(f"leave{k}", (d + 1,), (d,), [[[("leave",)]]])
                connect(leave, inner)
                units.append((enter, leave))
            else:
                op = draw(operator(g, f"op{next(names)}", d))
                units.append((op, op))
        for k, (fed, _) in enumerate(units):
            connect(fed, entry + [u for _, u in units[:k]] + fbs)
        for _ in range(draw(st.integers(0, 2)) if back_edges else 0):
            src = draw(st.sampled_from(outs([u for _, u in units])))
            fed = draw(st.sampled_from([f for f, _ in units]))
            g.edges.append((src, (fed, draw(st.integers(0, len(g.nodes[fed].in_depth) - 1)))))
        available = entry + [u for _, u in units] + fbs
        for fb in fbs:
            connect(fb, available, max_size=3)
        if deep and d == 1 and fbs:  # make sure the outer loop runs through the inner scope
            enter, leave = units[nested.index(True)]
            g.edges += [((leave, 0), (fbs[0], 0)), ((fbs[0], 0), (enter, 0))]
        return available

    region(0, [g.add("input", (), (0,), [])])
    return g


def nested_graph() -> Graph:
    """Two nested loops: ``input -> enter -> A (1) -> enter -> B (2) <-> fb2 ; B ->
    leave -> C (1) -> fb1 -> A ; C -> leave -> out (0)``, with delays inside."""
    g = Graph()
    inp = g.add("input", (), (0,), [])
    e1 = g.add("enter1", (0,), (1,), [[[("enter",)]]])
    a = g.add("A", (1, 1), (1,), [[[("adv", (0, 0))]], [[("adv", (0, 0))]]])
    e2 = g.add("enter2", (1,), (2,), [[[("enter",)]]])
    b = g.add("B", (2, 2), (2, 2), [[[("adv", (0, 0, 0))], [("adv", (0, 1, 0)), ("adv", (0, 0, 2))]], [[("adv", (0, 0, 0))], []]])
    f2 = g.add("fb2", (2,), (2,), [[[("feedback",)]]])
    l2 = g.add("leave2", (2,), (1,), [[[("leave",)]]])
    c = g.add("C", (1,), (1, 1), [[[("adv", (0, 0))], [("adv", (1, 0))]]])
    f1 = g.add("fb1", (1,), (1,), [[[("feedback",)]]])
    l1 = g.add("leave1", (1,), (0,), [[[("leave",)]]])
    out = g.add("out", (0,), (0,), [[[("adv", (0,))]]])
    g.edges += [
        ((inp, 0), (e1, 0)),
        ((e1, 0), (a, 0)),
        ((f1, 0), (a, 1)),
        ((a, 0), (e2, 0)),
        ((e2, 0), (b, 0)),
        ((f2, 0), (b, 1)),
        ((b, 0), (f2, 0)),
        ((b, 1), (l2, 0)),
        ((l2, 0), (c, 0)),
        ((c, 0), (f1, 0)),
        ((c, 1), (l1, 0)),
        ((l1, 0), (out, 0)),
    ]
    return g


# -- the scenario: random pointstamp updates, checked after every propagate ----------------


def snapshot(tracker: Tracker, graph: Graph) -> dict[tuple[int, int], list[Any]]:
    return {tgt: list(tracker.frontier(*tgt).elements) for tgt in graph.targets()}


def run_scenario(data: Any, graph: Graph, tracker: Tracker, max_batches: int = 6) -> None:
    event(f"feedback nodes: {sum(node.name.startswith('fb') for node in graph.nodes.values())}")
    event(f"targets: {len(graph.targets()) // 4 * 4}+")
    event(f"scope depth: {max(d for _, d in graph.locations())}")
    # pointstamps at every depth equally often (deep scopes have few ports)
    by_depth: dict[int, list[tuple[Loc, int]]] = defaultdict(list)
    for loc, d in graph.locations():
        by_depth[d].append((loc, d))
    locations = st.sampled_from(sorted(by_depth)).flatmap(lambda d: st.sampled_from(by_depth[d]))
    counts: dict[Loc, Counter] = defaultdict(Counter)

    def check(changed: list[tuple[int, int]], before: dict[tuple[int, int], list[Any]]) -> None:
        expected = brute_frontiers(graph, counts)
        after = snapshot(tracker, graph)
        assert after == expected
        if any(len(f) > 1 for f in after.values()):
            event("some frontier has several elements")
        if any(any(x != minimum(depth(x)) and not isinstance(x, int) and x.inner > 0 for x in f) for f in after.values()):
            event("some frontier holds a time advanced by a loop or delay")
        assert changed == sorted(t for t in graph.targets() if before[t] != after[t])
        assert tracker.pointstamps() == {
            loc: {vec_to_time(v): k for v, k in c.items() if k} for loc, c in counts.items() if any(c.values())
        }

    def apply(batch: list[tuple[Loc, tuple[int, ...], int]]) -> None:
        before = snapshot(tracker, graph)
        for (kind, n, p), v, d in batch:
            if kind == "source":
                tracker.update_source(n, p, vec_to_time(v), d)
            else:
                tracker.update_target(n, p, vec_to_time(v), d)
        check(tracker.propagate(), before)

    for _ in range(data.draw(st.integers(1, max_batches), label="batches")):
        batch = []
        for _ in range(data.draw(st.integers(1, 6))):
            loc, d = data.draw(locations)
            v = data.draw(st.tuples(*([st.integers(0, 3)] * (d + 1))))
            delta = max(data.draw(st.integers(-2, 3)), -counts[loc][v])
            counts[loc][v] += delta
            batch.append((loc, v, delta))
        held = sorted((loc, v) for loc, c in counts.items() for v, k in c.items() if k > 0)
        if held and data.draw(st.booleans()):  # retract a held pointstamp
            loc, v = data.draw(st.sampled_from(held))
            delta = -data.draw(st.integers(1, counts[loc][v]))
            counts[loc][v] += delta
            batch.append((loc, v, delta))
        apply(data.draw(st.permutations(batch)))
        if data.draw(st.booleans()):
            before = snapshot(tracker, graph)
            assert tracker.propagate() == []
            assert snapshot(tracker, graph) == before

    # retract everything: every frontier empties and the tracker is idle
    retract = [(loc, v, -k) for loc, c in counts.items() for v, k in c.items() if k]
    for loc in counts:
        counts[loc].clear()
    apply(retract)
    assert all(not tracker.frontier(*tgt) for tgt in graph.targets())
    assert tracker.is_idle()
    assert tracker.pointstamps() == {}


class Twin:
    """The worklist tracker and the all-pairs reference fed the same updates: every
    :meth:`propagate` checks that they report the same changed inputs and frontiers."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.new = graph.builder().build()
        self.old = all_pairs(graph.builder())

    def update_source(self, *a: Any) -> None:
        self.new.update_source(*a)
        self.old.update_source(*a)

    def update_target(self, *a: Any) -> None:
        self.new.update_target(*a)
        self.old.update_target(*a)

    def propagate(self) -> list[tuple[int, int]]:
        changed = self.new.propagate()
        assert changed == self.old.propagate()
        assert snapshot(self.new, self.graph) == snapshot(self.old, self.graph)
        assert self.new.pointstamps() == self.old.pointstamps()
        return changed

    def frontier(self, node: int, port: int) -> Antichain:
        return self.new.frontier(node, port)

    def pointstamps(self) -> Any:
        return self.new.pointstamps()

    def is_idle(self) -> bool:
        assert self.new.is_idle() == self.old.is_idle()
        return self.new.is_idle()


@given(graphs(scope=True, deep=True, min_feedback=1), st.data())
def test_worklist_tracker_equals_the_all_pairs_tracker(graph, data):
    """The tracker against the previous (all-pairs) one, update batch by update batch,
    on random graphs with loops in loops (and both against the brute force)."""
    run_scenario(data, graph, Twin(graph))


def test_changes_that_move_no_frontier_stop_where_they_are_recorded():
    """A batch behind the frontier stops at its own input; changes that cancel within
    one propagate cost no worklist step; a frontier move goes all the way down."""
    b = linear("a", "b", "c")
    t = b.build()
    t.update_source(0, 0, 5, 1)  # the input holds 5: every frontier is {5}
    assert t.propagate() == [(1, 0), (2, 0), (3, 0)]
    done = t.work_done
    t.update_target(2, 0, 7, 1)  # a batch at 7 in front of b: behind the frontier
    assert t.propagate() == []
    assert t.work_done - done == 1  # b's input only
    done = t.work_done
    t.update_target(3, 0, 8, 1)
    t.update_target(3, 0, 8, -1)  # sent and taken within one activation
    t.update_source(0, 0, 5, 1)  # a second capability at 5
    assert t.propagate() == []
    assert t.work_done == done
    t.update_source(0, 0, 5, -2)
    t.update_source(0, 0, 9, 1)  # downgraded past the batch: b and c wait for it at 7
    assert t.propagate() == [(1, 0), (2, 0), (3, 0)]
    assert [t.frontier(n, 0) for n in (1, 2, 3)] == [Antichain([9]), Antichain([7]), Antichain([7])]
    done = t.work_done
    t.update_source(0, 0, 9, -1)
    t.update_source(0, 0, 10, 1)  # a moves; below the batch nothing does
    assert t.propagate() == [(1, 0)]
    # -9 and +10 at the input's output, a's input, a's output and b's input; not c's
    assert t.work_done - done == 8


@given(graphs(scope=True, min_feedback=1), st.data())
def test_tracker_matches_brute_force(graph, data):
    run_scenario(data, graph, graph.builder().build())


@given(graphs(scope=True, deep=True, min_feedback=1), st.data())
def test_tracker_matches_brute_force_on_nested_scopes(graph, data):
    """Loops in loops: a time inside the inner scope comes back around the outer loop
    with the inner coordinate restarted, which the frontier there must include."""
    run_scenario(data, graph, graph.builder().build())


@given(graphs(max_feedback=0), st.data())
def test_tracker_matches_brute_force_on_dags(graph, data):
    g = nx.DiGraph()
    for loc, succs in graph.successors().items():
        for nxt, _ in succs:
            g.add_edge(loc, nxt)
    assert nx.is_directed_acyclic_graph(g)
    run_scenario(data, graph, graph.builder().build())


@settings(max_examples=20)
@given(st.data())
def test_tracker_matches_brute_force_on_nested_loops(data):
    graph = nested_graph()
    run_scenario(data, graph, graph.builder().build(), max_batches=8)


@given(graphs(back_edges=True), st.data())
def test_cycles_without_advancing_summary_are_rejected(graph, data):
    """With arbitrary edges inside a region: building fails iff some cycle does not
    advance time, naming an operator on such a cycle; otherwise the tracker is exact."""
    bad = graph.non_advancing_cycle_nodes()
    event(f"rejected: {bool(bad)}")
    if bad:
        with pytest.raises(GraphError) as info:
            graph.builder().build()
        msg = str(info.value)
        assert any(repr(graph.nodes[n].name) in msg for n in bad), (msg, [graph.nodes[n].name for n in bad])
    else:
        run_scenario(data, graph, graph.builder().build(), max_batches=3)


@given(graphs(), st.data())
def test_unconnected_input_is_rejected(graph, data):
    targets = graph.targets()
    assume(targets)
    n, i = data.draw(st.sampled_from(targets))
    graph.edges = [(s, t) for s, t in graph.edges if t != (n, i)]
    with pytest.raises(GraphError) as info:
        graph.builder().build()
    assert repr(graph.nodes[n].name) in str(info.value)


@given(graphs(), st.data())
def test_edge_across_depths_is_rejected(graph, data):
    locations = graph.locations()
    sources = [(loc, d) for loc, d in locations if loc[0] == "source"]
    targets = [(loc, d) for loc, d in locations if loc[0] == "target"]
    pairs = [(s, t) for s, sd in sources for t, td in targets if sd != td]
    assume(targets)
    if not pairs:  # no scope: an edge from an output port that does not exist instead
        (_, n, p), _ = data.draw(st.sampled_from(targets))
        graph.edges.append(((n, 5), (n, p)))
    else:
        s, t = data.draw(st.sampled_from(pairs))
        graph.edges.append(((s[1], s[2]), (t[1], t[2])))
    with pytest.raises(GraphError):
        graph.builder().build()


# -- examples --------------------------------------------------------------------------------


def linear(*names: str, summaries: Optional[list[PathSummary]] = None) -> GraphBuilder:
    b = GraphBuilder()
    b.add_node(0, "input", inputs=0, outputs=1)
    for k, name in enumerate(names, start=1):
        s = None if summaries is None else [[[summaries[k - 1]]]]
        b.add_node(k, name, inputs=1, outputs=1, summary=s)
        b.add_edge((k - 1, 0), (k, 0))
    return b


def test_cycle_without_feedback_names_an_operator():
    b = linear("a", "b")
    b.add_edge((2, 0), (1, 0))
    with pytest.raises(GraphError, match="'a'|'b'"):
        b.build()


def test_self_loop_without_feedback():
    b = linear("a")
    b.add_edge((1, 0), (1, 0))
    with pytest.raises(GraphError, match="'a'"):
        b.build()
    b = linear("a", summaries=[PathSummary.advance(0, 1)])
    b.add_edge((1, 0), (1, 0))
    t = b.build()  # a delaying self-loop advances time
    t.update_source(0, 0, 3, 1)
    assert t.propagate() == [(1, 0)]
    assert t.frontier(1, 0) == Antichain([3])


def test_loop_inside_a_scope_needs_a_feedback_edge():
    def build(loop_summary: PathSummary) -> Tracker:
        b = GraphBuilder()
        b.add_node(0, "input", inputs=0, outputs=1)
        b.add_node(1, "enter", 1, 1, [[[PathSummary.enter(0)]]], input_depth=[0], output_depth=[1])
        b.add_node(2, "body", 2, 1, depth=1)
        b.add_node(3, "loop", 1, 1, [[[loop_summary]]], depth=1)
        b.add_node(4, "leave", 1, 1, [[[PathSummary.leave(1)]]], input_depth=[1], output_depth=[0])
        b.add_node(5, "out", 1, 1)
        b.add_edge((0, 0), (1, 0))
        b.add_edge((1, 0), (2, 0))
        b.add_edge((2, 0), (3, 0))
        b.add_edge((3, 0), (2, 1))
        b.add_edge((2, 0), (4, 0))
        b.add_edge((4, 0), (5, 0))
        return b.build()

    with pytest.raises(GraphError, match="'body'|'loop'"):
        build(PathSummary.identity(1))
    t = build(PathSummary.feedback(1))
    t.update_source(0, 0, 2, 1)
    assert t.propagate() == [(1, 0), (2, 0), (2, 1), (3, 0), (4, 0), (5, 0)]
    assert t.frontier(1, 0) == Antichain([2])
    assert t.frontier(2, 0) == Antichain([Product(2, 0)])
    assert t.frontier(2, 1) == Antichain([Product(2, 1)])
    assert t.frontier(4, 0) == Antichain([Product(2, 0)])
    assert t.frontier(5, 0) == Antichain([2])
    t.update_target(3, 0, Product(1, 5), 1)
    assert t.propagate() == [(2, 1), (3, 0), (4, 0), (5, 0)]
    assert t.frontier(2, 1) == Antichain([Product(1, 6), Product(2, 1)])
    assert t.frontier(4, 0) == Antichain([Product(1, 6), Product(2, 0)])
    assert t.frontier(5, 0) == Antichain([1])
    t.update_source(0, 0, 2, -1)
    assert t.propagate() == [(1, 0), (2, 0), (2, 1), (3, 0), (4, 0)]
    assert t.frontier(2, 0) == Antichain()
    assert t.frontier(2, 1) == t.frontier(4, 0) == Antichain([Product(1, 6)])
    assert t.frontier(3, 0) == Antichain([Product(1, 5)])
    assert t.frontier(5, 0) == Antichain([1])


def test_nested_loop_reentering_the_inner_scope():
    """A record inside the inner scope of two nested loops comes back, through the
    outer loop, with the inner coordinate reset: that time is not >= the original one,
    so the frontier there must hold both."""
    g = nested_graph()
    t = g.builder().build()
    t.update_target(6, 0, Product(Product(0, 0), 1), 1)  # at the inner scope's leave
    t.propagate()
    # leave2 -> C -> fb1 (outer +1) -> A -> enter2 -> B (+1 outer-loop coordinate) -> leave2
    assert t.frontier(6, 0) == Antichain([Product(Product(0, 0), 1), Product(Product(0, 2), 0)])


def test_cycle_through_a_scope_boundary_without_delay_is_rejected():
    b = GraphBuilder()
    b.add_node(0, "input", inputs=0, outputs=1)
    b.add_node(1, "merge", 2, 1)
    b.add_node(2, "enter", 1, 1, [[[PathSummary.enter(0)]]], input_depth=[0], output_depth=[1])
    b.add_node(3, "fb", 1, 1, [[[PathSummary.feedback(1)]]], depth=1)
    b.add_node(4, "leave", 1, 1, [[[PathSummary.leave(1)]]], input_depth=[1], output_depth=[0])
    b.add_edge((0, 0), (1, 0))
    b.add_edge((1, 0), (2, 0))
    b.add_edge((2, 0), (3, 0))
    b.add_edge((3, 0), (4, 0))
    b.add_edge((4, 0), (1, 1))  # the feedback advances only the inner coordinate
    with pytest.raises(GraphError):
        b.build()


def test_unconnected_input_example():
    b = linear("a")
    b.add_node(2, "join", inputs=2, outputs=1)
    b.add_edge((1, 0), (2, 0))
    with pytest.raises(GraphError, match="'join'"):
        b.build()


def test_malformed_graphs():
    b = linear("a")
    b.add_node(2, "inner", 1, 1, depth=1)
    b.add_edge((1, 0), (2, 0))  # depth 0 -> depth 1 without entering
    with pytest.raises(GraphError):
        b.build()
    b = linear("a")
    b.add_edge((1, 3), (1, 0))  # no output port 3
    with pytest.raises(GraphError):
        b.build()
    b = linear("a")
    b.add_edge((0, 0), (9, 0))  # no node 9
    with pytest.raises(GraphError):
        b.build()
    with pytest.raises(GraphError):
        GraphBuilder().add_node(0, "x", inputs=1, outputs=2, summary=[[[PathSummary.identity(0)]]])


def test_overflowing_times_are_dropped():
    b = linear("delay", "sink", summaries=[PathSummary.advance(0, 1), PathSummary.identity(0)])
    t = b.build()
    t.update_source(0, 0, TIME_MAX, 1)
    assert t.propagate() == [(1, 0)]
    assert t.frontier(1, 0) == Antichain([TIME_MAX])
    assert t.frontier(2, 0) == Antichain()
    t.update_source(0, 0, TIME_MAX - 1, 1)
    assert t.propagate() == [(1, 0), (2, 0)]
    assert t.frontier(2, 0) == Antichain([TIME_MAX])
    t.update_source(0, 0, TIME_MAX, -1)
    t.update_source(0, 0, TIME_MAX - 1, -1)
    assert t.propagate() == [(1, 0), (2, 0)]
    assert t.is_idle()


def test_doctests():
    assert doctest.testmod(reachability_mod).failed == 0
    assert doctest.testmod(reference_mod).failed == 0
