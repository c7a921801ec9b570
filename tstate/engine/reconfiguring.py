"""Reconfiguring a running execution: :class:`Reconfiguring`, the part of the embedded
engine's :class:`~tstate.engine.execution.Execution` (a base class of it) that applies
a :mod:`~tstate.migration.commands` command -- ``Rescale``, ``MoveBins``, ``Assign`` --
from a time on: each stateful operator's configuration history gets the steps that
take its bins from their owners then to the command's (:func:`target_owners`), and its
runtimes re-read their outgoing moves.

>>> target_owners(MoveBins({1: 0}), [0, 1, 0, 1], workers=2)
[0, 0, 0, 1]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from tstate.backend import DEFAULT_STRATEGY, Strategy
from tstate.errors import ConfigurationError
from tstate.migration.commands import Assign, MoveBins, Rescale
from tstate.migration.planner import plan, rescale_map

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.precopy import PreCopy
    from tstate.io.inputs import InputHandle
    from tstate.metrics import Metrics
    from tstate.migration.configuration import ConfigHistory
    from tstate.migration.routing import ConfiguredOwners
    from tstate.plan import Graph

__all__ = ["Reconfiguring", "target_owners"]


def target_owners(command: Any, current: list[int], workers: int) -> list[int]:
    """The owner of every bin once ``command`` is carried out, from the owners
    ``current`` on an execution with a pool of ``workers`` workers; a
    :class:`~tstate.errors.ConfigurationError` if it cannot be."""
    if isinstance(command, Rescale):
        if command.workers > workers:
            raise ConfigurationError(
                f"cannot rescale to {command.workers} workers: the execution has a pool of {workers} "
                "(start it with max_workers=...)"
            )
        return rescale_map(current, command.workers)
    if isinstance(command, MoveBins):
        target = list(current)
        for b, w in command.moves.items():
            if not 0 <= b < len(target) or not 0 <= w < workers:
                raise ConfigurationError(f"MoveBins: bin {b} -> worker {w} is out of range")
            target[b] = w
        return target
    if isinstance(command, Assign):
        target = list(command.owners)
        if len(target) != len(current) or any(not 0 <= w < workers for w in target):
            raise ConfigurationError(f"Assign: needs {len(current)} owners, each a worker below {workers}")
        return target
    raise ConfigurationError(f"not a reconfiguration command: {command!r}")


class Reconfiguring:
    """Reconfiguration commands applied to an execution (see the module docstring)."""

    if TYPE_CHECKING:  # (the execution's: see Execution)
        graph: Graph
        workers: int
        configs: dict[int, ConfigHistory]
        operators: list[list[Any]]
        metrics: Metrics
        precopy: PreCopy
        _owners: dict[int, ConfiguredOwners]
        _inputs: list[InputHandle]

    def stateful_operators(self) -> list[str]:
        return [self.graph[n].name for n in self.configs]

    def earliest_reconfiguration(self) -> int:
        """The earliest time a reconfiguration can take effect: after every time a
        record was routed at, and not before any input's current epoch."""
        t = 0
        for o in self._owners.values():
            if o.max_routed is not None:
                t = max(t, o.max_routed + 1)
        for h in self._inputs:
            if not h.closed and type(h.time) is int:
                t = max(t, h.time)
        if self.metrics.moves:  # a step already carried out cannot be superseded
            t = max(t, max(m.time for m in self.metrics.moves) + 1)
        return t

    def reconfigure(self, command: Any, at: Optional[int] = None) -> dict[str, list[int]]:
        """Apply a :mod:`~tstate.migration.commands` command from time ``at`` (default:
        the earliest possible); returns the step times per operator.  Records before
        ``at`` are processed by the old owners, records at or after by the new ones."""
        earliest = self.earliest_reconfiguration()
        if at is None:
            at = earliest
        if type(at) is not int or at < earliest:
            raise ConfigurationError(
                f"cannot reconfigure at time {at!r}: records up to time {earliest - 1} may already be routed; "
                f"the earliest possible time is {earliest}"
            )
        nodes = [n for n in self.configs if command.operator in (None, self.graph[n].name)]
        if not nodes:
            raise ConfigurationError(
                f"no stateful operator named {command.operator!r} (have: {', '.join(self.stateful_operators()) or 'none'})"
            )
        out: dict[str, list[int]] = {}
        for n in nodes:
            spec = self.graph[n]
            history = self.configs[n]
            history.schedule(at, [])  # newest command wins: drop later steps
            self.precopy.forget(n, at)
            current = history.owners_at(at)
            target = target_owners(command, current, self.workers)
            out[spec.name] = history.schedule(at, plan(current, target, command.strategy), command.spacing)
            if command.strategy == "precopy":
                self.precopy.plan(n, [m for m in history.moves() if m[0] >= at])
            for w in range(self.workers):
                op = self.operators[w][n]
                op.refresh_moves()  # type: ignore[attr-defined]
                op.request_activation()
        return out

    def rescale(
        self, workers: int, at: Optional[int] = None, strategy: Strategy = DEFAULT_STRATEGY, operator: Optional[str] = None
    ) -> dict[str, list[int]]:
        """Spread the bins of stateful operators over ``workers`` workers from time
        ``at``, in steps per ``strategy`` (see :class:`~tstate.migration.commands.Rescale`)."""
        return self.reconfigure(Rescale(workers, strategy=strategy, operator=operator), at=at)
