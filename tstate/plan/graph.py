"""A plan: operator nodes and the edges between them.

:class:`Graph` is what :class:`tstate.dataflow.Dataflow` builds and what both engines
lower: the embedded engine to one operator runtime per node and worker
(:mod:`tstate.engine.execution`), the Spark backend to fused chains and shuffles
(:mod:`tstate.spark.plan`).  Nodes are frozen values (:mod:`tstate.plan.node`); the
graph holds them in the order they were added -- every node after the nodes it reads,
except along feedback edges, which are connected last -- and, per node and input port,
the output port it reads.  Adding a node checks what can be checked then (a unique
name, the number of inputs, every input from the scope the port reads);
:meth:`Graph.validate` checks the rest before a run (every input connected).

>>> from tstate.plan import Graph, Map, Probe
>>> g = Graph("g")
>>> nums = g.add(Map(name="double", scope=g.root, fn=lambda x: 2 * x), [None])
Traceback (most recent call last):
...
tstate.errors.GraphError: operator 'double' (map): input 0 is not connected
"""

from __future__ import annotations

from typing import Iterator, Optional, Protocol, Sequence, TypeVar

from tstate.errors import GraphError
from tstate.plan.node import Node, Port
from tstate.plan.scope import Scope

__all__ = ["Graph", "Planned"]

N = TypeVar("N", bound=Node)


class Graph:
    """Operator nodes and their input edges (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: the root scope (``int`` epochs)
        self.root = Scope(name)
        self._nodes: list[Node] = []
        self._sources: list[list[Optional[Port]]] = []
        self._names: dict[str, int] = {}

    # -- building -----------------------------------------------------------------
    def add(self, node: Node, sources: Sequence[Optional[Port]], *, later: Sequence[int] = ()) -> int:
        """Add ``node`` reading ``sources[p]`` on input port ``p``; returns its index.
        Ports listed in ``later`` may be None, to be connected later (a feedback's)."""
        if node.name in self._names:
            raise GraphError(f"dataflow {self.name!r}: two operators are named {node.name!r}")
        if len(sources) != node.arity:
            raise GraphError(f"operator {node.name!r} ({node.kind}) has {node.arity} inputs, got {len(sources)} streams")
        for port, src in enumerate(sources):
            if src is None:
                if port not in later:
                    raise GraphError(f"operator {node.name!r} ({node.kind}): input {port} is not connected")
            else:
                self._check_source(node, port, src)
        index = len(self._nodes)
        self._nodes.append(node)
        self._sources.append(list(sources))
        self._names[node.name] = index
        return index

    def connect(self, index: int, port: int, source: Port) -> None:
        """Connect input ``port`` of node ``index``, left open when it was added."""
        node = self._nodes[index]
        if self._sources[index][port] is not None:
            raise GraphError(f"operator {node.name!r} ({node.kind}): input {port} is already connected")
        self._check_source(node, port, source)
        self._sources[index][port] = source

    def replace(self, index: int, node: Node) -> None:
        """Put ``node`` in place of node ``index`` (the same name, kind and inputs; e.g.
        a stateful node with its ``on_notify`` handler registered)."""
        old = self._nodes[index]
        if node.name != old.name or type(node) is not type(old) or node.arity != old.arity:
            raise GraphError(f"operator {old.name!r}: a replacement must have its name, kind and inputs")
        self._nodes[index] = node

    def _check_source(self, node: Node, port: int, src: Port) -> None:
        n, out = src
        if not 0 <= n < len(self._nodes) or not 0 <= out < self._nodes[n].outputs:
            raise GraphError(f"operator {node.name!r} ({node.kind}): input {port} reads a port that does not exist: {src}")
        want = node.input_scope(port)
        have = self._nodes[n].scope
        if have is not want:
            raise GraphError(
                f"operator {node.name!r} ({node.kind}): input {port} reads {self._nodes[n].name!r} in {have!r}, "
                f"but the port reads {want!r}"
            )

    # -- reading ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[tuple[int, Node]]:
        """``(index, node)`` in index order."""
        return iter(enumerate(self._nodes))

    def __getitem__(self, index: int) -> Node:
        return self._nodes[index]

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes)

    def sources(self, index: int) -> list[Optional[Port]]:
        """Per input port of node ``index``: the ``(node, output port)`` it reads."""
        return list(self._sources[index])

    def source(self, index: int, port: int = 0) -> Port:
        """The ``(node, output port)`` input ``port`` of node ``index`` reads."""
        src = self._sources[index][port]
        if src is None:
            node = self._nodes[index]
            raise GraphError(f"operator {node.name!r} ({node.kind}): input {port} is not connected")
        return src

    def consumers(self, index: int, output: int = 0) -> list[tuple[int, int]]:
        """``(node, input port)`` of every input reading output ``output`` of ``index``,
        in index order."""
        return [
            (n, p) for n, srcs in enumerate(self._sources) for p, s in enumerate(srcs) if s == (index, output)
        ]

    def index(self, name: str) -> int:
        """The index of the node named ``name``."""
        try:
            return self._names[name]
        except KeyError:
            raise GraphError(f"dataflow {self.name!r} has no operator named {name!r}") from None

    def of_type(self, cls: type[N]) -> list[tuple[int, N]]:
        """``(index, node)`` of the nodes that are instances of ``cls``."""
        return [(i, n) for i, n in enumerate(self._nodes) if isinstance(n, cls)]

    def validate(self) -> None:
        """Raise :class:`~tstate.errors.GraphError` if an input is not connected."""
        for i, srcs in enumerate(self._sources):
            for port, s in enumerate(srcs):
                if s is None:
                    node = self._nodes[i]
                    raise GraphError(f"operator {node.name!r} ({node.kind}): input {port} is not connected")

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self._nodes)} nodes>"


class Planned(Protocol):
    """What a backend runs: something holding a plan -- a
    :class:`tstate.dataflow.Dataflow` (its ``graph``, ``name`` and the record classes
    registered with ``flow.record_types``, which the Spark backend's records may be)."""

    @property
    def name(self) -> str: ...

    @property
    def graph(self) -> Graph: ...

    @property
    def registered_record_types(self) -> tuple[type, ...]: ...
