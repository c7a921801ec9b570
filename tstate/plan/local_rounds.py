"""Local rounds: the way a stateful operator's output comes back to it inside a loop.

A ``@flow.stateful(..., local_rounds=True)`` operator in an iterate scope says: *what I
feed back to a key whose bin is held by the same worker may be applied at once, at the
time it was produced, instead of one round later* -- its results depend on which
records each key gets, not on the round each one arrives in (a minimum label, a sum
to a fixed point, a set of reached vertices).  The embedded engine then applies such
records within the round, pass after pass, until only records for other workers'
bins are left; those go around the loop as before (one exchange: a round).  So an
epoch takes about as many rounds as there are *exchanges* really needed, not as many
as the longest chain of messages.

:func:`local_loop` finds the way back, which the operator then applies itself:

- ``before``: the stateless nodes (``map``, ``filter``, ``flat_map``, ``inspect``,
  ``exchange``, ``concat``) from the operator's output to a feedback edge of its scope,
  each read by the next one only;
- ``feedback``: that feedback edge (no ``max_iterations``: locally applied records go
  around no loop, so the rounds could not be counted for the limit);
- ``after``: the stateless nodes from the feedback to the operator's input, each read
  by the next one only (typically the ``concat`` with the records entering the loop).

Anything else that brings the operator's output back to it (another stateful or a
frontier operator on the way, a second way back) is a :class:`~tstate.errors.GraphError`
naming the operator and the node, raised when the execution is built.

>>> import tstate as ts
>>> flow = ts.Dataflow("f")
>>> inp = flow.input("in")
>>> @flow.iterate(inp)
... def loop(scope, xs):
...     fb = scope.feedback()
...     @flow.stateful(xs.concat(fb.stream), key=lambda x: x, state=int, local_rounds=True)
...     def halve(n, x, ctx):
...         if x > 1:
...             ctx.emit(x // 2)
...         return n + 1
...     fb.connect(halve.map(lambda x: x))
...     return halve
>>> lp = local_loop(flow.graph, flow.graph.index("halve"))
>>> [n.kind for n in lp.before], lp.feedback.kind, [n.kind for n in lp.after]
(['map'], 'feedback', ['concat'])
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import frozen

from tstate.errors import GraphError
from tstate.plan.graph import Graph
from tstate.plan.loops import Feedback
from tstate.plan.stateful import Stateful
from tstate.plan.stateless import Stateless

__all__ = ["LocalLoop", "local_loop"]


@frozen
class LocalLoop:
    """The way back of a ``local_rounds`` operator (see the module docstring)."""

    #: ``(node, input port)``: the input reading the operator's output where the way
    #: back starts (the embedded engine does not wire that edge: the operator applies
    #: ``before`` itself)
    first: tuple[int, int]
    before: tuple[Stateless, ...]
    feedback: Feedback
    feedback_index: int
    after: tuple[Stateless, ...]

    def back(self, t: Any, records: list[Any]) -> tuple[Any, int, list[Any]]:
        """``records`` emitted at ``t`` as they arrive back at the operator's input:
        ``(time, round, records)`` -- the time and round of its epoch the feedback
        gives them (``time`` None: past :data:`~tstate.progress.timestamp.TIME_MAX`,
        dropped), and the records after ``before`` and ``after``."""
        for n in self.before:
            records = n.apply(t, records)
            if not records:
                return t, 0, records
        got = self.feedback.advance(t)
        if got is None:
            return None, 0, []
        t2, k = got
        for n in self.after:
            records = n.apply(t2, records)
            if not records:
                break
        return t2, k, records


def local_loop(graph: Graph, index: int) -> LocalLoop:
    """The way back of stateful node ``index`` (declared ``local_rounds=True``) to itself,
    or a :class:`~tstate.errors.GraphError` saying why it has none local rounds can use."""
    node = graph[index]
    assert isinstance(node, Stateful)
    name = node.name
    if node.scope.depth == 0:
        raise GraphError(f"stateful operator {name!r}: local_rounds=True needs an iterate scope (it is in the root scope)")
    found: Optional[LocalLoop] = None
    for first in graph.consumers(index, 0):
        lp = _walk(graph, index, first)
        if lp is None:
            culprit = _reaches(graph, first[0], index)
            if culprit is not None:
                raise GraphError(
                    f"stateful operator {name!r} (local_rounds=True): its output comes back to it through "
                    f"{culprit!r}, which it cannot apply itself: only map, filter, flat_map, inspect, exchange and "
                    "concat (each read by the next one only) and one feedback may be on the way back"
                )
            continue
        if found is not None:
            raise GraphError(
                f"stateful operator {name!r} (local_rounds=True): its output comes back to it two ways "
                f"(through {found.feedback.name!r} and {lp.feedback.name!r}): give it one way back"
            )
        found = lp
    if found is None:
        raise GraphError(f"stateful operator {name!r} (local_rounds=True): its output never comes back to it")
    if found.feedback.max_iterations is not None:
        raise GraphError(
            f"stateful operator {name!r} (local_rounds=True): feedback {found.feedback.name!r} has max_iterations="
            f"{found.feedback.max_iterations}, but records applied locally go around no loop: drop the limit or "
            "local_rounds"
        )
    return found


def _only_consumer(graph: Graph, i: int) -> Optional[tuple[int, int]]:
    cs = graph.consumers(i, 0)
    return cs[0] if len(cs) == 1 else None


def _walk(graph: Graph, index: int, first: tuple[int, int]) -> Optional[LocalLoop]:
    """The way back starting at input ``first``, if it is a plain one (else None)."""
    scope = graph[index].scope
    before: list[Stateless] = []
    cur: Optional[tuple[int, int]] = first
    while cur is not None:
        n = graph[cur[0]]
        if isinstance(n, Feedback) and n.scope is scope:
            after: list[Stateless] = []
            nxt = _only_consumer(graph, cur[0])
            while nxt is not None and nxt[0] != index:
                m = graph[nxt[0]]
                if not isinstance(m, Stateless) or m.scope is not scope:
                    return None
                after.append(m)
                nxt = _only_consumer(graph, nxt[0])
            if nxt is None:
                return None
            return LocalLoop(first, tuple(before), n, cur[0], tuple(after))
        if not isinstance(n, Stateless) or n.scope is not scope:
            return None
        before.append(n)
        cur = _only_consumer(graph, cur[0])
    return None


def _reaches(graph: Graph, start: int, target: int) -> Optional[str]:
    """The name of a node on a way from ``start`` back to ``target``'s input (the first
    one that is not plain stateless: what makes the way unusable), or None."""
    seen: set[int] = set()
    stack = [(start, [start])]
    while stack:
        i, path = stack.pop()
        if i == target:
            for j in path[:-1]:
                if not isinstance(graph[j], (Stateless, Feedback)):
                    return graph[j].name
            for j in path[:-1]:
                if len(graph.consumers(j, 0)) > 1:
                    return graph[j].name
            return graph[path[0]].name
        if i in seen:
            continue
        seen.add(i)
        for o in range(graph[i].outputs):
            for c, _p in graph.consumers(i, o):
                stack.append((c, path + [c]))
    return None
