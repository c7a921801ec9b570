"""Durations given as ``datetime.timedelta`` or as numbers in the stream's time unit.

``within()``, ``lateness`` and ``epoch`` accept either.  A number is in the unit of
the timestamps (minutes, if the events are timed in minutes); a ``timedelta`` is
converted with the stream's *time unit* (the duration of 1 of a numeric timestamp),
or kept as it is when the timestamps are ``datetime`` values (then no unit is needed:
``datetime - datetime`` is a ``timedelta``).

>>> import datetime as dt
>>> resolve(dt.timedelta(hours=3), dt.timedelta(minutes=1), "within")
180
>>> resolve(dt.timedelta(seconds=90), dt.timedelta(minutes=1), "within")
1.5
>>> resolve(180, None, "within"), resolve(dt.timedelta(hours=1), None, "within")
(180, datetime.timedelta(seconds=3600))
"""

from __future__ import annotations

import datetime as dt
import numbers
from typing import Any, Optional, Union

from apps.cep.errors import PatternError

__all__ = ["Duration", "in_units", "is_duration", "resolve"]

#: a duration as the API takes it
Duration = Union[int, float, dt.timedelta]


def is_duration(value: Any) -> bool:
    """A ``timedelta`` or a real number (not a bool)."""
    return isinstance(value, dt.timedelta) or (
        isinstance(value, numbers.Real) and not isinstance(value, bool)
    )


def in_units(d: dt.timedelta, unit: dt.timedelta) -> Union[int, float]:
    """``d`` in multiples of ``unit``: an ``int`` when it divides exactly."""
    if unit <= dt.timedelta(0):
        raise PatternError(f"the time unit must be a positive timedelta, got {unit!r}")
    q, r = divmod(d, unit)
    return int(q) if not r else d / unit


def resolve(d: Any, unit: Optional[dt.timedelta], what: str) -> Any:
    """``d`` as the matcher compares it with timestamp differences: a number stays a
    number; a ``timedelta`` becomes a number of ``unit`` (when ``unit`` is given) or
    stays a ``timedelta`` (datetime timestamps).  ``what`` names the argument in errors."""
    if d is None or isinstance(d, bool):
        return d
    if isinstance(d, dt.timedelta):
        return d if unit is None else in_units(d, unit)
    if isinstance(d, numbers.Real):
        return d
    raise PatternError(f"{what}: expected a datetime.timedelta or a number, got {d!r}")
