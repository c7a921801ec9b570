"""An execution of a dataflow on N logical workers in one process.

Every worker has its own instance of every operator.  A *step* visits the workers in
order and, on each, the operators in graph order, activating those with queued input,
a moved input frontier, or a pending request.  Pointstamp changes are propagated
through the reachability tracker in front of every operator that reads its frontier
(so it sees every change made before it) and at the end of the step; operators whose
input frontier moved are flagged on every worker.  Operators that never read a
frontier (stateless ones, scope boundaries, inputs, probes) run on without a
propagation in between: their changes are applied together, and changes that cancel
(a batch passed on at the same time) cost the tracker nothing.  Scheduling is deterministic: the same
dataflow and inputs give the same run, batch for batch.

:meth:`Execution.run` steps until nothing is left to do.  If pointstamps remain then, the
dataflow cannot finish: an open input or a leaked capability is reported as a
:class:`~tstate.errors.CapabilityLeakError` naming the operator and time — never a hang.
A user function that raises becomes an :class:`~tstate.errors.OperatorError` naming the
operator, the worker and the time, with the original exception as its cause.
"""

from __future__ import annotations

from time import monotonic
from typing import Any, Callable, Optional

from tstate.engine.channels import ExchangeRouter, OutputPort
from tstate.engine.checkpointing.coordinator import Coordinator
from tstate.engine.lowering import runtime
from tstate.engine.precopy import PreCopy
from tstate.engine.reconfiguring import Reconfiguring
from tstate.errors import CapabilityLeakError, ConfigurationError, OperatorError, TstateError
from tstate.io.inputs import InputHandle
from tstate.metrics import Metrics
from tstate.migration.configuration import ConfigHistory
from tstate.migration.planner import balanced_map
from tstate.migration.routing import ConfiguredOwners
from tstate.operators.base import OperatorRuntime
from tstate.operators.local_rounds import LocalReturn
from tstate.operators.stateful import StatefulRuntime
from tstate.plan import Frontier, Graph, Input, Node, Pact, Probe, Sink, Source, Stateful
from tstate.plan.local_rounds import local_loop
from tstate.progress.frontier import Antichain
from tstate.progress.reachability import GraphBuilder, Tracker
from tstate.progress.shared import SharedProgress

__all__ = ["Execution"]


def _state_stores(state: Any, name: str) -> Any:
    """Where workers keep keyed state for ``state``: None (the heap) or the RocksDB
    databases of a :class:`~tstate.state.rocksdb.settings.RocksDB` setting."""
    if state is None:
        return None
    from tstate.state.rocksdb.run_stores import RunStores  # loaded only with state=RocksDB(...)
    from tstate.state.rocksdb.settings import RocksDB

    if not isinstance(state, RocksDB):
        raise ConfigurationError(f"state={state!r}: give tstate.RocksDB(path, ...) or None (the heap)")
    return RunStores(state, name)


