"""The runtime base of every operator instance (one per operator per worker), and what
an instance may ask of the engine running it.

An instance is built from its plan node (:mod:`tstate.plan`): it owns one inbox per
input port (a deque of ``(time, records)`` batches) and one
:class:`Output` per output (the engine's :class:`tstate.engine.channels.OutputPort`).  The engine activates it when
an inbox is non-empty, when an input frontier changed, or when it asked to be activated
again.  Every batch taken from an inbox and every capability acquired or released is a
pointstamp count change, reported through the operator's
:class:`~tstate.progress.shared.SharedProgress` (never to the tracker directly); the
engine applies the changes of an activation together, so frontiers never move on a
half-done step.

:class:`Host` is the engine as an operator sees it -- the worker count, the metrics,
the configurations of stateful operators, a restored checkpoint, its progress
interface and its peers on other workers -- a :class:`~typing.Protocol`, so that this
layer names no engine type.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Generic, Optional, Protocol, TypeVar

from tstate.plan.node import Node
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.shared import SharedProgress

if TYPE_CHECKING:  # pragma: no cover
    from tstate.capability import Capability
    from tstate.metrics import Metrics
    from tstate.migration.configuration import ConfigHistory

__all__ = ["OperatorRuntime", "Host", "Output", "Restart"]

N = TypeVar("N", bound=Node)


class Restart(Protocol):
    """A checkpoint the run resumed from, as operators see it."""

    id: int
    time: Any
    positions: dict[str, Any]


class Output(Protocol):
    """An output port as an operator sees it: where its batches go is the engine's
    business (channels, exchange by bin owner)."""

    def push(self, time: Any, records: list[Any]) -> None:
        """Send one batch at ``time`` (the caller holds a capability for it)."""
        ...

    def push_to(self, worker: int, time: Any, records: list[Any]) -> None:
        """Send a batch as if produced on ``worker`` (inputs spread data this way)."""
        ...


class Host(Protocol):
    """What an operator instance may ask of the engine (see the module docstring)."""

    @property
    def workers(self) -> int: ...

    @property
    def metrics(self) -> "Metrics": ...

    @property
    def checkpointing(self) -> bool: ...

    @property
    def configs(self) -> "dict[int, ConfigHistory]": ...

    @property
    def restored(self) -> Optional[Restart]: ...

    @property
    def key_bins(self) -> "dict[int, dict[Any, int]]":
        """Per stateful node: key -> bin index, shared by the node's workers."""
        ...

    def progress(self, node: int) -> SharedProgress:
        """The progress interface of node ``node``."""
        ...

    def keyed_store(self, worker: int, name: str, codec: Any) -> Any:
        """Where operator ``name`` keeps its keyed state on ``worker``: a
        :class:`~tstate.state.rocksdb.store.KeyedStore` (``state=RocksDB(...)``), or
        None for the heap."""
        ...

    def peer(self, worker: int, node: int) -> "OperatorRuntime[Any]":
        """Node ``node``'s instance on ``worker`` (a stateful operator ships bins to it)."""
        ...


class OperatorRuntime(Generic[N]):
    """Base class of operator instances; subclasses implement :meth:`activate`.

    ``node`` is the plan node the instance runs, ``index`` its index in the graph."""

    #: whether :meth:`activate` reads an input frontier (or needs its frontier-change
    #: activations); an operator that does not (stateless operators, scope boundaries,
    #: inputs, probes) may run with pointstamp changes not yet propagated, so the
    #: engine propagates only in front of the operators that do
    reads_frontier = True

    def __init__(self, exe: Host, index: int, node: N, worker: int) -> None:
        self.exe = exe
        self.node = node
        self.index = index
        self.name = node.name
        self.worker = worker
        self.inboxes: list[deque[tuple[Any, list[Any]]]] = [deque() for _ in range(node.arity)]
        self.outputs: list[Output] = []
        self.frontier_changed = True  # activate once at start
        self.woke_by_frontier = False  # set by the engine: this activation saw a frontier move
        self.requested = False
        self.current_time: Any = None
        self._held: dict[tuple[int, Any], int] = {}  # (port, time) -> live capabilities
        self.progress = exe.progress(index)

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
        self.progress.consumed(port, t)
        self.current_time = t
        return t, records

    def frontier(self, port: int = 0) -> MutableAntichain:
        """The live frontier of input ``port`` (do not mutate)."""
        return self.progress.frontier(port)

    def frontier_antichain(self, port: int = 0) -> Antichain:
        return self.progress.frontier_antichain(port)

    # -- capability accounting (called by Capability) --------------------------------
    def _count(self, port: int, time: Any, delta: int) -> None:
        """One capability more (+1) or less (-1) at ``(port, time)``: kept for
        diagnostics and reported as an internal pointstamp change."""
        k = (port, time)
        n = self._held.get(k, 0) + delta
        if n:
            self._held[k] = n
        else:
            del self._held[k]
        self.progress.internal(port, time, delta)

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
