"""Lowering a dataflow for Spark: which operators become shuffles, and the fused
stateless chains between them.

The logical graph is cut at every *boundary*: an operator whose input is exchanged by
key (``stateful`` / ``fold_bins``, ``exchange``).  Everything between boundaries is
*fused*: records are pushed through it in the task that produced them, up to the next
boundary (where they are grouped by ``(boundary, bin, time)`` for the shuffle) or a
sink -- the stateless operators (``map``, ``filter``, ``flat_map``, ``inspect``,
``concat``), the edges of iterate scopes (``enter``, ``leave``, ``feedback``: they only
re-time records) and frontier operators that keep nothing between activations
(:mod:`tstate.spark.frontier`).  Each boundary becomes one Spark shuffle onto the
partitions that own its bins, then one task per partition.

An iterate scope becomes a :class:`Loop`: its boundaries run in *rounds* within the
micro-batch until the loop's times of the batch are done (:mod:`tstate.spark.rounds`);
every cycle must pass a boundary.  The driver runs :attr:`Plan.items` in order: root
boundaries and loops, topologically.

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
>>> [plan.nodes[b].kind for b in plan.boundaries], plan.inputs
(['stateful'], {'words': 0})
>>> routed, sinks = plan.push_from(0, 7, ["A", "b", "a"])
>>> sorted((plan.nodes[node].name, t, recs) for (node, _bin, t), recs in routed.items())
[('count', 7, ['a', 'a']), ('count', 7, ['b'])]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from attrs import define, field

from tstate.errors import SparkError
from tstate.keys import KeyRouter
from tstate.spark.record_types import BUILTIN, RecordTypes

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Dataflow

__all__ = ["Plan", "PlanNode", "Loop"]

#: bin count -> router, per process (see Plan.router)
_SHARED_ROUTERS: dict[int, KeyRouter] = {}

STATELESS = ("map", "filter", "flat_map", "inspect", "concat")
BOUNDARIES = ("stateful", "exchange")
#: iterate-scope edges: they only re-time records
SCOPE_EDGES = ("enter", "leave", "feedback")
FRONTIER = ("unary_frontier", "binary_frontier")
SUPPORTED = ("input", "sink", *STATELESS, *BOUNDARIES, *SCOPE_EDGES, *FRONTIER)


@define
class PlanNode:
    """One operator as the Spark tasks need it (no runtime objects, no sinks' buffers:
    this is what is shipped to executors)."""

    node: int
    name: str
    kind: str
    fn: Optional[Callable[..., Any]] = None
    #: consumers: (node, input port)
    consumers: list[tuple[int, int]] = field(factory=list)
    #: boundaries: the exchange key and bin count
    key: Optional[Callable[[Any], Any]] = None
    bins: int = 0
    #: stateful operators: what a task needs to rebuild the operator
    options: dict[str, Any] = field(factory=dict)
    #: the iterate scope the operator is in (None: the root), by its enter nodes' first index
    loop: Optional[int] = None
    #: the plan node (tstate.plan): its per-batch rule
    spec: Any = None


@define
class Loop:
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
    #: iterate scopes by id (:class:`Loop`)
    loops: dict[int, Loop] = field(factory=dict)
    #: what the driver runs per micro-batch, in order: root boundaries (an int) and
    #: loops (``("loop", id)``)
    items: list[Any] = field(factory=list)
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
    def of(cls, flow: "Dataflow") -> "Plan":
        """Lower ``flow``; raises :class:`SparkError` for an operator Spark cannot run."""
        specs = flow._nodes
        nodes: dict[int, PlanNode] = {}
        loops: dict[int, Loop] = {}
        loop_of: dict[int, int] = {}  # id(scope) -> loop id
        for s in specs:
            if s.kind not in SUPPORTED:
                raise SparkError(
                    f"operator {s.name!r} ({s.kind}) cannot run on the Spark backend: it runs inputs bound to "
                    "DataFrames, map, filter, flat_map, inspect, exchange, concat, stateful, fold_bins, iterate scopes, "
                    "frontier operators without per-worker state, and sinks"
                )
            depth = s.scope.depth
            if depth > 1:
                raise SparkError(
                    f"operator {s.name!r} is in a nested iterate scope ({s.scope.name!r}): the Spark backend runs "
                    "one level of iterate scopes"
                )
            o = s.options
            n = PlanNode(s.index, s.name, s.kind, spec=s.spec)
            if depth == 1:
                lid = loop_of.get(id(s.scope))
                if lid is None:
                    lid = loop_of[id(s.scope)] = s.index
                    loops[lid] = Loop(lid, s.scope.name)
                n.loop = lid
            if s.kind in ("map", "filter", "flat_map", "inspect"):
                n.fn = o["fn"]
            elif s.kind == "feedback":
                n.options = {"step": o["step"], "max_iterations": o["max_iterations"], "sequenced": o.get("sequenced")}
            elif s.kind == "enter":
                n.options = {"sequenced": o.get("sequenced")}
            elif s.kind in FRONTIER:
                if any(p is not None for p in s.pacts):
                    raise SparkError(
                        f"operator {s.name!r} ({s.kind}) exchanges its input by key: on Spark a frontier operator runs "
                        "fused where its records are; exchange the stream first (stream.exchange(key))"
                    )
                if o.get("state") is not None:
                    raise SparkError(
                        f"operator {s.name!r} ({s.kind}) keeps per-worker state (state=...), which does not survive a "
                        "Spark task: keep state in @flow.stateful, whose bins Spark checkpoints"
                    )
                n.fn = o["logic"]
                n.options = {"inputs": len(s.inputs)}
            elif s.kind == "sink" and depth:
                raise SparkError(f"sink {s.name!r} is inside iterate scope {s.scope.name!r}: leave the scope first")
            elif s.kind in BOUNDARIES:
                pact = s.pacts[0]
                assert pact is not None
                n.key, n.bins = pact.key, pact.bins
                if s.kind == "stateful":
                    n.options = {
                        k: o[k] for k in ("fn", "key", "state_type", "new_state", "bins", "handlers", "fold")
                    }
            nodes[s.index] = n
        for s in specs:
            for port, src in enumerate(s.inputs):
                assert src is not None
                nodes[src[0]].consumers.append((s.index, port))
        inputs = {s.name: s.index for s in specs if s.kind == "input"}
        boundaries = [s.index for s in specs if s.kind in BOUNDARIES]
        sinks = [s.index for s in specs if s.kind == "sink"]
        plan = cls(flow.name, nodes, inputs, boundaries, sinks, {}, {}, loops)
        plan.delays = any(s.kind in FRONTIER for s in specs)
        plan.records = RecordTypes.of(flow)
        for wave, start in [*((name, i) for name, i in inputs.items()), *((b, b) for b in boundaries)]:
            reach_b, reach_s = plan._reach(start)
            plan.sink_reach[wave] = reach_s
            for b in reach_b:
                plan.feeders.setdefault(b, []).append(wave)
        placed: set[int] = set()
        for b in boundaries:
            lid = nodes[b].loop
            if lid is None:
                plan.items.append(b)
                continue
            lp = loops[lid]
            lp.boundaries.append(b)
            for w in plan.feeders.get(b, ()):
                inside = not isinstance(w, str) and nodes[w].loop == lid
                if not inside and w not in lp.feeders:
                    lp.feeders.append(w)
            if lid not in placed:
                placed.add(lid)
                plan.items.append(("loop", lid))
        roots = [b for b in boundaries if nodes[b].loop is None]
        plan.twins = [
            (a, b) for i, a in enumerate(roots) for b in roots[i + 1 :]
            if nodes[a].bins == nodes[b].bins and sorted(map(str, plan.feeders.get(a, ())))
            == sorted(map(str, plan.feeders.get(b, ())))
        ]
        for lp in loops.values():
            if not lp.boundaries:
                raise SparkError(
                    f"iterate scope {lp.name!r} has no stateful operator or exchange: on Spark a loop runs in rounds of "
                    "its keyed operators, so its body needs at least one"
                )
        for s in specs:
            if s.kind == "feedback" and s.index in plan._reach_loopless(s.index):
                raise SparkError(
                    f"iterate scope {s.scope.name!r}: feedback {s.name!r} comes back to itself without passing a "
                    "stateful operator or exchange, which the Spark backend needs to run the loop in rounds"
                )
        return plan

    def _reach_loopless(self, start: int) -> set[int]:
        """Nodes reached from ``start`` without crossing a boundary."""
        seen: set[int] = set()
        todo = [c for c, _ in self.nodes[start].consumers]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if self.nodes[n].kind not in BOUNDARIES:
                todo.extend(c for c, _ in self.nodes[n].consumers)
        return seen

    def _reach(self, start: int) -> tuple[list[int], list[int]]:
        """Boundaries and sinks reached from ``start``'s output without crossing a boundary."""
        seen = self._reach_loopless(start)
        kinds = {n: self.nodes[n].kind for n in seen}
        return sorted(n for n, k in kinds.items() if k in BOUNDARIES), sorted(n for n, k in kinds.items() if k == "sink")

    def router(self, node: int) -> KeyRouter:
        """The key -> bin router of a boundary.  Shared by every plan in this process
        with the same bin count, so an executor's memo of hashed keys outlives the
        micro-batch (a plan is shipped afresh with every batch)."""
        r = self._routers.get(node)
        if r is None:
            bins = self.nodes[node].bins
            r = _SHARED_ROUTERS.get(bins)
            if r is None:
                r = _SHARED_ROUTERS[bins] = KeyRouter(bins)
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
            kind = n.kind
            if kind in BOUNDARIES:
                self._route(n, t, recs, routed, keyed)
            elif kind == "sink":
                sinks.setdefault((c, t), []).extend(recs)
            elif kind == "concat":
                self._push(c, t, recs, routed, sinks)
            elif kind == "enter":
                self._push(c, n.spec.time_inside(t), recs, routed, sinks)
            elif kind == "leave":
                self._push(c, t.outer, recs, routed, sinks)
            elif kind == "feedback":
                t2 = n.spec.next_time(t)
                if t2 is not None:  # past the limit: dropped
                    self._push(c, t2, recs, routed, sinks)
            elif kind in FRONTIER:
                for t2, out in self._fused_op(n).run(port, t, recs).items():
                    self._push(c, t2, out, routed, sinks)
            else:
                self._push(c, t, _apply(n, t, recs), routed, sinks)

    def _fused_op(self, n: PlanNode) -> Any:
        op = self._fused.get(n.node)
        if op is None:
            from tstate.spark.frontier import FusedFrontier

            assert n.fn is not None
            op = self._fused[n.node] = FusedFrontier(n.name, n.fn, n.options["inputs"])
        return op

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


def _apply(n: PlanNode, t: int, recs: list[Any]) -> list[Any]:
    """One stateless operator over a batch; a user function that raises becomes an
    :class:`~tstate.errors.OperatorError` naming the operator, time and record."""
    from tstate.errors import OperatorError

    try:
        return n.spec.apply(t, recs)  # type: ignore[no-any-return]
    except Exception as exc:
        bad = n.spec.failing_record(t, recs)
        raise OperatorError(
            f"operator {n.name!r} ({n.kind}) at time {t!r} raised {type(exc).__name__}: {exc} (record {bad!r})"
        ) from exc
