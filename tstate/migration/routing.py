"""Routing by configuration: the exchange in front of a stateful operator.

Records at time ``t`` go to the owner of their bin in the configuration in force at
``t`` (:class:`~tstate.migration.configuration.ConfigHistory`).  A reconfiguration may
only take effect at a time no record has been routed at yet — the router remembers the
latest time it routed, which is the earliest time its configuration may still change
(the control frontier); :meth:`Execution.reconfigure` refuses earlier times.  Inside
an iterate scope a configuration holds for whole epochs: a record at ``Product(e, i)``
is routed by the configuration of epoch ``e``, whatever its iteration.
"""

from __future__ import annotations

from typing import Any, Callable

from tstate.engine.channels import ExchangeRouter
from tstate.migration.configuration import ConfigHistory
from tstate.progress.timestamp import epoch

__all__ = ["ConfiguredRouter"]


class ConfiguredRouter(ExchangeRouter):
    """An :class:`ExchangeRouter` whose bin owners change over time."""

    def __init__(self, key: Callable[[Any], Any], workers: int, bins: int, operator: str, history: ConfigHistory) -> None:
        super().__init__(key, workers, bins, operator)
        self.history = history
        self.max_routed: Any = None

    def owners_at(self, time: Any) -> list[int]:
        e = time if type(time) is int else epoch(time)  # inside iterate scopes: by epoch
        if self.max_routed is None or e > self.max_routed:
            self.max_routed = e
        return self.history.owners_at(e)
