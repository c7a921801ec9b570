"""Probes: watch a stream's frontier from outside the dataflow.

``probe.less_than(t)`` is true while records at times ``< t`` may still reach the probed
point; once false, every time before ``t`` is complete there.  Use it to drive a
dataflow step by step::

    >>> import tstate as ts
    >>> flow = ts.Dataflow("probe")
    >>> nums = flow.input("nums")
    >>> probe = nums.map(lambda x: x * 2).probe()
    >>> ex = flow.start()
    >>> nums.send([1]); nums.advance_to(1)
    >>> ex.step_while(lambda: probe.less_than(1))
    >>> probe.less_than(1), probe.done()
    (False, False)
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from tstate.progress.frontier import Antichain

__all__ = ["Probe", "Watched"]


class _Frontiers(Protocol):
    def frontier(self, node: int, port: int = 0) -> Antichain: ...


class Watched(Protocol):
    """What a probe watches: a dataflow, whose current execution (None before it
    starts) tells frontiers."""

    @property
    def execution(self) -> Optional[_Frontiers]: ...


class Probe:
    """A handle on the frontier at one point of a dataflow (see module docs)."""

    def __init__(self, flow: Watched, node: int, initial: Any) -> None:
        self._flow = flow
        self._node = node
        self._initial = initial

    @property
    def frontier(self) -> Antichain:
        """The current frontier (before the dataflow starts: the least time)."""
        exe = self._flow.execution
        if exe is None:
            return Antichain([self._initial])
        return exe.frontier(self._node, 0)

    def less_than(self, time: Any) -> bool:
        """True while some time ``< time`` may still arrive."""
        return self.frontier.less_than(time)

    def less_equal(self, time: Any) -> bool:
        """True while ``time`` (or an earlier time) may still arrive."""
        return self.frontier.less_equal(time)

    def done(self) -> bool:
        """True once nothing can arrive any more."""
        return self.frontier.is_empty()
