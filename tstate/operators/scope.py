"""Iterate-scope boundaries: enter (``t`` → ``Product(t, 0)``; in an epoch-sequenced
scope ``Product(t, t * SEQUENCE_SPAN)``), leave (``Product(o, i)`` → ``o``) and
feedback (``Product(o, i)`` → ``Product(o, i + step)``; it counts the rounds of every
epoch in the execution's metrics)."""

from __future__ import annotations

from typing import Any

from tstate.errors import ProgressError
from tstate.operators.base import OperatorRuntime
from tstate.progress.timestamp import MAX_SEQUENCED_EPOCH, SEQUENCE_SPAN, TIME_MAX, Product


def enter_time(options: dict[str, Any], t: Any, name: str) -> Product:
    """The time inside the scope of a record entering at ``t`` (shared with the Spark
    backend's fused scope edges)."""
    if not options.get("sequenced"):
        return Product(t, 0)
    if t.__class__ is not int or not 0 <= t <= MAX_SEQUENCED_EPOCH:
        raise ProgressError(
            f"operator {name!r}: epoch {t!r} entering a sequenced scope is not an int in [0, {MAX_SEQUENCED_EPOCH}]"
        )
    return Product(t, t * SEQUENCE_SPAN)


class EnterRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        options = self.spec.options
        while box:
            t, recs = self.pop(0)
            push(enter_time(options, t, self.name), recs)


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
        o = self.spec.options
        step = o["step"]
        limit = o["max_iterations"]
        if limit is None:
            limit = TIME_MAX
        span = SEQUENCE_SPAN if o.get("sequenced") else 0
        note = self.exe.metrics.loop_round
        scope = o.get("scope", self.name)
        while box:
            t, recs = self.pop(0)
            inner = t.inner + step
            k = inner - t.outer * span if span else inner
            if k <= limit and inner <= TIME_MAX:  # past the limit the summary overflows: records are dropped
                note(scope, t.outer, k)
                push(Product(t.outer, inner), recs)
