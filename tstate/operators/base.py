"""The runtime base of every operator instance (one per operator per worker).

An instance owns one inbox per input port (a deque of ``(time, records)`` batches) and
one :class:`~tstate.engine.channels.OutputPort` per output.  The engine activates it when
an inbox is non-empty, when an input frontier changed, or when it asked to be activated
again.  Every batch taken from an inbox and every capability acquired or released is a
pointstamp count change, reported to the execution's tracker; changes made during one
activation are applied together after it, so frontiers never move on a half-done step.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from tstate.progress.frontier import Antichain, MutableAntichain

if TYPE_CHECKING:  # pragma: no cover
    from tstate.capability import Capability
    from tstate.dataflow import NodeSpec
    from tstate.engine.channels import OutputPort
    from tstate.engine.execution import Execution

__all__ = ["OperatorRuntime"]


class OperatorRuntime:
    """Base class of operator instances; subclasses implement :meth:`activate`."""

    #: whether :meth:`activate` reads an input frontier (or needs its frontier-change
    #: activations); an operator that does not (stateless operators, scope boundaries,
    #: inputs, probes) may run with pointstamp changes not yet propagated, so the
    #: engine propagates only in front of the operators that do
    reads_frontier = True

    def __init__(self, exe: "Execution", spec: "NodeSpec", worker: int) -> None:
        self.exe = exe
        self.spec = spec
        self.node = spec.index
        self.name = spec.name
        self.worker = worker
        self.inboxes: list[deque[tuple[Any, list[Any]]]] = [deque() for _ in range(len(spec.inputs))]
        self.outputs: list["OutputPort"] = []
        self.frontier_changed = True  # activate once at start
        self.woke_by_frontier = False  # set by the engine: this activation saw a frontier move
        self.requested = False
        self.current_time: Any = None
        self._held: dict[tuple[int, Any], int] = {}  # (port, time) -> live capabilities
        self._tracker = exe.tracker

    # -- scheduling ---------------------------------------------------------------
    def needs_activation(self) -> bool:
        if self.requested or self.frontier_changed:
            return True
        for box in self.inboxes:
            if box:
                return True
        return False

    def activate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def request_activation(self) -> None:
        """Ask to be activated again in the next step even if nothing changes."""
        self.requested = True

    def on_start(self) -> None:
        """Called once before the first step (acquire initial capabilities here)."""

    def on_finish(self) -> None:
        """Called once when the execution completes (flush sinks, release resources)."""

    # -- inputs -------------------------------------------------------------------
    def pop(self, port: int) -> tuple[Any, list[Any]]:
        """Take the next batch from input ``port`` (its in-flight count is released)."""
        t, records = self.inboxes[port].popleft()
        self._tracker.update_target(self.node, port, t, -1)
        self.current_time = t
        return t, records

    def frontier(self, port: int = 0) -> MutableAntichain:
        """The live frontier of input ``port`` (do not mutate)."""
        return self._tracker.mutable_frontier(self.node, port)

    def frontier_antichain(self, port: int = 0) -> Antichain:
        return self._tracker.frontier(self.node, port)

    # -- capability accounting (called by Capability) --------------------------------
    def _count(self, port: int, time: Any, delta: int) -> None:
        """One capability more (+1) or less (-1) at ``(port, time)``: kept for
        diagnostics and reported to the tracker as a pointstamp change."""
        k = (port, time)
        n = self._held.get(k, 0) + delta
        if n:
            self._held[k] = n
        else:
            del self._held[k]
        self._tracker.update_source(self.node, port, time, delta)

    def _capability_acquired(self, cap: "Capability") -> None:
        self._count(cap.port, cap.time, +1)

    def _capability_released(self, cap: "Capability") -> None:
        self._count(cap.port, cap.time, -1)

    def _capability_moved(self, cap: "Capability", old: Any, new: Any) -> None:
        self._count(cap.port, new, +1)
        self._count(cap.port, old, -1)

    def held_times(self) -> list[Any]:
        """Times of the capabilities this instance still holds (for diagnostics)."""
        return sorted({t for (_, t) in self._held})

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} worker {self.worker}>"
