"""The plan: a dataflow as typed, frozen operator nodes and the edges between them.

What :class:`tstate.dataflow.Dataflow` builds and both engines lower (see
docs/architecture.md).  It imports no runtime: nothing here runs a record except the
per-batch rules of the stateless nodes and scope edges, which both engines call.

- :mod:`tstate.plan.scope`: :class:`Scope` (root or iterate, depth, sequenced);
- :mod:`tstate.plan.node`: :class:`Node` (name, scope, inputs, outputs, summaries),
  :class:`Pact` (an input exchanged by key over bins);
- :mod:`tstate.plan.stateless`: :class:`Map`, :class:`Filter`, :class:`FlatMap`,
  :class:`Inspect`, :class:`Exchange`, :class:`Concat` -- each with its ``apply``;
- :mod:`tstate.plan.loops`: :class:`Enter`, :class:`Leave`, :class:`Feedback`;
- :mod:`tstate.plan.stateful`: :class:`Stateful` and the types of its functions;
- :mod:`tstate.plan.generic`: :class:`UnaryFrontier`, :class:`BinaryFrontier`;
- :mod:`tstate.plan.ends`: :class:`Input`, :class:`Source`, :class:`Sink`, :class:`Probe`;
- :mod:`tstate.plan.graph`: :class:`Graph`, the nodes and their edges.
"""

from tstate.plan.ends import Input, Probe, Sink, Source
from tstate.plan.generic import BinaryFrontier, Frontier, FrontierLogic, UnaryFrontier
from tstate.plan.graph import Graph, Planned
from tstate.plan.loops import Enter, Feedback, Leave
from tstate.plan.node import DEFAULT_BINS, KeyFn, Node, Pact, Port
from tstate.plan.scope import Scope
from tstate.plan.stateful import FoldFn, NotifyHandler, Returns, Stateful, StatefulFn
from tstate.plan.stateless import Concat, Exchange, Filter, FlatMap, Inspect, Map, Stateless

__all__ = [
    "BinaryFrontier", "Concat", "DEFAULT_BINS", "Enter", "Exchange", "Feedback", "Filter", "FlatMap", "FoldFn",
    "Frontier", "FrontierLogic", "Graph", "Input", "Inspect", "KeyFn", "Leave", "Map", "Node", "NotifyHandler",
    "Pact", "Planned", "Port", "Probe", "Returns", "Scope", "Sink", "Source", "Stateful", "StatefulFn", "Stateless",
    "UnaryFrontier",
]
