"""Iterate-scope boundaries: enter (``t`` → ``Product(t, 0)``), leave
(``Product(o, i)`` → ``o``) and feedback (``Product(o, i)`` → ``Product(o, i + step)``)."""

from __future__ import annotations

from tstate.operators.base import OperatorRuntime
from tstate.progress.timestamp import TIME_MAX, Product


class EnterRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(Product(t, 0), recs)


class LeaveRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t.outer, recs)


class FeedbackRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        step = self.spec.options["step"]
        limit = self.spec.options["max_iterations"]
        if limit is None:
            limit = TIME_MAX
        while box:
            t, recs = self.pop(0)
            inner = t.inner + step
            if inner <= limit:  # past the limit the summary overflows: records are dropped
                push(Product(t.outer, inner), recs)
