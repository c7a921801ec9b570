"""Routing by configuration: the exchange in front of a stateful operator.

Records at time ``t`` go to the owner of their bin in the configuration in force at
``t`` (:class:`~tstate.migration.configuration.ConfigHistory`).  A reconfiguration may
only take effect at a time no record has been routed at yet — the router remembers the
latest time it routed, which is the earliest time its configuration may still change
(the control frontier); :meth:`Execution.reconfigure` refuses earlier times.
"""

from __future__ import annotations

from typing import Any, Callable

from tstate.engine.channels import ExchangeRouter
from tstate.migration.configuration import ConfigHistory

__all__ = ["ConfiguredRouter"]


class ConfiguredRouter(ExchangeRouter):
    """An :class:`ExchangeRouter` whose bin owners change over time."""

    def __init__(self, key: Callable[[Any], Any], workers: int, bins: int, operator: str, history: ConfigHistory) -> None:
        super().__init__(key, workers, bins, operator)
        self.history = history
        self.max_routed: Any = None

    def owners_at(self, time: Any) -> list[int]:
        if self.max_routed is None or time > self.max_routed:
            self.max_routed = time
        return self.history.owners_at(time)
