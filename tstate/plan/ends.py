"""Where records enter and leave a plan: ``input``, ``source``, ``sink`` and ``probe``
nodes.

- :class:`Input`: records sent from Python through an
  :class:`~tstate.io.inputs.InputHandle` (the Spark backend binds a DataFrame to it by
  name instead);
- :class:`Source`: records read from a replayable :class:`~tstate.io.sources.Source`;
- :class:`Sink`: every batch handed to a :class:`~tstate.io.sinks.Sink`, with the
  frontier telling it which times are complete;
- :class:`Probe`: nothing but a frontier to watch from outside.
"""

from __future__ import annotations

from typing import ClassVar

from attrs import frozen

from tstate.io.inputs import InputHandle
from tstate.io.sinks import Sink as SinkTarget
from tstate.io.sources import Source as SourceReader
from tstate.plan.node import Node
from tstate.progress.summary import PathSummary

__all__ = ["Input", "Source", "Sink", "Probe"]


@frozen(kw_only=True, eq=False)
class Input(Node):
    """An input fed from Python (at the root scope)."""

    kind: ClassVar[str] = "input"
    handle: InputHandle

    @property
    def arity(self) -> int:
        return 0

    @property
    def batch_size(self) -> int:
        return self.handle.batch_size


@frozen(kw_only=True, eq=False)
class Source(Node):
    """An input read from a :class:`~tstate.io.sources.Source` (at the root scope)."""

    kind: ClassVar[str] = "source"
    source: SourceReader

    @property
    def arity(self) -> int:
        return 0


@frozen(kw_only=True, eq=False)
class Sink(Node):
    """The end of a stream: its batches go to ``sink``."""

    kind: ClassVar[str] = "sink"
    outputs: ClassVar[int] = 0
    sink: SinkTarget

    def summaries(self) -> list[list[list[PathSummary]]]:
        return [[]]


@frozen(kw_only=True, eq=False)
class Probe(Node):
    """A point whose frontier is watched from outside (:class:`tstate.probe.Probe`)."""

    kind: ClassVar[str] = "probe"
    outputs: ClassVar[int] = 0

    def summaries(self) -> list[list[list[PathSummary]]]:
        return [[]]
