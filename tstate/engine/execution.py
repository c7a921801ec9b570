"""An execution of a dataflow on N logical workers in one process.

Every worker has its own instance of every operator.  A *step* visits the workers in
order and, on each, the operators in graph order, activating those with queued input,
a moved input frontier, or a pending request; after each activation its pointstamp
changes are propagated through the reachability tracker, and operators whose input
frontier moved are flagged on every worker.  Scheduling is deterministic: the same
dataflow and inputs give the same run, batch for batch.

:meth:`Execution.run` steps until nothing is left to do.  If pointstamps remain then, the
dataflow cannot finish: an open input or a leaked capability is reported as a
:class:`~tstate.errors.CapabilityLeakError` naming the operator and time — never a hang.
A user function that raises becomes an :class:`~tstate.errors.OperatorError` naming the
operator, the worker and the time, with the original exception as its cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from tstate.engine.channels import ExchangeRouter, OutputPort
from tstate.errors import CapabilityLeakError, OperatorError, TstateError
from tstate.operators.base import OperatorRuntime
from tstate.progress.reachability import GraphBuilder, Tracker

if TYPE_CHECKING:  # pragma: no cover
    from tstate.dataflow import Dataflow

__all__ = ["Execution"]


class Execution:
    """A running dataflow (see the module docstring).  Create with
    :meth:`tstate.Dataflow.start`."""

    def __init__(self, flow: "Dataflow", workers: int) -> None:
        self.flow = flow
        self.workers = workers
        self.finished = False
        self._progress_dirty = False
        self.tracker: Tracker = self._build_tracker()
        specs = flow._nodes
        self.operators: list[list[OperatorRuntime]] = [
            [spec.factory(self, spec, w) for spec in specs] for w in range(workers)
        ]
        self._by_node = [[self.operators[w][n] for w in range(workers)] for n in range(len(specs))]
        self._wire()
        self.steps = 0
        for w in range(workers):
            for op in self.operators[w]:
                op.on_start()
        self._propagate()

    # -- construction -------------------------------------------------------------
    def _build_tracker(self) -> Tracker:
        b = GraphBuilder()
        for spec in self.flow._nodes:
            b.add_node(
                spec.index, spec.name, len(spec.inputs), spec.outputs, spec.summary, spec.scope.depth,
                spec.input_depth, spec.output_depth,
            )
        for spec in self.flow._nodes:
            for port, src in enumerate(spec.inputs):
                if src is not None:
                    b.add_edge(src, (spec.index, port))
        return b.build()

    def _wire(self) -> None:
        specs = self.flow._nodes
        for w in range(self.workers):
            for spec in specs:
                self.operators[w][spec.index].outputs = [OutputPort(self, spec.index, o, w) for o in range(spec.outputs)]
        for spec in specs:
            for port, src in enumerate(spec.inputs):
                assert src is not None  # checked by the tracker
                pact = spec.pacts[port]
                router: Optional[ExchangeRouter] = None
                if pact is not None:
                    router = self.make_router(spec, port, pact)
                inboxes = [self.operators[w][spec.index].inboxes[port] for w in range(self.workers)]
                for w in range(self.workers):
                    self.operators[w][src[0]].outputs[src[1]].connect(inboxes, spec.index, port, router)

    def make_router(self, spec: Any, port: int, pact: Any) -> ExchangeRouter:
        """The router of an exchange channel (stateful operators install their own
        bin configuration through the operator's ``router`` option)."""
        custom: Optional[Callable[..., ExchangeRouter]] = spec.options.get("router")
        if custom is not None:
            return custom(self, spec, port, pact)
        return ExchangeRouter(pact.key, self.workers, pact.bins, spec.name)

    # -- driving ------------------------------------------------------------------
    def _propagate(self) -> None:
        changed = self.tracker.propagate()
        self._progress_dirty = False
        for node, _port in changed:
            for op in self._by_node[node]:
                op.frontier_changed = True

    def step(self) -> bool:
        """One round over all workers and operators; True if any operator ran."""
        if self.finished:
            return False
        did = False
        for ops in self.operators:
            for op in ops:
                if op.needs_activation():
                    op.woke_by_frontier = op.frontier_changed
                    op.frontier_changed = False
                    op.requested = False
                    did = True
                    try:
                        op.activate()
                    except TstateError:
                        raise
                    except Exception as exc:
                        raise OperatorError(
                            f"operator {op.name!r} on worker {op.worker} at time {op.current_time!r} raised "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                    self._propagate()
        self.steps += 1
        return did

    def run(self, max_steps: Optional[int] = None) -> None:
        """Step until the dataflow is complete (see the module docstring)."""
        n = 0
        while self.step():
            n += 1
            if max_steps is not None and n >= max_steps:
                return
        self._finish()

    def step_while(self, condition: Callable[[], bool]) -> None:
        """Step while ``condition()`` holds and there is work to do."""
        while condition() and self.step():
            pass

    def _finish(self) -> None:
        if self.finished:
            return
        if not self.tracker.is_idle():
            raise CapabilityLeakError(self._stuck_message())
        self.finished = True
        for ops in self.operators:
            for op in ops:
                op.on_finish()

    def _stuck_message(self) -> str:
        open_inputs = [h for h in self.flow._inputs if not h.closed]
        if open_inputs:
            names = ", ".join(f"{h.name!r} (at time {h.time!r})" for h in open_inputs)
            return (
                f"dataflow {self.flow.name!r} cannot finish: input {names} is still open; "
                "close() it before run(), or drive the dataflow with step()"
            )
        holders = []
        for ops in self.operators:
            for op in ops:
                if op._held:
                    holders.append(f"{op.name!r} on worker {op.worker} holds capabilities at {op.held_times()!r}")
        if holders:
            return f"dataflow {self.flow.name!r} cannot finish: capability leaked: " + "; ".join(holders)
        return f"dataflow {self.flow.name!r} cannot finish: pointstamps remain {self.tracker.pointstamps()!r}"

    def frontier(self, node: int, port: int = 0) -> Any:
        return self.tracker.frontier(node, port)
