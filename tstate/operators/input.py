"""Inputs and sources: where records and time enter the dataflow.

An input holds one capability for its current epoch; sending stamps records with it,
``advance_to`` downgrades it and ``close`` drops it.  Each send is cut into batches of at
most ``batch_size`` records, handed to the workers round-robin, so stateless work is
spread even before the first exchange.  A source does the same from a reader, one batch
per activation (so a large file never sits in memory at once).
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

from tstate.capability import Capability
from tstate.errors import ProgressError, SourceError
from tstate.operators.base import OperatorRuntime
from tstate.plan.ends import Input, Source
from tstate.progress.timestamp import less_equal


class InputRuntime(OperatorRuntime[Input]):
    """Feeds an :class:`~tstate.io.inputs.InputHandle` (lives on worker 0 only)."""

    reads_frontier = False

    def on_start(self) -> None:
        self.handle = self.node.handle
        self.cap: Optional[Capability] = None
        self._next_worker = 0
        if self.worker != 0:
            return
        self.handle.runtime = self
        self.cap = Capability(self, 0, self.handle.time)
        self.requested = True

    def needs_activation(self) -> bool:
        return self.requested

    def activate(self) -> None:
        if self.worker != 0 or self.cap is None:
            return
        h = self.handle
        out = self.outputs[0]
        workers = self.exe.workers
        size = h.batch_size
        queue, h.queue = h.queue, []
        for t, recs in queue:
            self.current_time = t
            for i in range(0, len(recs), size):
                out.push_to(self._next_worker, t, recs[i : i + size] if len(recs) > size else recs)
                self._next_worker = (self._next_worker + 1) % workers
        if h.closed:
            self.cap.drop()
            self.cap = None
        elif h.time != self.cap.time:
            self.cap.downgrade(h.time)

    def on_finish(self) -> None:
        if self.worker == 0:
            self.handle.runtime = None


class SourceRuntime(OperatorRuntime[Source]):
    """Reads a :class:`~tstate.io.sources.Source` one batch per activation (worker 0)."""

    reads_frontier = False

    def on_start(self) -> None:
        self.cap: Optional[Capability] = None
        self._next_worker = 0
        if self.worker != 0:
            return
        self.source = self.node.source
        restored = self.exe.restored
        position = restored.positions.get(self.name) if restored is not None else None
        start = restored.time if restored is not None else None
        if restored is not None and self.name not in restored.positions:
            raise SourceError(f"source {self.name!r} has no recorded position in checkpoint {restored.id}")
        try:
            self.reader = self.source.open(position, start)
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"source {self.name!r} could not be opened: {exc}") from exc
        self.cap = Capability(self, 0, self.reader.start_time())
        #: (time of a batch, position where it started): to find the replay position of a checkpoint
        self.marks: list[tuple[Any, Any]] = []
        self.requested = True

    def needs_activation(self) -> bool:
        return self.requested

    def activate(self) -> None:
        if self.cap is None:
            return
        before = self.reader.position()
        try:
            item = self.reader.next_batch()
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(f"source {self.name!r}: reading failed: {exc}") from exc
        if item is None:
            self.marks.append((None, before))
            self.cap.drop()
            self.cap = None
            self.reader.close()
            return
        t, recs = item
        if type(t) is not int:
            if isinstance(t, numbers.Integral) and not isinstance(t, bool):
                t = int(t)
            else:
                raise SourceError(
                    f"source {self.name!r}: a batch at time {t!r}: a source's times are int epochs, not {type(t).__name__}"
                )
        if not self.marks or self.marks[-1][0] != t:
            self.marks.append((t, before))
        if not less_equal(self.cap.time, t):
            raise ProgressError(f"source {self.name!r} went back in time: batch at {t!r} after {self.cap.time!r}")
        if t != self.cap.time:
            self.cap.downgrade(t)
        self.current_time = t
        if recs:
            self.outputs[0].push_to(self._next_worker, t, recs)
            self._next_worker = (self._next_worker + 1) % self.exe.workers
        self.requested = True

    def position_at(self, time: Any) -> Any:
        """Where to replay from to get every batch at a time ``>= time``."""
        for t, pos in self.marks:
            if t is None or not t < time:
                return pos
        return self.reader.position()

    def forget_before(self, time: Any) -> None:
        """Drop replay marks no checkpoint can need any more."""
        self.marks = [(t, p) for t, p in self.marks if t is None or not t < time]
