"""Lowering a dataflow for Spark: which operators become shuffles, and the fused
stateless chains between them.

The plan (``flow.graph``, a :class:`tstate.plan.Graph` of typed nodes) is cut at every
*boundary*: an operator whose input is exchanged by key (``stateful`` / ``fold_bins``,
``exchange``).  Everything between boundaries is *fused*: records are pushed through it
in the task that produced them, up to the next boundary (where they are grouped by
``(boundary, bin, time)`` for the shuffle) or a sink -- the stateless operators
(``map``, ``filter``, ``flat_map``, ``inspect``, ``concat``: each node's own
:meth:`~tstate.plan.Stateless.apply`, as on the embedded engine), the edges of iterate
scopes (``enter``, ``leave``, ``feedback``: they only re-time records, by the nodes'
rules) and frontier operators that keep nothing between activations
(:mod:`tstate.spark.frontier`).  Each boundary becomes one Spark shuffle onto the
partitions that own its bins, then one task per partition, which runs the stateful
node itself (:mod:`tstate.spark.host`).

An iterate scope becomes a :class:`LoopScope`: its boundaries run in *rounds* within the
micro-batch until the loop's times of the batch are done (:mod:`tstate.spark.rounds`);
every cycle must pass a boundary.  The driver runs :attr:`Plan.items` in order: root
boundaries (their node) and loops (a :class:`Loop`), topologically.

The plan also carries the dataflow's allow-list of record classes (:attr:`Plan.records`,
:mod:`tstate.spark.record_types`), so every task encodes and decodes records against
the same list.

Only what the Spark backend can run is accepted; anything else (``source`` nodes,
probes, sinks inside a loop, nested iterate scopes, frontier operators with per-worker
``state=`` or an ``exchange=`` key, a loop without a boundary) raises
:class:`~tstate.errors.SparkError` naming the operator, when the run starts.

>>> import tstate as ts
>>> flow = ts.Dataflow("p")
>>> words = flow.input("words")
>>> @flow.stateful(words.map(str.lower), key=lambda w: w, state=int)
... def count(n, w, ctx):
...     ctx.emit((w, n + 1)); return n + 1
>>> out = count.collect()
>>> plan = Plan.of(flow)
>>> [type(plan.nodes[b].op).__name__ for b in plan.boundaries], plan.inputs
(['Stateful'], {'words': 0})
>>> routed, sinks = plan.push_from(0, 7, ["A", "b", "a"])
>>> sorted((plan.nodes[node].name, t, recs) for (node, _bin, t), recs in routed.items())
[('count', 7, ['a', 'a']), ('count', 7, ['b'])]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from attrs import define, field, frozen

from tstate.errors import OperatorError, SparkError
from tstate.keys import KeyRouter, hasher_of
from tstate.plan import Enter, Exchange, Feedback, Frontier, Input, Leave, Node, Sink, Stateful, Stateless
from tstate.spark.record_types import BUILTIN, RecordTypes

if TYPE_CHECKING:  # pragma: no cover
    from tstate.plan import KeyFn, Planned

__all__ = ["Plan", "PlanNode", "Loop", "LoopScope", "Item", "BOUNDARY"]

#: (bin count, key hash) -> router, per process (see Plan.router)
_SHARED_ROUTERS: dict[tuple[int, Any], KeyRouter] = {}

#: the node types that are boundaries: their input is exchanged by key (a shuffle)
BOUNDARY = (Stateful, Exchange)
#: the node types Spark runs: inputs bound to DataFrames, sinks, the stateless operators
#: (``exchange`` among them), iterate-scope edges (they only re-time records), frontier
#: operators and stateful ones
SUPPORTED = (Input, Sink, Stateless, Stateful, Enter, Leave, Feedback, Frontier)


@define
class PlanNode:
    """One operator as the Spark tasks need it: this is what is shipped to executors.
    ``op`` is the operator's plan node (:mod:`tstate.plan`: its settings and per-batch
    rule, the same object the embedded engine runs) for every operator a task runs;
    None for inputs and sinks, whose ends stay on the driver (a sink holds its buffers)."""

    node: int
    name: str
    op: Optional[Node] = None
    #: consumers: (node, input port)
    consumers: list[tuple[int, int]] = field(factory=list)
    #: the iterate scope the operator is in (None: the root), by its enter nodes' first index
    loop: Optional[int] = None

    @property
    def boundary(self) -> bool:
        """The operator's input is exchanged by key (a ``stateful`` or ``exchange``)."""
        return isinstance(self.op, BOUNDARY)

    @property
    def key(self) -> "KeyFn":
        """A boundary's exchange key."""
        op = self.op
        assert isinstance(op, (Stateful, Exchange)), f"operator {self.name!r} is not a boundary"
        return op.key

    @property
    def bins(self) -> int:
        """A boundary's bin count (0 for other operators)."""
        op = self.op
        return op.bins if isinstance(op, (Stateful, Exchange)) else 0

    @property
    def stateful(self) -> Stateful:
        """A stateful boundary's node."""
        op = self.op
        assert isinstance(op, Stateful), f"operator {self.name!r} is not a stateful operator"
        return op


