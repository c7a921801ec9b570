"""Reconfiguration commands: what a user asks for, effective at a timestamp.

- :class:`Rescale` — spread the bins over ``workers`` workers (scale out: new workers
  join idle and receive bins; scale in: leaving workers hand all their bins over);
- :class:`MoveBins` — move the given bins to the given workers;
- :class:`Assign` — install a complete bin → worker map.

Each carries a ``strategy``: ``"all-at-once"`` (one step), ``"fluid"`` (one bin per
step), ``"batched"`` (steps in which every worker sends at most one bin and receives
at most one bin, as in Megaphone) or ``"precopy"`` (Rhino-style: the steps of
``"batched"``, but each moving bin's new owner loads the bin ahead of its step from the
latest committed checkpoint chain while the old owner keeps processing, and at the step
only the bin's changes since that checkpoint -- a delta in the incremental checkpoint
format -- are handed over; without checkpoints, or for a bin with no usable committed
checkpoint, the whole bin is shipped instead and counted as a fallback:
:mod:`tstate.engine.precopy`).  Steps take effect at consecutive times
``t, t + spacing, ...``.  ``operator`` restricts a command to one stateful operator
(by name); by default it applies to all of them.

>>> Rescale(8)
Rescale(workers=8, strategy='batched', operator=None, spacing=1)
"""

from __future__ import annotations

from typing import Optional, Union

from attrs import field, frozen

from tstate.errors import ConfigurationError
from tstate.backend import DEFAULT_STRATEGY, STRATEGIES, Strategy, check_strategy

__all__ = ["Rescale", "MoveBins", "Assign", "Command", "STRATEGIES", "Strategy"]


def _check_strategy(instance: object, attribute: object, value: str) -> None:
    check_strategy(value)


def _check_spacing(instance: object, attribute: object, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"spacing must be an integer >= 1, got {value!r}")


@frozen
class Rescale:
    """Spread the bins over ``workers`` workers, moving as few as possible
    (:func:`~tstate.migration.planner.rescale_map`), in steps per ``strategy`` (see the
    module docstring).  With ``strategy="precopy"`` each moving bin is loaded by its new
    owner from the latest committed checkpoint a few epochs before its step and only its
    changes since that checkpoint are handed over at the step (a whole bin without a
    usable checkpoint: ``Execution.precopy.stats.fallbacks``)."""

    workers: int
    strategy: Strategy = field(default=DEFAULT_STRATEGY, validator=_check_strategy)
    operator: Optional[str] = None
    spacing: int = field(default=1, validator=_check_spacing)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigurationError(f"Rescale: workers must be an integer >= 1, got {self.workers!r}")


@frozen
class MoveBins:
    """Move each bin in ``moves`` (bin → worker) to its worker, in steps per
    ``strategy`` (see the module docstring; ``"precopy"``: preloaded from the latest
    committed checkpoint, only the changes since handed over, as for :class:`Rescale`)."""

    moves: dict[int, int] = field(converter=dict)
    strategy: Strategy = field(default="all-at-once", validator=_check_strategy)
    operator: Optional[str] = None
    spacing: int = field(default=1, validator=_check_spacing)


@frozen
class Assign:
    """Install the complete map ``owners[bin] = worker``."""

    owners: tuple[int, ...] = field(converter=tuple)
    strategy: Strategy = field(default="all-at-once", validator=_check_strategy)
    operator: Optional[str] = None
    spacing: int = field(default=1, validator=_check_spacing)


Command = Union[Rescale, MoveBins, Assign]
