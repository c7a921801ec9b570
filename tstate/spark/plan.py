"""Lowering a dataflow for Spark: which operators become shuffles, and the fused
stateless chains between them.

The logical graph is cut at every *boundary*: an operator whose input is exchanged by
key (``stateful`` / ``fold_bins``, ``exchange``).  Everything between boundaries is
stateless (``map``, ``filter``, ``flat_map``, ``inspect``, ``concat``) and is *fused*:
records are pushed through it in the task that produced them, up to the next boundary
(where they are grouped by ``(boundary, bin, time)`` for the shuffle) or a sink.  Each
boundary becomes one Spark shuffle onto the partitions that own its bins, then one task
per partition.

Only what the Spark backend can run is accepted; anything else (``unary_frontier``,
iterate scopes, ``source`` nodes, probes) raises :class:`~tstate.errors.SparkError`
naming the operator, when the run starts.

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

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Dataflow

__all__ = ["Plan", "PlanNode"]

#: bin count -> router, per process (see Plan.router)
_SHARED_ROUTERS: dict[int, KeyRouter] = {}

STATELESS = ("map", "filter", "flat_map", "inspect", "concat")
BOUNDARIES = ("stateful", "exchange")
SUPPORTED = ("input", "sink", *STATELESS, *BOUNDARIES)


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
    _routers: dict[int, KeyRouter] = field(factory=dict, repr=False)

    @classmethod
    def of(cls, flow: "Dataflow") -> "Plan":
        """Lower ``flow``; raises :class:`SparkError` for an operator Spark cannot run."""
        specs = flow._nodes
        nodes: dict[int, PlanNode] = {}
        for s in specs:
            if s.kind not in SUPPORTED:
                what = "an iterate scope" if s.kind in ("enter", "leave", "feedback", "handle") else s.kind
                raise SparkError(
                    f"operator {s.name!r} ({what}) cannot run on the Spark backend yet: it runs inputs bound to "
                    "DataFrames, map, filter, flat_map, inspect, exchange, concat, stateful, fold_bins and sinks"
                )
            if s.scope.depth != 0:  # pragma: no cover - scopes are rejected above
                raise SparkError(f"operator {s.name!r} is inside an iterate scope")
            o = s.options
            n = PlanNode(s.index, s.name, s.kind)
            if s.kind in ("map", "filter", "flat_map", "inspect"):
                n.fn = o["fn"]
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
        plan = cls(flow.name, nodes, inputs, boundaries, sinks, {}, {})
        for wave, start in [*((name, i) for name, i in inputs.items()), *((b, b) for b in boundaries)]:
            reach_b, reach_s = plan._reach(start)
            plan.sink_reach[wave] = reach_s
            for b in reach_b:
                plan.feeders.setdefault(b, []).append(wave)
        return plan

    def _reach(self, start: int) -> tuple[list[int], list[int]]:
        """Boundaries and sinks reached from ``start``'s output without crossing a boundary."""
        seen: set[int] = set()
        bounds: list[int] = []
        sinks: list[int] = []
        todo = [c for c, _ in self.nodes[start].consumers]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            kind = self.nodes[n].kind
            if kind in BOUNDARIES:
                bounds.append(n)
            elif kind == "sink":
                sinks.append(n)
            else:
                todo.extend(c for c, _ in self.nodes[n].consumers)
        return sorted(bounds), sorted(sinks)

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
        self, node: int, time: int, records: list[Any]
    ) -> tuple[dict[tuple[int, int, int], list[Any]], dict[tuple[int, int], list[Any]]]:
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
        time: int,
        records: list[Any],
        routed: dict[tuple[int, int, int], list[Any]],
        sinks: dict[tuple[int, int], list[Any]],
    ) -> None:
        """:meth:`push_from`, adding to ``routed`` and ``sinks``."""
        self._push(node, time, records, routed, sinks)

    def _push(
        self,
        node: int,
        t: int,
        recs: list[Any],
        routed: dict[tuple[int, int, int], list[Any]],
        sinks: dict[tuple[int, int], list[Any]],
    ) -> None:
        if not recs:
            return
        for c, _port in self.nodes[node].consumers:
            n = self.nodes[c]
            kind = n.kind
            if kind in BOUNDARIES:
                self._route(n, t, recs, routed)
            elif kind == "sink":
                sinks.setdefault((c, t), []).extend(recs)
            elif kind == "concat":
                self._push(c, t, recs, routed, sinks)
            else:
                self._push(c, t, _apply(n, t, recs), routed, sinks)

    def _route(self, n: PlanNode, t: int, recs: list[Any], routed: dict[tuple[int, int, int], list[Any]]) -> None:
        from tstate.errors import KeyFunctionError

        key = n.key
        assert key is not None
        bin_of = self.router(n.node).bin
        r: Any = None
        try:
            for r in recs:
                b = bin_of(key(r))
                lst = routed.get((n.node, b, t))
                if lst is None:
                    routed[n.node, b, t] = [r]
                else:
                    lst.append(r)
        except KeyFunctionError as exc:
            raise KeyFunctionError(f"operator {n.name!r}: record {r!r} at time {t!r}: {exc}") from None
        except Exception as exc:
            raise KeyFunctionError(
                f"operator {n.name!r}: the key function raised {type(exc).__name__}: {exc} on record {r!r} at time {t!r}"
            ) from None


def _apply(n: PlanNode, t: int, recs: list[Any]) -> list[Any]:
    """One stateless operator over a batch; a user function that raises becomes an
    :class:`~tstate.errors.OperatorError` naming the operator, time and record."""
    from tstate.errors import OperatorError

    fn = n.fn
    assert fn is not None
    kind = n.kind
    try:
        if kind == "map":
            return [fn(r) for r in recs]
        if kind == "filter":
            return [r for r in recs if fn(r)]
        if kind == "flat_map":
            return [x for r in recs for x in fn(r)]
        for r in recs:  # inspect
            fn(t, r)
        return recs
    except Exception as exc:
        bad = next((r for r in recs if _raises(n, t, r)), None)
        raise OperatorError(
            f"operator {n.name!r} ({kind}) at time {t!r} raised {type(exc).__name__}: {exc} (record {bad!r})"
        ) from exc


def _raises(n: PlanNode, t: int, r: Any) -> bool:
    try:
        _apply(n, t, [r])
    except Exception:
        return True
    return False
