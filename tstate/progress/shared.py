"""The narrow progress interface between an operator and the progress tracker.

Timely passes each operator a ``SharedProgress``: change batches of what it
*consumed* at its inputs, what it *produced* at its outputs, and the *internal*
capability changes it made; the subgraph reads them and updates its tracker.  An
operator never sees the tracker itself.  :class:`SharedProgress` is that interface
here, one per operator (shared by its instances on every worker, since pointstamp
counts are global):

- :meth:`SharedProgress.consumed`: a batch was taken off input ``port`` at ``time``;
- :meth:`SharedProgress.internal`: a capability count changed at output ``port``;
- :meth:`SharedProgress.arrived`: a batch was queued at input ``port`` -- what Timely
  counts as *produced* at the sending output, counted here where it arrives, since an
  exchange splits one output batch into a different number of batches per consumer
  (the channel calls it: :mod:`tstate.engine.channels`);
- :meth:`SharedProgress.frontier`: the live frontier of input ``port`` (read only).

The changes go to the tracker's buffer, as the tracker's own ``update_*`` calls did;
the engine decides when to propagate them (:mod:`tstate.engine.execution`).  The
operator cannot propagate, nor read or change another operator's counts.

>>> from tstate.progress.reachability import GraphBuilder
>>> b = GraphBuilder(); b.add_node(0, "in", 0, 1); b.add_node(1, "op", 1, 0); b.add_edge((0, 0), (1, 0))
>>> tracker = b.build()
>>> source, sink = SharedProgress(tracker, 0, 0), SharedProgress(tracker, 1, 1)
>>> source.internal(0, 3, +1); _ = tracker.propagate(); list(sink.frontier(0).frontier)
[3]
>>> sink.arrived(0, 3); source.internal(0, 3, -1); _ = tracker.propagate(); list(sink.frontier(0).frontier)
[3]
>>> sink.consumed(0, 3); _ = tracker.propagate(); list(sink.frontier(0).frontier)
[]
"""

from __future__ import annotations

from typing import Any, Protocol

from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.reachability import Tracker

__all__ = ["SharedProgress", "ProgressTracker"]


class ProgressTracker(Protocol):
    """What :class:`SharedProgress` needs of a tracker (both trackers of
    :mod:`tstate.progress` have it)."""

    def update_source(self, node: int, port: int, time: Any, delta: int) -> None: ...

    def update_target(self, node: int, port: int, time: Any, delta: int) -> None: ...

    def mutable_frontier(self, node: int, port: int) -> MutableAntichain: ...

    def frontier(self, node: int, port: int) -> Antichain: ...


class SharedProgress:
    """One operator's side of progress tracking (see the module docstring).  With the
    worklist :class:`~tstate.progress.reachability.Tracker` a change is one append to
    its buffer (the hot path: every batch taken or delivered); with another tracker,
    its ``update_*`` methods."""

    __slots__ = ("node", "_source", "_target", "_frontiers", "_tracker", "_direct", "_tids", "_sids")

    def __init__(self, tracker: ProgressTracker, node: int, inputs: int) -> None:
        self.node = node
        self._source = tracker.update_source
        self._target = tracker.update_target
        self._tracker: Any = tracker
        self._frontiers = [tracker.mutable_frontier(node, p) for p in range(inputs)]
        #: the worklist tracker: its buffer is appended to directly
        self._direct = isinstance(tracker, Tracker)
        self._tids, self._sids = tracker.location_ids(node) if isinstance(tracker, Tracker) else ([], [])

    def consumed(self, port: int, time: Any, batches: int = 1) -> None:
        """``batches`` batches at ``time`` were taken off input ``port``."""
        if self._direct:
            self._tracker.pending.append((self._tids[port], time, -batches))
        else:
            self._target(self.node, port, time, -batches)

    def arrived(self, port: int, time: Any, batches: int = 1) -> None:
        """``batches`` batches at ``time`` were queued at input ``port``."""
        if self._direct:
            self._tracker.pending.append((self._tids[port], time, batches))
        else:
            self._target(self.node, port, time, batches)

    def internal(self, port: int, time: Any, delta: int) -> None:
        """The capabilities held at output ``port`` for ``time`` changed by ``delta``."""
        if self._direct:
            self._tracker.pending.append((self._sids[port], time, delta))
        else:
            self._source(self.node, port, time, delta)

    def frontier(self, port: int = 0) -> MutableAntichain:
        """The live frontier of input ``port`` (do not mutate it)."""
        return self._frontiers[port]

    def frontier_antichain(self, port: int = 0) -> Antichain:
        """A copy of input ``port``'s frontier."""
        return self._tracker.frontier(self.node, port)
