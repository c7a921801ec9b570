"""Timestamp scopes: the dataflow's root (``int`` epochs) and iterate scopes.

A :class:`Scope` is a value: its name, its depth (the number of enclosing iterate
scopes; the root is ``0``), its parent and whether it is *epoch-sequenced*.  Every
operator node lives in one scope and every stream carries that scope's times: ``int``
epochs at the root, :class:`~tstate.progress.timestamp.Product` ``(epoch, round)`` one
level down.

>>> root = Scope("flow")
>>> loop = Scope("bfs", depth=1, parent=root, sequenced=True)
>>> loop.at(2, 3), loop.round_of(loop.at(2, 3))
(Product(outer=2, inner=8589934595), 3)
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import frozen

from tstate.errors import GraphError
from tstate.progress.timestamp import Product, sequenced, sequenced_round

__all__ = ["Scope"]


@frozen(eq=False)
class Scope:
    """A timestamp scope (see the module docstring); compared by identity, since two
    iterate scopes may share a name."""

    name: str
    depth: int = 0
    parent: Optional["Scope"] = None
    #: epoch-sequenced: every time of epoch ``e - 1`` precedes every time of epoch ``e``
    #: (see :meth:`tstate.dataflow.Dataflow.iterate`)
    sequenced: bool = False

    def at(self, epoch: Any, round: int) -> Any:
        """The time of ``round`` of ``epoch`` inside this iterate scope:
        ``Product(epoch, round)``, or in a sequenced scope
        :func:`~tstate.progress.timestamp.sequenced` ``(epoch, round)``."""
        if self.depth == 0:
            raise GraphError("at() needs an iterate scope")
        return sequenced(epoch, round) if self.sequenced else Product(epoch, round)

    def round_of(self, t: Any) -> int:
        """The round of its epoch that time ``t`` of this scope is (inverse of :meth:`at`)."""
        return sequenced_round(t) if self.sequenced else t.inner  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, depth={self.depth})"
