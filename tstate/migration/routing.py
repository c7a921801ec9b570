"""Routing by configuration: who owns a bin at a time, for the exchange in front of a
stateful operator.

Records at time ``t`` go to the owner of their bin in the configuration in force at
``t`` (:class:`~tstate.migration.configuration.ConfigHistory`).  A reconfiguration may
only take effect at a time no record has been routed at yet -- :class:`ConfiguredOwners`
remembers the latest time it was asked about, which is the earliest time its
configuration may still change (the control frontier); :meth:`Execution.reconfigure`
refuses earlier times.  Inside an iterate scope a configuration holds for whole epochs:
a record at ``Product(e, i)`` is routed by the configuration of epoch ``e``, whatever
its iteration.

:class:`Owners` is the exchange's view of an assignment (a :class:`~typing.Protocol`
defined here, at migration's level): the engine's router
(:class:`tstate.engine.channels.ExchangeRouter`) takes any, a fixed one or this one,
so migration names no engine type.
"""

from __future__ import annotations

from typing import Any, Protocol

from tstate.migration.configuration import ConfigHistory
from tstate.progress.timestamp import epoch

__all__ = ["Owners", "ConfiguredOwners"]


class Owners(Protocol):
    """The bin -> worker map in force for records at a time."""

    def owners_at(self, time: Any) -> list[int]:
        """``owners[b]`` is the worker owning bin ``b`` for records at ``time``."""
        ...


class ConfiguredOwners:
    """:class:`Owners` that change over time, per a :class:`ConfigHistory`; remembers
    the latest epoch routed (:attr:`max_routed`, None before any)."""

    __slots__ = ("history", "max_routed")

    def __init__(self, history: ConfigHistory) -> None:
        self.history = history
        self.max_routed: Any = None

    def owners_at(self, time: Any) -> list[int]:
        e = time if type(time) is int else epoch(time)  # inside iterate scopes: by epoch
        if self.max_routed is None or e > self.max_routed:
            self.max_routed = e
        return self.history.owners_at(e)
