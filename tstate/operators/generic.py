"""The generic frontier-aware operators (``unary_frontier``, ``binary_frontier``).

The user's function ``fn(*inputs, out, ctx)`` is called on each activation with:

- one :class:`FrontierInput` per input: iterate it for ``(capability, batch)`` pairs
  (each batch is taken off the queue as it is yielded); ``.frontier`` is its frontier;
- a :class:`FrontierOutput`: ``give(cap, record)`` / ``give_many(cap, records)`` at the
  time of a valid capability held by this operator;
- an :class:`OperatorContext`: the notificator, per-worker ``state``, ``worker`` and
  ``workers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from tstate.capability import Capability, InputCapability
from tstate.errors import ProgressError
from tstate.notificator import Notificator
from tstate.operators.base import OperatorRuntime
from tstate.plan.generic import Frontier
from tstate.progress.frontier import Antichain
from tstate.progress.timestamp import less_equal

if TYPE_CHECKING:  # pragma: no cover
    from tstate.operators.base import Host

__all__ = ["FrontierInput", "FrontierOutput", "OperatorContext", "FrontierRuntime"]


class FrontierInput:
    """One input of a frontier-aware operator."""

    __slots__ = ("_op", "_port")

    def __init__(self, op: "FrontierRuntime", port: int) -> None:
        self._op = op
        self._port = port

    def __iter__(self) -> Iterator[tuple[InputCapability, list[Any]]]:
        op = self._op
        port = self._port
        box = op.inboxes[port]
        while box:
            t, recs = op.pop(port)
            cap = InputCapability(op, t)
            op._in_hand.append(cap)
            yield cap, recs

    @property
    def frontier(self) -> Antichain:
        """This input's frontier: times not ``>=`` one of its elements are complete."""
        return self._op.frontier_antichain(self._port)

    def __repr__(self) -> str:
        return f"<input {self._port} of {self._op.name!r}, frontier {list(self.frontier)}>"


class FrontierOutput:
    """The output of a frontier-aware operator; records are buffered per time and
    sent as one batch per time when the activation ends."""

    __slots__ = ("_op", "_buffers")

    def __init__(self, op: "FrontierRuntime") -> None:
        self._op = op
        self._buffers: dict[Any, list[Any]] = {}

    def _time_of(self, cap: Any) -> Any:
        if type(cap) is InputCapability or type(cap) is Capability:
            cap._check()
            if cap._op is not self._op:
                raise ProgressError(f"operator {self._op.name!r}: a capability of operator {cap._op.name!r} was used")
            return cap.time
        raise ProgressError(
            f"operator {self._op.name!r}: give() needs a capability (from the input or notify), got {cap!r}"
        )

    def give(self, cap: Any, record: Any) -> None:
        """Send ``record`` at the time of ``cap``."""
        t = self._time_of(cap)
        buf = self._buffers.get(t)
        if buf is None:
            self._buffers[t] = [record]
        else:
            buf.append(record)

    def give_many(self, cap: Any, records: Iterable[Any]) -> None:
        """Send several records at the time of ``cap``."""
        t = self._time_of(cap)
        buf = self._buffers.get(t)
        if buf is None:
            self._buffers[t] = list(records)
        else:
            buf.extend(records)

    def _flush(self) -> None:
        if self._buffers:
            bufs, self._buffers = self._buffers, {}
            push = self._op.outputs[0].push
            for t, recs in bufs.items():
                push(t, recs)


class OperatorContext:
    """What a frontier-aware operator's function sees besides its inputs and output."""

    __slots__ = ("_op", "state", "notificator")

    def __init__(self, op: "FrontierRuntime", state: Any) -> None:
        self._op = op
        self.state = state
        self.notificator = Notificator(op)

    @property
    def worker(self) -> int:
        """This worker's index, ``0 <= worker < workers``."""
        return self._op.worker

    @property
    def workers(self) -> int:
        return self._op.exe.workers

    @property
    def name(self) -> str:
        return self._op.name

    def notify_at(self, at: Any) -> None:
        """Request a notification at a capability's time or at a time (the operator
        must hold a capability ``<=`` it); merged with other requests for that time."""
        self.notificator.notify_at(self._op.capability_for(at))

    def notifications(self) -> Iterator[Capability]:
        """The notifications whose time all input frontiers passed, in time order."""
        if not len(self.notificator):
            return iter(())  # (none requested: no frontier is read)
        return self.notificator.ready([self._op.frontier(p) for p in range(len(self._op.inboxes))])

    def activate(self) -> None:
        """Be activated again in the next step, even with no new input."""
        self._op.request_activation()


class FrontierRuntime(OperatorRuntime[Frontier]):
    """Runs a user function over batches, frontiers and notifications."""

    def __init__(self, exe: "Host", index: int, node: Frontier, worker: int) -> None:
        super().__init__(exe, index, node, worker)
        self.logic = node.logic
        factory = node.state
        self._in_hand: list[InputCapability] = []
        self.output = FrontierOutput(self)
        self.ctx = OperatorContext(self, factory() if factory is not None else None)
        self.ports = [FrontierInput(self, p) for p in range(node.arity)]

    def capability_for(self, at: Any) -> Capability:
        if type(at) is InputCapability or type(at) is Capability:
            return at.retain()
        for c in reversed(self._in_hand):
            if c._valid and less_equal(c.time, at):
                return c.delayed(at)
        for port, t in list(self._held):
            if port == 0 and less_equal(t, at):
                return Capability(self, 0, at)
        raise ProgressError(f"operator {self.name!r}: no capability allows a notification at time {at!r}")

    def activate(self) -> None:
        try:
            self.logic(*self.ports, self.output, self.ctx)
        finally:
            for c in self._in_hand:
                c._valid = False
            self._in_hand.clear()
            self.output._flush()
