"""The base of every operator node, and an input's exchange contract.

A node is a frozen value describing one operator: its name, the :class:`Scope` it runs
in, and what it does -- the user functions and settings it was built with, and for
operators that are a pure function of a batch, that function (:meth:`apply` on the
stateless nodes, the re-timing of the scope edges): both engines call the node's own
rule, so its meaning is written once.  A node knows its number of inputs and outputs,
how times change from each input to each output (path summaries, for the progress
tracker) and which inputs are exchanged by key (:class:`Pact`).  Where it sits in the
graph (its index, its inputs' sources) is the :class:`~tstate.plan.graph.Graph`'s.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional

from attrs import frozen

from tstate.keys import check_bins
from tstate.plan.scope import Scope
from tstate.progress.summary import PathSummary

__all__ = ["Node", "Pact", "Port", "DEFAULT_BINS", "KeyFn"]

#: bins per keyed operator unless told otherwise (a power of two)
DEFAULT_BINS = 256

#: a key function: ``key(record)`` -> a hashable key (see :mod:`tstate.keys`)
KeyFn = Callable[[Any], Any]

#: ``(node, output port)``: where an input's records come from
Port = tuple[int, int]


def _bins(instance: Any, attribute: Any, value: int) -> None:
    check_bins(value)


@frozen
class Pact:
    """An input's channel contract: route each record by ``key(record)`` to the worker
    (partition) owning its bin among ``bins`` (a power of two)."""

    key: KeyFn
    bins: int = DEFAULT_BINS


@frozen(kw_only=True, eq=False)
class Node:
    """One operator of a plan (see the module docstring).  Subclasses set :attr:`kind`
    and add their settings; nodes are compared by identity."""

    #: the operator family, as errors and the CLI name it
    kind: ClassVar[str] = "node"
    #: output ports (0 for sinks and probes)
    outputs: ClassVar[int] = 1

    name: str
    scope: Scope

    @property
    def arity(self) -> int:
        """The number of input ports."""
        return 1

    def pacts(self) -> tuple[Optional[Pact], ...]:
        """Per input port: how its records are routed (None: they stay where produced)."""
        return (None,) * self.arity

    def summaries(self) -> list[list[list[PathSummary]]]:
        """Per input port, per output port: the path summaries (an antichain) from the
        input to the output -- the identity at the node's depth unless it re-times."""
        ident = [PathSummary.identity(self.scope.depth)]
        return [[list(ident) for _ in range(self.outputs)] for _ in range(self.arity)]

    def input_scope(self, port: int) -> Scope:
        """The scope input ``port`` reads (differs from the node's at a scope edge)."""
        return self.scope

    def input_depths(self) -> list[int]:
        """The scope depth of each input port."""
        return [self.input_scope(p).depth for p in range(self.arity)]

    def output_depths(self) -> list[int]:
        """The scope depth of each output port."""
        return [self.scope.depth] * self.outputs

    def functions(self) -> list[Callable[..., Any]]:
        """The user functions this node calls (the Spark backend reads their type hints
        for the record classes it may rebuild)."""
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
