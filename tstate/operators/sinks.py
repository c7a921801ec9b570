"""Sink and probe operators: the ends of a dataflow."""

from __future__ import annotations

from typing import Any

from tstate.operators.base import OperatorRuntime
from tstate.plan.ends import Probe, Sink
from tstate.progress.frontier import Antichain
from tstate.progress.timestamp import minimum

__all__ = ["SinkRuntime", "ProbeRuntime"]


class SinkRuntime(OperatorRuntime[Sink]):
    """Hands every batch to the sink's ``write(worker, time, records)`` and tells it
    when times complete (``frontier(worker, antichain)``); :meth:`make_durable` has it
    make what it committed durable (``sync(worker)``: before a checkpoint commits, and
    after ``close``)."""

    def on_start(self) -> None:
        self.sink = self.node.sink
        self.sink.open(self.worker, self.exe.workers)
        #: the frontier this worker's sink last acted on: what it has committed
        self.committed = Antichain([minimum(self.node.scope.depth)])
        #: the frontier as of this worker's sink's last ``sync``: what it made durable
        self.durable = self.committed

    def make_durable(self, t: Any) -> None:
        """Have the sink make durable what it committed, unless that is already so for
        every time before ``t`` (one ``sync`` covers every checkpoint up to its frontier)."""
        if self.durable.less_than(t):
            committed = self.committed
            self.sink.sync(self.worker)
            self.durable = committed

    def activate(self) -> None:
        box = self.inboxes[0]
        write = self.sink.write
        while box:
            t, recs = self.pop(0)
            write(self.worker, t, recs)
        if self.woke_by_frontier:
            f = self.frontier_antichain(0)
            self.sink.frontier(self.worker, f)
            self.committed = f

    def on_finish(self) -> None:
        self.sink.close(self.worker)
        self.sink.sync(self.worker)
        self.durable = self.committed


class ProbeRuntime(OperatorRuntime[Probe]):
    """Consumes and discards; the probe reads this operator's input frontier (from
    outside, between steps: the engine propagates at the end of every step)."""

    reads_frontier = False

    def activate(self) -> None:
        box = self.inboxes[0]
        while box:
            self.pop(0)
