"""Which partition owns each bin, and the rescale under way (driver side).

State belongs to bins and every bin is durable after each batch, so the bin→partition
map may change between any two batches.  :class:`Rescaling` holds the map per
boundary and the pending :class:`Step` s of a rescale (all at once, fluid, or
pre-copy: :meth:`tstate.spark.backend.Backend.rescale`); the backend applies one step
before each micro-batch (:meth:`Rescaling.next_step`).  A step names bins by their
code ``boundary << 20 | bin``.

>>> r = Rescaling(2)
>>> r.owners = {5: [0, 1, 0, 1]}
>>> r.plan(4, "all-at-once", 4, 1).steps, r.partitions
(1, 4)
>>> step = r.next_step(); sorted(step.moves.values()), r.owners[5], r.partitions
([2, 3], [0, 1, 2, 3], 4)
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import define, field

from tstate.backend import Rescaled, Strategy, check_strategy
from tstate.errors import ConfigurationError

__all__ = ["BIN_MASK", "Rescaling", "Step", "check_rescale"]

#: a rescale step's bin code is ``boundary << 20 | bin``
BIN_MASK = (1 << 20) - 1


def check_rescale(partitions: int, strategy: Strategy, steps: int, lead: int) -> None:
    """:meth:`tstate.spark.backend.Backend.rescale`'s arguments are usable, else a
    :class:`~tstate.errors.ConfigurationError` naming the one that is not."""
    if not isinstance(partitions, int) or partitions < 1:
        raise ConfigurationError(f"partitions must be an integer >= 1, got {partitions!r}")
    check_strategy(strategy)
    if not isinstance(steps, int) or steps < 1:
        raise ConfigurationError(f"steps must be an integer >= 1, got {steps!r}")
    if not isinstance(lead, int) or lead < 1:
        raise ConfigurationError(f"lead must be an integer >= 1, got {lead!r}")


@define
class Step:
    """One batch of a rescale: ``moves`` (bin code -> partition) change owner at it;
    ``prefetch`` (bin code -> next owner): pre-copy, loaded by the executors during it
    for the hand-over ``ahead`` batches later; ``precopy``: its moves were prefetched."""

    moves: dict[int, int]
    prefetch: dict[int, int] = field(factory=dict)
    ahead: int = 0
    precopy: bool = False

    def moved_bins(self) -> dict[int, frozenset[int]]:
        """Per boundary: the bins this step moves."""
        moved: dict[int, set[int]] = {}
        for code in self.moves:
            moved.setdefault(code >> 20, set()).add(code & BIN_MASK)
        return {b: frozenset(s) for b, s in moved.items()}

    def prefetched(self, root_stateful: "set[int] | frozenset[int]") -> dict[int, tuple[tuple[int, int], ...]]:
        """Per boundary of ``root_stateful`` (loop operators' bins are not prefetched):
        the ``(bin, next owner)`` pairs the executors load during this step."""
        prefetch: dict[int, list[tuple[int, int]]] = {}
        for code, p in self.prefetch.items():
            if code >> 20 in root_stateful:
                prefetch.setdefault(code >> 20, []).append((code & BIN_MASK, p))
        return {b: tuple(s) for b, s in prefetch.items()}


class Rescaling:
    """The bin→partition map per boundary (``owners``), the partitions the next batch
    runs on (``partitions``) and the pending steps of a rescale."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owners: dict[int, list[int]] = {}
        self.steps: list[Step] = []
        self.target: Optional[int] = None

    def plan(self, partitions: int, strategy: Strategy, steps: int, lead: int, graph: Any = None) -> Rescaled:
        """Set a rescale to ``partitions`` under way (arguments checked by the caller;
        ``graph``: names the operators in the schedule)."""
        from tstate.migration.planner import rescale_map

        moves = [
            ((b << 20) | bin_, p)
            for b, owners in sorted(self.owners.items())
            for bin_, p in enumerate(rescale_map(owners, partitions))
            if owners[bin_] != p
        ]
        if strategy == "precopy":
            self.steps = [Step({}, dict(moves), lead - i) for i in range(lead)] + [Step(dict(moves), precopy=True)] if moves else []
        else:
            k = 1 if strategy == "all-at-once" else min(steps, max(1, len(moves)))
            self.steps = [Step(dict(moves[i::k])) for i in range(k)] if moves else []
        if strategy != "precopy":  # (precopy: the lead batches run on the old partitions)
            self.partitions = max(partitions, max((max(o) + 1 for o in self.owners.values()), default=1))
        self.target = partitions
        return Rescaled(partitions, strategy, len(self.steps), self.schedule(graph))

    def schedule(self, graph: Any = None) -> dict[str, tuple[int, ...]]:
        """Per stateful operator whose bins move: the pending steps (batches from the
        next one) moving them (as the embedded engine's: an exchange's bins move with
        the state, but it is no operator with state)."""
        from tstate.plan import Stateful

        at: dict[str, list[int]] = {}
        for i, step in enumerate(self.steps):
            for node in sorted({code >> 20 for code in step.moves}):
                if graph is not None and not isinstance(graph[node], Stateful):
                    continue
                at.setdefault(graph[node].name if graph is not None else str(node), []).append(i)
        return {name: tuple(batches) for name, batches in at.items()}

    def next_step(self) -> Step:
        """Apply the next rescale step; returns it (an empty step: no rescale under way)."""
        if not self.steps:
            if self.target is not None:
                self.partitions = self.target
                self.target = None
            return Step({})
        step = self.steps.pop(0)
        if step.moves and self.target is not None:
            self.partitions = max(self.partitions, self.target)
        for code, p in step.moves.items():
            self.owners[code >> 20][code & BIN_MASK] = p
        if not self.steps and self.target is not None:
            self.partitions = self.target
            self.target = None
        return step