class Execution(Reconfiguring):
    """A running dataflow (see the module docstring): the plan ``graph`` lowered to one
    runtime per node and worker.  Create with :meth:`tstate.Dataflow.start`."""

    #: propagate after every activation, as tstate did before propagating only in front
    #: of frontier readers (the same results, more tracker work; ``benchmarks.loops``
    #: compares the two)
    eager_propagation = False

    def __init__(
        self, graph: Graph, workers: int, max_workers: Optional[int] = None, checkpoint: Any = None, state: Any = None,
        stores: Any = None,
    ) -> None:
        graph.validate()
        #: where workers keep keyed state: None (the heap) or a
        #: :class:`~tstate.state.rocksdb.settings.RocksDB` setting (one database per
        #: worker, opened on first use, closed with the execution: :meth:`close`); or
        #: ``stores``, worker stores made elsewhere (anything with ``keyed_store(worker,
        #: name, codec)`` and ``close()``: a Spark executor's, :mod:`tstate.spark.rocks_bins`)
        self.state_stores: Any = stores if stores is not None else _state_stores(state, graph.name)
        self.graph = graph
        self.name = graph.name
        #: the worker pool: every operator has an instance on each
        self.workers = max(workers, max_workers or workers)
        #: the workers stateful operators spread their bins over at the start
        self.initial_workers = workers
        self.finished = False
        self.metrics = Metrics()
        self.tracker: Tracker = self._build_tracker()
        self._progress = [SharedProgress(self.tracker, i, node.arity) for i, node in graph]
        self._inputs: list[InputHandle] = [n.handle for _, n in graph.of_type(Input)]
        self.checkpointing = checkpoint is not None
        self.coordinator: Any = None
        self.restored: Any = None
        if checkpoint is not None:
            for _, fr in graph.of_type(Frontier):
                if fr.state is not None:
                    raise ConfigurationError(
                        f"operator {fr.name!r} keeps local state (state=...) that checkpoints cannot capture: "
                        "keep state in @flow.stateful operators to use checkpoints"
                    )
            self.coordinator = Coordinator(self, checkpoint)  # checks the directory before anything runs
        self.configs: dict[int, ConfigHistory] = {
            i: ConfigHistory(balanced_map(n.bins, workers)) for i, n in graph.of_type(Stateful)
        }
        self._routers: dict[int, Any] = {}
        self._owners: dict[int, ConfiguredOwners] = {}
        #: the pre-copy moves (strategy="precopy"): preloaded bins, hand-over deltas, stats
        self.precopy = PreCopy(self)
        #: per stateful operator: key -> bin, shared by its workers (a bin's keys never
        #: change, so a move leaves it as it is: tstate.operators.stateful)
        self.key_bins: dict[int, dict[Any, int]] = {}
        self.operators: list[list[OperatorRuntime[Any]]] = [
            [runtime(self, i, node, w) for i, node in graph] for w in range(self.workers)
        ]
        self._by_node = [[self.operators[w][n] for w in range(self.workers)] for n in range(len(graph))]
        self._wire()
        self._restore()
        self._sources: Optional[list[OperatorRuntime[Any]]] = None
        self._ends: Optional[list[int]] = None
        self.steps = 0
        #: operator activations so far
        self.activations = 0
        for w in range(self.workers):
            for op in self.operators[w]:
                op.on_start()
        self._propagate()

    # -- construction -------------------------------------------------------------
    def _restore(self) -> None:
        """Resume from the newest usable checkpoint, if checkpointing (inputs resume at
        its time, sinks forget what came after it)."""
        if self.coordinator is None:
            return
        self.restored = self.coordinator.restore()
        if self.restored is not None:
            t = self.restored.time
            for h in self._inputs:
                if type(h.time) is int and h.time < t:
                    h.time = t  # the input resumes at the checkpoint's time
            for _, snk in self.graph.of_type(Sink):
                snk.sink.restore(t)

    def _build_tracker(self) -> Tracker:
        return self._graph().build()

    def _graph(self) -> GraphBuilder:
        """The dataflow's operators and edges, for a progress tracker to be built from."""
        b = GraphBuilder()
        for i, node in self.graph:
            b.add_node(
                i, node.name, node.arity, node.outputs, node.summaries(), node.scope.depth,
                node.input_depths(), node.output_depths(),
            )
        for i, _node in self.graph:
            for port, src in enumerate(self.graph.sources(i)):
                if src is not None:
                    b.add_edge(src, (i, port))
        return b

    def _wire(self) -> None:
        graph = self.graph
        ports: dict[tuple[int, int], list[OutputPort]] = {}
        for w in range(self.workers):
            for i, node in graph:
                ports[w, i] = [OutputPort(i, o, w) for o in range(node.outputs)]
                self.operators[w][i].outputs = list(ports[w, i])
        # local_rounds operators apply the first stretch of their way back themselves
        loops = {i: local_loop(graph, i) for i, node in graph.of_type(Stateful) if node.local_rounds}
        skipped = {lp.first for lp in loops.values()}
        for i, node in graph:
            pacts = node.pacts()
            for port, src in enumerate(graph.sources(i)):
                assert src is not None  # checked by graph.validate()
                if (i, port) in skipped and src[0] in loops and loops[src[0]].first == (i, port):
                    continue
                pact = pacts[port]
                router: Optional[ExchangeRouter] = None
                if pact is not None:
                    router = self.make_router(i, node, pact)
                inboxes = [self.operators[w][i].inboxes[port] for w in range(self.workers)]
                for w in range(self.workers):
                    ports[w, src[0]][src[1]].connect(inboxes, self._progress[i], port, router)
        for i, lp in loops.items():
            inboxes = [self.operators[w][i].inboxes[0] for w in range(self.workers)]
            for w in range(self.workers):
                op = self.operators[w][i]
                assert isinstance(op, StatefulRuntime)
                op.local = LocalReturn(
                    lp, self._routers[i], inboxes, self._progress[i], w, self.metrics.loop_round, op.name
                )

    def make_router(self, index: int, node: Node, pact: Pact) -> ExchangeRouter:
        """The router of an exchange channel: by bin, over the worker pool; in front of
        a stateful operator, by the operator's configuration over time."""
        if isinstance(node, Stateful):
            owners = ConfiguredOwners(self.configs[index])
            router = ExchangeRouter(pact.key, self.workers, pact.bins, node.name, owners)
            self._routers[index] = router
            self._owners[index] = owners
            return router
        return ExchangeRouter(pact.key, self.workers, pact.bins, node.name)

    # -- what operators ask (tstate.operators.base.Host) ------------------------------
    def keyed_store(self, worker: int, name: str, codec: Any) -> Any:
        """Operator ``name``'s keyed-state store on ``worker`` (None: on the heap)."""
        return None if self.state_stores is None else self.state_stores.keyed_store(worker, name, codec)

    def close(self) -> None:
        """Close the workers' RocksDB stores (if any) and remove their files: the
        execution's state cannot be read after this."""
        if self.state_stores is not None:
            self.state_stores.close()

    def progress(self, node: int) -> SharedProgress:
        """Node ``node``'s progress interface."""
        return self._progress[node]

    def peer(self, worker: int, node: int) -> OperatorRuntime[Any]:
        """Node ``node``'s instance on ``worker``."""
        return self.operators[worker][node]

    # -- what state queries read (tstate.state.query.Queryable) -----------------------
    def keyed_state(self, node: int) -> Optional[list[Any]]:
        """Stateful node ``node``'s instance on every worker (None: not stateful)."""
        if not isinstance(self.graph[node], Stateful):
            return None
        return [self.operators[w][node] for w in range(self.workers)]

    def node_name(self, node: int) -> str:
        return self.graph[node].name

    # -- driving ------------------------------------------------------------------
    def _propagate(self) -> None:
        changed = self.tracker.propagate()
        for node, _port in changed:
            for op in self._by_node[node]:
                op.frontier_changed = True

    def step(self) -> bool:
        """One round over all workers and operators; True if any operator ran."""
        if self.finished:
            return False
        self._observe_inputs()
        did = False
        tracker = self.tracker
        eager = self.eager_propagation
        for ops in self.operators:
            for op in ops:
                if op.reads_frontier and tracker.has_pending():
                    self._propagate()  # it sees every change made before it
                if op.needs_activation():
                    op.woke_by_frontier = op.frontier_changed
                    op.frontier_changed = False
                    op.requested = False
                    did = True
                    self.activations += 1
                    try:
                        op.activate()
                    except TstateError:
                        raise
                    except Exception as exc:
                        raise OperatorError(
                            f"operator {op.name!r} on worker {op.worker} at time {op.current_time!r} raised "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                    if eager:
                        self._propagate()
        self._propagate()
        self.steps += 1
        self._observe_outputs()
        if self.coordinator is not None:
            self.coordinator.after_step()
        if self.precopy.pending:
            self.precopy.step()
        return did

    # -- metrics ------------------------------------------------------------------
    def _observe_inputs(self) -> None:
        times = [h.time for h in self._inputs if not h.closed]
        sources = self._sources
        if sources is None:  # worker 0's source runtimes: found once
            sources = self._sources = [op for op in self.operators[0] if isinstance(op.node, Source)]
        for op in sources:
            cap = getattr(op, "cap", None)
            if cap is not None:
                times.append(cap.time)
        self.metrics.inputs_at(min(times) if times else None)

    def _observe_outputs(self) -> None:
        ends = self._ends
        if ends is None:  # the root-scope sinks and probes: found once
            ends = self._ends = [i for i, n in self.graph if isinstance(n, (Sink, Probe)) and n.scope.depth == 0]
        if not ends:
            return
        frontier = self.tracker.frontier
        fronts = [t for n in ends for t in frontier(n, 0)]
        self.metrics.outputs_at(min(fronts) if fronts else None)

    def run(self, max_steps: Optional[int] = None) -> None:
        """Step until the dataflow is complete (see the module docstring)."""
        self._drive(lambda n: max_steps is not None and n >= max_steps)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """:class:`~tstate.backend.Started`'s wait: :meth:`run`, or step until
        ``timeout`` seconds passed; True if the dataflow is complete."""
        if timeout is None:
            self.run()
            return True
        deadline = monotonic() + timeout
        self._drive(lambda _n: monotonic() >= deadline)
        return self.finished

    def stop(self) -> None:
        """:class:`~tstate.backend.Started`'s stop: no step runs after it (``finished``);
        checkpoints still being written are abandoned, committed ones stay."""
        if not self.finished:
            if self.coordinator is not None:
                self.coordinator.abort()
            self.finished = True

    def _drive(self, enough: Callable[[int], bool]) -> None:
        """Step until there is nothing left to do, then finish; or stop when
        ``enough(steps so far)``.  A failure abandons uncommitted checkpoints."""
        n = 0
        try:
            while self.step():
                n += 1
                if enough(n):
                    return
            self._finish()
        except BaseException:
            if self.coordinator is not None:
                self.coordinator.abort()
            raise

    def step_while(self, condition: Callable[[], bool]) -> None:
        """Step while ``condition()`` holds and there is work to do."""
        while condition() and self.step():
            pass

    def _finish(self) -> None:
        if self.finished:
            return
        if not self.tracker.is_idle():
            raise CapabilityLeakError(_stuck_message(self))
        for ops in self.operators:
            for op in ops:
                op.on_finish()
        if self.coordinator is not None:
            self.coordinator.finish()  # after the sinks flushed (and the last cut made)
        if self.state_stores is not None:
            self.state_stores.settle()  # a write a cut queued and that failed is raised here
        self.finished = True

    def frontier(self, node: int, port: int = 0) -> Antichain:
        """The frontier at input ``port`` of node ``node``."""
        return self.tracker.frontier(node, port)


def _stuck_message(ex: Execution) -> str:
    """Why ``ex`` cannot finish: an open input, a leaked capability, or the pointstamps left."""
    open_inputs = [h for h in ex._inputs if not h.closed]
    if open_inputs:
        names = ", ".join(f"{h.name!r} (at time {h.time!r})" for h in open_inputs)
        return (
            f"dataflow {ex.name!r} cannot finish: input {names} is still open; "
            "close() it before run(), or drive the dataflow with step()"
        )
    holders = []
    for ops in ex.operators:
        for op in ops:
            if op._held:
                holders.append(f"{op.name!r} on worker {op.worker} holds capabilities at {op.held_times()!r}")
    if holders:
        return f"dataflow {ex.name!r} cannot finish: capability leaked: " + "; ".join(holders)
    return f"dataflow {ex.name!r} cannot finish: pointstamps remain {ex.tracker.pointstamps()!r}"

