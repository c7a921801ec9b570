"""The notificator: "call me back once time ``t`` is complete at my inputs".

``notify_at(t)`` (with a capability for ``t``, or a time for which the operator holds a
capability ``<= t``) requests a notification.  The contract:

- a notification for ``t`` fires **once the input frontier has passed ``t``** (no input
  frontier element is ``<= t``), i.e. after every record at ``t`` was delivered;
- notifications fire **in time order** (a linear extension of the partial order);
- repeated requests for the same time are **merged**: it fires once;
- each fires **exactly once**, with a :class:`~tstate.capability.Capability` for ``t``
  that is dropped after the handler unless retained.
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol, Sequence

from tstate.capability import Capability
from tstate.progress.frontier import MutableAntichain

__all__ = ["Notificator", "Activatable"]


class Activatable(Protocol):
    """The operator instance a notificator belongs to: asked to run again when a
    notification is requested."""

    def request_activation(self) -> None: ...


class Notificator:
    """Pending notifications of one operator instance (see the module docstring)."""

    __slots__ = ("_op", "_pending")

    def __init__(self, op: Activatable) -> None:
        self._op = op
        self._pending: dict[Any, Capability] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def pending(self) -> list[Any]:
        """The requested times not yet fired, sorted."""
        return sorted(self._pending)

    def notify_at(self, cap: Capability) -> None:
        """Request a notification at ``cap.time``; the notificator owns ``cap``."""
        if cap.time in self._pending:
            cap.drop()
        else:
            self._pending[cap.time] = cap
        self._op.request_activation()

    def ready(self, frontiers: Sequence[MutableAntichain]) -> Iterator[Capability]:
        """Yield the capabilities of notifications whose time every frontier passed,
        smallest first; each is dropped after the consumer's loop body."""
        pending = self._pending
        while pending:
            ready = [t for t in pending if not any(f.less_equal(t) for f in frontiers)]
            if not ready:
                return
            t = min(ready)
            cap = pending.pop(t)
            try:
                yield cap
            finally:
                cap.drop()
