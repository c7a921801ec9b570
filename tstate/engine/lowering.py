"""Lowering a plan for the embedded engine: which runtime runs each node.

Every plan node type has one runtime class (:mod:`tstate.operators`), built once per
worker from the node: ``runtime(host, index, node, worker)``.  A node type without one
is a :class:`~tstate.errors.GraphError` naming the operator.
"""

from __future__ import annotations

from typing import Any

from tstate.errors import GraphError
from tstate.operators.base import Host, OperatorRuntime
from tstate.operators.generic import FrontierRuntime
from tstate.operators.input import InputRuntime, SourceRuntime
from tstate.operators.sinks import ProbeRuntime, SinkRuntime
from tstate.operators.stateful import StatefulRuntime
from tstate.operators.stateless import (
    ConcatRuntime,
    EnterRuntime,
    FeedbackRuntime,
    LeaveRuntime,
    PassRuntime,
    StatelessRuntime,
)
from tstate.plan import (
    Concat,
    Enter,
    Exchange,
    Feedback,
    Filter,
    FlatMap,
    Frontier,
    Input,
    Inspect,
    Leave,
    Map,
    Node,
    Probe,
    Sink,
    Source,
    Stateful,
)

__all__ = ["RUNTIMES", "runtime"]

#: plan node type -> the runtime class that runs it
RUNTIMES: dict[type[Node], type[OperatorRuntime[Any]]] = {
    Input: InputRuntime,
    Source: SourceRuntime,
    Map: StatelessRuntime,
    Filter: StatelessRuntime,
    FlatMap: StatelessRuntime,
    Inspect: StatelessRuntime,
    Exchange: PassRuntime,
    Concat: ConcatRuntime,
    Enter: EnterRuntime,
    Leave: LeaveRuntime,
    Feedback: FeedbackRuntime,
    Stateful: StatefulRuntime,
    Frontier: FrontierRuntime,
    Sink: SinkRuntime,
    Probe: ProbeRuntime,
}


def runtime(host: Host, index: int, node: Node, worker: int) -> OperatorRuntime[Any]:
    """The runtime of ``node`` (graph index ``index``) on ``worker``."""
    for cls in type(node).__mro__:
        rt = RUNTIMES.get(cls)  # type: ignore[call-overload]
        if rt is not None:
            return rt(host, index, node, worker)
    raise GraphError(f"operator {node.name!r} ({node.kind}) cannot run on the embedded engine: no runtime for it")