@frozen
class Loop:
    """An item of :attr:`Plan.items`: iterate scope ``id`` (its :class:`LoopScope` is
    ``plan.loops[id]``), run in rounds.

    >>> Loop(3) == Loop(3), Loop(3) in {Loop(3): "wave"}
    (True, True)
    """

    id: int


#: what the driver runs per micro-batch: a root boundary (its node) or a loop
Item = int | Loop


@define
class LoopScope:
    """An iterate scope: the driver runs it in rounds within a micro-batch (see
    :mod:`tstate.spark.rounds`)."""

    #: the first node of the scope (its first ``enter``): identifies the loop
    id: int
    name: str
    #: boundaries inside the scope, in topological order (ignoring feedback edges)
    boundaries: list[int] = field(factory=list)
    #: waves (input names or boundaries outside the loop) whose records enter it
    feeders: list[Any] = field(factory=list)


@define
class Plan:
    """The lowered dataflow (see the module docstring)."""

    name: str
    nodes: dict[int, PlanNode]
    #: input name -> node
    inputs: dict[str, int]
    #: boundary nodes in topological order
    boundaries: list[int]
    #: sink nodes
    sinks: list[int]
    #: per boundary: the waves (input names or boundary nodes) whose records reach it
    feeders: dict[int, list[Any]]
    #: per wave (input name or boundary node): the sinks its records reach directly
    sink_reach: dict[Any, list[int]]
    #: iterate scopes by id (:class:`LoopScope`)
    loops: dict[int, LoopScope] = field(factory=dict)
    #: what the driver runs per micro-batch, in order: root boundaries (their node) and
    #: loops (:class:`Loop`)
    items: list[Item] = field(factory=list)
    #: the plan has frontier operators, which may give records at later times
    delays: bool = False
    #: pairs ``(a, b)``, ``a < b``, of root boundaries fed by the same waves with the
    #: same bin count: where a task routes the same records to both alike, they cross
    #: the exchange once (:func:`~tstate.spark.records.encode_groups`)
    twins: list[tuple[int, int]] = field(factory=list)
    #: the classes records may cross an exchange as (:mod:`tstate.spark.record_types`):
    #: shipped to every task with the plan
    records: RecordTypes = field(factory=lambda: BUILTIN)
    _routers: dict[int, KeyRouter] = field(factory=dict, repr=False)
    _fused: dict[int, Any] = field(factory=dict, repr=False)

    @classmethod
    def of(cls, flow: "Planned") -> "Plan":
        """Lower ``flow``'s plan (``flow.graph``); raises :class:`SparkError` for an
        operator Spark cannot run."""
        graph = flow.graph
        nodes, loops = _lower_nodes(graph)
        inputs = {op.name: i for i, op in graph if isinstance(op, Input)}
        boundaries = [i for i, n in nodes.items() if n.boundary]
        sinks = [i for i, op in graph if isinstance(op, Sink)]
        plan = cls(flow.name, nodes, inputs, boundaries, sinks, {}, {}, loops)
        plan.delays = any(isinstance(op, Frontier) for _i, op in graph)
        plan.records = RecordTypes.of(graph, flow.registered_record_types)
        for wave, start in [*((name, i) for name, i in inputs.items()), *((b, b) for b in boundaries)]:
            reach_b, reach_s = plan._reach(start)
            plan.sink_reach[wave] = reach_s
            for b in reach_b:
                plan.feeders.setdefault(b, []).append(wave)
        plan._place_loops()
        roots = [b for b in boundaries if nodes[b].loop is None]
        plan.twins = [
            (a, b) for i, a in enumerate(roots) for b in roots[i + 1 :]
            if nodes[a].bins == nodes[b].bins and sorted(map(str, plan.feeders.get(a, ())))
            == sorted(map(str, plan.feeders.get(b, ())))
        ]
        plan._check_loops(graph)
        return plan

    def _place_loops(self) -> None:
        """:attr:`items` in topological order: each root boundary, and each loop (with
        its boundaries and the waves feeding it) where its first boundary is."""
        placed: set[int] = set()
        for b in self.boundaries:
            lid = self.nodes[b].loop
            if lid is None:
                self.items.append(b)
                continue
            lp = self.loops[lid]
            lp.boundaries.append(b)
            for w in self.feeders.get(b, ()):
                inside = not isinstance(w, str) and self.nodes[w].loop == lid
                if not inside and w not in lp.feeders:
                    lp.feeders.append(w)
            if lid not in placed:
                placed.add(lid)
                self.items.append(Loop(lid))

    def _check_loops(self, graph: Any) -> None:
        """Every loop can run in rounds: it has a boundary, and no feedback comes back to
        itself without passing one."""
        for lp in self.loops.values():
            if not lp.boundaries:
                raise SparkError(
                    f"iterate scope {lp.name!r} has no stateful operator or exchange: on Spark a loop runs in rounds of "
                    "its keyed operators, so its body needs at least one"
                )
        for i, op in graph:
            if isinstance(op, Feedback) and i in self._reach_loopless(i):
                raise SparkError(
                    f"iterate scope {op.scope.name!r}: feedback {op.name!r} comes back to itself without passing a "
                    "stateful operator or exchange, which the Spark backend needs to run the loop in rounds"
                )

    def _reach_loopless(self, start: int) -> set[int]:
        """Nodes reached from ``start`` without crossing a boundary."""
        seen: set[int] = set()
        todo = [c for c, _ in self.nodes[start].consumers]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if not self.nodes[n].boundary:
                todo.extend(c for c, _ in self.nodes[n].consumers)
        return seen

    def _reach(self, start: int) -> tuple[list[int], list[int]]:
        """Boundaries and sinks reached from ``start``'s output without crossing a boundary."""
        seen = self._reach_loopless(start)
        sinks = set(self.sinks)
        return sorted(n for n in seen if self.nodes[n].boundary), sorted(n for n in seen if n in sinks)

    def router(self, node: int) -> KeyRouter:
        """The key -> bin router of a boundary.  Shared by every plan in this process
        with the same bin count and key hash, so an executor's memo of hashed keys outlives the
        micro-batch (a plan is shipped afresh with every batch)."""
        r = self._routers.get(node)
        if r is None:
            bins = self.nodes[node].bins
            hasher = hasher_of(self.nodes[node].key)
            r = _SHARED_ROUTERS.get((bins, hasher))
            if r is None:
                r = _SHARED_ROUTERS[bins, hasher] = KeyRouter(bins, hasher=hasher)
            self._routers[node] = r
        return r

    def push_from(
        self, node: int, time: Any, records: list[Any]
    ) -> tuple[dict[tuple[int, int, Any], list[Any]], dict[tuple[int, Any], list[Any]]]:
        """Push ``records`` at ``time`` out of ``node`` through the fused stateless chain.

        Returns ``routed[(boundary, bin, time)]`` (records for a boundary's shuffle) and
        ``sinks[(sink, time)]`` (records that reached a sink)."""
        routed: dict[tuple[int, int, int], list[Any]] = {}
        sinks: dict[tuple[int, int], list[Any]] = {}
        self._push(node, time, records, routed, sinks)
        return routed, sinks

    def push(
        self,
        node: int,
        time: Any,
        records: list[Any],
        routed: dict[tuple[int, int, int], list[Any]],
        sinks: dict[tuple[int, int], list[Any]],
    ) -> None:
        """:meth:`push_from`, adding to ``routed`` and ``sinks``."""
        self._push(node, time, records, routed, sinks)

    def _push(
        self,
        node: int,
        t: Any,
        recs: list[Any],
        routed: dict[tuple[int, int, int], list[Any]],
        sinks: dict[tuple[int, int], list[Any]],
    ) -> None:
        if not recs:
            return
        keyed: dict[Any, list[int]] = {}  # (key, bins) -> the records' bins, for boundaries keyed alike
        for c, port in self.nodes[node].consumers:
            n = self.nodes[c]
            op = n.op
            if isinstance(op, (Stateful, Exchange)):  # a boundary: its shuffle
                self._route(n, t, recs, routed, keyed)
            elif op is None:  # a sink
                sinks.setdefault((c, t), []).extend(recs)
            elif isinstance(op, Stateless):
                self._push(c, t, _apply(op, t, recs), routed, sinks)
            elif isinstance(op, Enter):
                self._push(c, op.time_inside(t), recs, routed, sinks)
            elif isinstance(op, Leave):
                self._push(c, op.time_outside(t), recs, routed, sinks)
            elif isinstance(op, Feedback):
                t2 = op.next_time(t)
                if t2 is not None:  # past the limit: dropped
                    self._push(c, t2, recs, routed, sinks)
            else:
                assert isinstance(op, Frontier)
                for t2, out in self._fused_op(c, op).run(port, t, recs).items():
                    self._push(c, t2, out, routed, sinks)

    def _fused_op(self, node: int, op: Frontier) -> Any:
        fused = self._fused.get(node)
        if fused is None:
            from tstate.spark.frontier import FusedFrontier

            fused = self._fused[node] = FusedFrontier(op)
        return fused

    def _route(
        self,
        n: PlanNode,
        t: int,
        recs: list[Any],
        routed: dict[tuple[int, int, int], list[Any]],
        keyed: Optional[dict[Any, list[int]]] = None,
    ) -> None:
        from tstate.errors import KeyFunctionError

        key = n.key
        assert key is not None
        sig = (_key_signature(key), n.bins)
        bins = keyed.get(sig) if keyed is not None else None
        if bins is None:
            bin_of = self.router(n.node).bin
            r: Any = None
            bins = []
            try:
                for r in recs:
                    bins.append(bin_of(key(r)))
            except KeyFunctionError as exc:
                raise KeyFunctionError(f"operator {n.name!r}: record {r!r} at time {t!r}: {exc}") from None
            except Exception as exc:
                raise KeyFunctionError(
                    f"operator {n.name!r}: the key function raised {type(exc).__name__}: {exc} on record {r!r} at time {t!r}"
                ) from None
            if keyed is not None:
                keyed[sig] = bins
        node = n.node
        for r, b in zip(recs, bins):
            lst = routed.get((node, b, t))
            if lst is None:
                routed[node, b, t] = [r]
            else:
                lst.append(r)


