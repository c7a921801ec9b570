"""The edges of an iterate scope: ``enter``, ``leave`` and ``feedback`` nodes.

They pass batches on unchanged and only re-time them; the re-timing rule is written
once here and called by both engines:

- :meth:`Enter.time_inside`: ``t`` -> ``Product(t, 0)``; in an epoch-sequenced scope
  ``Product(t, t * SEQUENCE_SPAN)`` (an epoch outside ``[0, MAX_SEQUENCED_EPOCH]`` is a
  :class:`~tstate.errors.ProgressError` naming the node);
- :meth:`Leave.time_outside`: ``Product(o, i)`` -> ``o``;
- :meth:`Feedback.next_time`: ``Product(o, i)`` -> ``Product(o, i + step)``, or None
  past ``max_iterations`` (the round of the epoch, in a sequenced scope) or
  :data:`~tstate.progress.timestamp.TIME_MAX`: the summary overflows, the batch is
  dropped.

>>> from tstate.plan.scope import Scope
>>> from tstate.progress.timestamp import Product
>>> loop = Scope("loop", depth=1, parent=Scope("f"))
>>> fb = Feedback(name="fb", scope=loop, step=1, max_iterations=2)
>>> fb.next_time(Product(5, 1)), fb.next_time(Product(5, 2))
(Product(outer=5, inner=2), None)
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from attrs import frozen

from tstate.errors import GraphError, ProgressError
from tstate.plan.node import Node
from tstate.plan.scope import Scope
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import MAX_SEQUENCED_EPOCH, SEQUENCE_SPAN, TIME_MAX, Product

__all__ = ["Enter", "Leave", "Feedback"]


@frozen(kw_only=True, eq=False)
class Enter(Node):
    """Records of the parent scope entering ``scope`` (the node's scope is the inner one)."""

    kind: ClassVar[str] = "enter"

    def time_inside(self, t: Any) -> Product:
        """The time inside the scope of a record entering at ``t``."""
        if not self.scope.sequenced:
            return Product(t, 0)
        if t.__class__ is not int or not 0 <= t <= MAX_SEQUENCED_EPOCH:
            raise ProgressError(
                f"operator {self.name!r}: epoch {t!r} entering a sequenced scope is not an int in "
                f"[0, {MAX_SEQUENCED_EPOCH}]"
            )
        return Product(t, t * SEQUENCE_SPAN)

    def summaries(self) -> list[list[list[PathSummary]]]:
        return [[[PathSummary.enter(self.scope.depth - 1)]]]

    def input_scope(self, port: int) -> Scope:
        assert self.scope.parent is not None
        return self.scope.parent


@frozen(kw_only=True, eq=False)
class Leave(Node):
    """Records leaving iterate scope ``inner`` into the node's scope (its parent)."""

    kind: ClassVar[str] = "leave"
    #: the iterate scope left
    inner: Scope

    def time_outside(self, t: Any) -> Any:
        """The time outside the scope of a record leaving at ``t``."""
        return t.outer

    def summaries(self) -> list[list[list[PathSummary]]]:
        return [[[PathSummary.leave(self.scope.depth + 1)]]]

    def input_scope(self, port: int) -> Scope:
        return self.inner


@frozen(kw_only=True, eq=False)
class Feedback(Node):
    """A loop variable of an iterate scope: records coming back ``step`` rounds later,
    at most ``max_iterations`` rounds into their epoch (None: no limit)."""

    kind: ClassVar[str] = "feedback"
    step: int = 1
    max_iterations: Optional[int] = None

    def __attrs_post_init__(self) -> None:
        if self.scope.depth == 0:
            raise GraphError("feedback() needs an iterate scope: use it inside @flow.iterate")
        if self.step < 1:
            raise GraphError(f"feedback step must be >= 1 (a loop must advance time), got {self.step}")

    def round_of(self, t: Product) -> int:
        """The round of its epoch that loop time ``t`` is."""
        return t.inner - t.outer * SEQUENCE_SPAN if self.scope.sequenced else t.inner

    def next_time(self, t: Product) -> Optional[Product]:
        """The time a record at ``t`` comes back at, or None: dropped (see module docs)."""
        got = self.advance(t)
        return None if got is None else got[0]

    def advance(self, t: Product) -> Optional[tuple[Product, int]]:
        """:meth:`next_time` and the round of its epoch it is (:meth:`round_of`), in
        one call (the embedded engine counts the rounds of every epoch)."""
        inner = t.inner + self.step
        if inner > TIME_MAX:
            return None
        k = inner - t.outer * SEQUENCE_SPAN if self.scope.sequenced else inner
        limit = self.max_iterations
        if limit is not None and k > limit:
            return None
        return Product(t.outer, inner), k

    def summaries(self) -> list[list[list[PathSummary]]]:
        return [[[PathSummary.feedback(self.scope.depth, self.step)]]]
