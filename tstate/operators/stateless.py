"""Stateless operators: map, filter, flat_map, inspect, exchange (pass) and concat.

Each works batch-at-a-time: one list comprehension per batch, one push per batch, so
the engine's overhead is per batch, not per record.  Outputs keep the input's time.
"""

from __future__ import annotations

from tstate.operators.base import OperatorRuntime


class MapRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        fn = self.spec.options["fn"]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, [fn(r) for r in recs])


class FilterRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        fn = self.spec.options["fn"]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, [r for r in recs if fn(r)])


class FlatMapRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        fn = self.spec.options["fn"]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, [x for r in recs for x in fn(r)])


class InspectRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        fn = self.spec.options["fn"]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            for r in recs:
                fn(t, r)
            push(t, recs)


class PassRuntime(OperatorRuntime):
    """Passes batches on unchanged (the routing happens on its input channel)."""
    reads_frontier = False


    def activate(self) -> None:
        box = self.inboxes[0]
        push = self.outputs[0].push
        while box:
            t, recs = self.pop(0)
            push(t, recs)


class ConcatRuntime(OperatorRuntime):
    reads_frontier = False

    def activate(self) -> None:
        push = self.outputs[0].push
        for port, box in enumerate(self.inboxes):
            while box:
                t, recs = self.pop(port)
                push(t, recs)