def _lower_nodes(graph: Any) -> tuple[dict[int, PlanNode], dict[int, LoopScope]]:
    """Every node of ``graph`` as the tasks need it (:func:`_check_node`), and the
    iterate scopes by id (the index of the scope's first node)."""
    nodes: dict[int, PlanNode] = {}
    loops: dict[int, LoopScope] = {}
    loop_of: dict[int, int] = {}  # id(scope) -> loop id
    for i, op in graph:
        _check_node(op)
        n = PlanNode(i, op.name, None if isinstance(op, (Input, Sink)) else op)
        if op.scope.depth == 1:
            lid = loop_of.get(id(op.scope))
            if lid is None:
                lid = loop_of[id(op.scope)] = i
                loops[lid] = LoopScope(lid, op.scope.name)
            n.loop = lid
        nodes[i] = n
    for i, _op in graph:
        for port, src in enumerate(graph.sources(i)):
            assert src is not None
            nodes[src[0]].consumers.append((i, port))
    return nodes, loops


def _check_node(op: Node) -> None:
    """``op`` is something the Spark backend runs, else a :class:`SparkError` naming it."""
    if not isinstance(op, SUPPORTED):
        raise SparkError(
            f"operator {op.name!r} ({op.kind}) cannot run on the Spark backend: it runs inputs bound to "
            "DataFrames, map, filter, flat_map, inspect, exchange, concat, stateful, fold_bins, iterate scopes, "
            "frontier operators without per-worker state, and sinks"
        )
    depth = op.scope.depth
    if depth > 1:
        raise SparkError(
            f"operator {op.name!r} is in a nested iterate scope ({op.scope.name!r}): the Spark backend runs "
            "one level of iterate scopes"
        )
    if isinstance(op, Frontier):
        if any(p is not None for p in op.pacts()):
            raise SparkError(
                f"operator {op.name!r} ({op.kind}) exchanges its input by key: on Spark a frontier operator "
                "runs fused where its records are; exchange the stream first (stream.exchange(key))"
            )
        if op.state is not None:
            raise SparkError(
                f"operator {op.name!r} ({op.kind}) keeps per-worker state (state=...), which does not survive a "
                "Spark task: keep state in @flow.stateful, whose bins Spark checkpoints"
            )
    elif isinstance(op, Sink) and depth:
        raise SparkError(f"sink {op.name!r} is inside iterate scope {op.scope.name!r}: leave the scope first")


def _key_signature(key: Any) -> Any:
    """What identifies a key function's results: the function itself, or for the
    ``operator`` module's getters (``attrgetter("origin")``, built anew by each caller)
    their type and arguments, which their ``repr`` spells."""
    import operator

    if type(key) in (operator.attrgetter, operator.itemgetter):
        return (type(key), repr(key))
    try:
        hash(key)
    except TypeError:  # an unhashable callable: itself only
        return ("id", id(key))
    return key


def _apply(op: Stateless, t: Any, recs: list[Any]) -> list[Any]:
    """One stateless operator over a batch, by the node's own rule; a user function
    that raises becomes an :class:`~tstate.errors.OperatorError` naming the operator,
    time and record."""
    try:
        return op.apply(t, recs)
    except Exception as exc:
        bad = op.failing_record(t, recs)
        raise OperatorError(
            f"operator {op.name!r} ({op.kind}) at time {t!r} raised {type(exc).__name__}: {exc} (record {bad!r})"
        ) from exc
