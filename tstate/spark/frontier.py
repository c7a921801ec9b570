"""Frontier operators fused into a Spark task's stateless chain, run by the embedded
engine's own runtime (:class:`~tstate.operators.generic.FrontierRuntime`), as
:mod:`tstate.spark.host` runs the embedded engine's stateful runtime -- so the user's
function gets the same inputs, output, context and capabilities
(:mod:`tstate.capability`) on both engines, and misuses them with the same errors
(a dropped or foreign capability, a delay to an earlier time: a
:class:`~tstate.errors.ProgressError`).

On Spark a ``unary_frontier`` / ``binary_frontier`` operator runs where its input
records are, inside the task that produced them (like ``map``), one activation per
``(time, batch)`` that reaches it.  That is exact for the operators that keep nothing
between activations -- the common "re-time records" kind: give a record at its own time,
or at a later time through ``cap.delayed(t)`` (a sliding window's expiry, a loop
entrance's round) -- because such an operator's output depends only on the batch and
its time.  Records given at a time the micro-batch has not reached are *held* by the
driver until a later batch reaches it (see :mod:`tstate.spark.backend`).

What cannot be lowered is refused with :class:`~tstate.errors.SparkError` naming the
operator: per-worker ``state=``, an ``exchange=`` key (when the plan is built),
notifications, reading an input's frontier, and a capability kept beyond the activation
(the operator would be holding back time across micro-batches, which needs state that
survives a task: keep such state in ``@flow.stateful``, whose bins Spark checkpoints).

>>> from tstate.plan import Scope, UnaryFrontier
>>> def shift(inp, out, ctx):
...     for cap, batch in inp:
...         out.give_many(cap.delayed(cap.time + 10), batch)
>>> node = UnaryFrontier(name="shift", scope=Scope("root"), logic=shift)
>>> FusedFrontier(node).run(0, 5, ["a", "b"])
{15: ['a', 'b']}
"""

from __future__ import annotations

from typing import Any, Optional

from tstate.errors import OperatorError, SparkError, TstateError
from tstate.metrics import Metrics
from tstate.operators.generic import FrontierRuntime
from tstate.plan.generic import Frontier
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.shared import SharedProgress

__all__ = ["FusedFrontier"]


class _Uncounted:
    """The progress tracker of a fused operator: Spark's batches, not pointstamps, say
    when time passes, so the counts go nowhere (a capability still held when the
    activation ends is found in the runtime's own ``_held``)."""

    def update_source(self, node: int, port: int, time: Any, delta: int) -> None:
        pass

    def update_target(self, node: int, port: int, time: Any, delta: int) -> None:
        pass

    def mutable_frontier(self, node: int, port: int) -> MutableAntichain:
        return MutableAntichain()

    def frontier(self, node: int, port: int) -> Antichain:  # pragma: no cover - the runtime refuses first
        return Antichain()


class _Given:
    """The fused operator's output port: the records given, by time."""

    def __init__(self) -> None:
        self.given: dict[Any, list[Any]] = {}

    def push(self, time: Any, records: list[Any]) -> None:
        if records:  # (as the embedded engine's output ports: no empty batches)
            self.given.setdefault(time, []).extend(records)

    def push_to(self, worker: int, time: Any, records: list[Any]) -> None:  # pragma: no cover - inputs only
        self.push(time, records)


class _TaskHost:
    """The engine as a fused frontier operator sees it (:class:`~tstate.operators.base.Host`):
    ``workers`` workers, no checkpoints, configurations, restore or peers."""

    def __init__(self, workers: int, inputs: int) -> None:
        self.workers = workers
        self.inputs = inputs
        self.metrics = Metrics()
        self.checkpointing = False
        self.configs: dict[int, Any] = {}
        self.restored = None
        self.key_bins: dict[int, dict[Any, int]] = {}

    def progress(self, node: int) -> SharedProgress:
        return SharedProgress(_Uncounted(), node, self.inputs)

    def keyed_store(self, worker: int, name: str, codec: Any) -> Any:
        return None

    def peer(self, worker: int, node: int) -> Any:  # pragma: no cover - frontier operators ship no bins
        raise SparkError("a fused frontier operator has no peers")


class _FusedRuntime(FrontierRuntime):
    """The embedded engine's frontier runtime, refusing what a fused operator cannot do
    (module docstring); ``worker`` is the Spark task's partition."""

    def frontier(self, port: int = 0) -> MutableAntichain:
        raise SparkError(
            f"operator {self.name!r} reads its input frontier, which a fused frontier operator on Spark does not "
            "have; keep state that waits for time in @flow.stateful (timers)"
        )

    def frontier_antichain(self, port: int = 0) -> Antichain:
        self.frontier(port)
        raise AssertionError  # pragma: no cover - frontier() raised

    def capability_for(self, at: Any) -> Any:
        raise SparkError(
            f"operator {self.name!r} asks for a notification at {getattr(at, 'time', at)!r}: on Spark a frontier "
            "operator runs fused, without notifications; use a @flow.stateful operator's timers (ctx.notify_at)"
        )

    @property  # type: ignore[override]
    def worker(self) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.partitionId() if ctx is not None else 0

    @worker.setter
    def worker(self, value: int) -> None:
        pass  # (the partition, read when asked)


class FusedFrontier:
    """Frontier operator ``node`` hosted in a Spark task, activated per
    ``(port, time, batch)`` (module docstring); ``workers``: what ``ctx.workers`` says."""

    def __init__(self, node: Frontier, workers: int = 1) -> None:
        self.name = node.name
        self._out = _Given()
        self.op = _FusedRuntime(_TaskHost(workers, node.arity), 0, node, 0)
        self.op.outputs = [self._out]

    def run(self, port: int, time: Any, records: list[Any]) -> dict[Any, list[Any]]:
        """One activation with ``records`` at ``time`` on input ``port``; returns the
        records given, by time.  A user error becomes an
        :class:`~tstate.errors.OperatorError` naming the operator and time."""
        op, out = self.op, self._out
        out.given = {}
        op.inboxes[port].append((time, records))
        try:
            op.activate()
        except TstateError:
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {self.name!r} (frontier operator) at time {time!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            for box in op.inboxes:
                box.clear()  # (a batch the function did not read is not carried into the next activation)
        kept: Optional[Any] = min(op.held_times(), default=None) if op._held else None
        if kept is not None:
            raise SparkError(
                f"operator {self.name!r} keeps a capability at {kept!r} beyond its activation: on Spark a "
                "frontier operator cannot hold time back across micro-batches; keep such state in @flow.stateful"
            )
        return out.given
