"""Runtimes of the stateless operators and the scope edges: ``map``, ``filter``,
``flat_map``, ``inspect``, ``exchange``, ``concat``, ``enter``, ``leave``, ``feedback``.

Each calls its plan node's rule (:mod:`tstate.plan.stateless`,
:mod:`tstate.plan.loops`) batch-at-a-time: one call per batch, one push per batch, so
the engine's overhead is per batch, not per record.
"""

from __future__ import annotations


from tstate.operators.base import OperatorRuntime
from tstate.plan.loops import Enter, Feedback, Leave
from tstate.plan.stateless import Concat, Exchange, Stateless

__all__ = ["StatelessRuntime", "PassRuntime", "ConcatRuntime", "EnterRuntime", "LeaveRuntime", "FeedbackRuntime"]


class StatelessRuntime(OperatorRuntime[Stateless]):
    """``map``, ``filter``, ``flat_map``, ``inspect``: the node's ``apply`` per batch."""

    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        apply = self.node.apply
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, apply(t, recs))


class PassRuntime(OperatorRuntime[Exchange]):
    """Passes batches on unchanged (an exchange: the routing happens on its input channel)."""

    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, recs)


class ConcatRuntime(OperatorRuntime[Concat]):
    reads_frontier = False

    def activate(self) -> None:
        push = self.outputs[0].push
        for port, box in enumerate(self.inboxes):
            while box:
                t, recs = self.pop(port)
                push(t, recs)


class EnterRuntime(OperatorRuntime[Enter]):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        inside = self.node.time_inside
        while box:
            t, recs = self.pop(0)
            push(inside(t), recs)


class LeaveRuntime(OperatorRuntime[Leave]):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t.outer, recs)


class FeedbackRuntime(OperatorRuntime[Feedback]):
    """Re-times batches to their next round (dropped past the limit) and counts the
    rounds of every epoch in the metrics."""

    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        node = self.node
        advance = node.advance
        note = self.exe.metrics.loop_round
        scope = node.scope.name
        while box:
            t, recs = self.pop(0)
            got = advance(t)
            if got is not None:  # past the limit the summary overflows: records are dropped
                t2, k = got
                note(scope, t2.outer, k)
                push(t2, recs)
