"""The flight-delay patterns of the CEP sample app (the app module comes later).

Events are :class:`Flight` departures keyed by ``origin`` airport; event time is
:func:`time_minutes` (minutes since the Unix epoch), so ``within`` is in minutes.

* :func:`delay_cascade` -- a departure delayed more than 30 minutes followed by two or
  more departures each delayed more than the previous one, within 3 hours.  Relaxed
  contiguity (other departures may come in between; a rise is the *first* later
  departure delayed more than the previous one of the cascade), an iterative condition
  (``ctx.previous()``), and ``skip_past_last_event``: every departure belongs to at most
  one reported cascade, and a cascade is reported as soon as its second rise is seen
  (once no cascade that started earlier is still open, as Flink does).
* :func:`recovery` -- a departure delayed more than 60 minutes followed by an on-time
  departure (delay <= 0) within 2 hours, with no other departure delayed more than 60
  minutes in between.  The first on-time departure after the delay is taken (relaxed
  contiguity); ``no_skip``, because the negation already makes matches disjoint (a new
  big delay cancels the previous partial match), so matches are reported immediately.

:func:`read_flights` loads rows of ``flights-3m.parquet`` as :class:`Flight` objects.

:class:`FlightEvent` is the same departure as the dataflow app streams it
(:func:`apps.cep.source.flight_source`): its time is already in whole minutes
(``minute``), so the event time is an attribute read and the events are cheap to build
and to encode in checkpoints.  The patterns read only ``delay``, so they (and the
hand-written baselines) accept either class.
"""

from __future__ import annotations

from pathlib import Path

import datetime as dt
from collections.abc import Iterator
from typing import Optional

from attrs import define, frozen

from apps.cep.pattern import AfterMatchSkip, Pattern

__all__ = [
    "CASCADE_MIN_DELAY",
    "CASCADE_WINDOW",
    "DATA_PATH",
    "RECOVERY_MIN_DELAY",
    "RECOVERY_WINDOW",
    "RISING_DELAYS_SQL",
    "Flight",
    "FlightEvent",
    "delay_cascade",
    "read_flights",
    "recovery",
    "time_minutes",
]

# the shared data set lives beside the repository (``../shared/data``)
DATA_PATH = str(Path(__file__).resolve().parents[3] / "shared" / "data" / "flights-3m.parquet")

CASCADE_MIN_DELAY = 30  # minutes: the first departure of a cascade is delayed more
CASCADE_WINDOW = 3 * 60  # minutes
RECOVERY_MIN_DELAY = 60  # minutes: the delay a recovery recovers from
RECOVERY_WINDOW = 2 * 60  # minutes

_EPOCH = dt.datetime(1970, 1, 1)
_MINUTE = dt.timedelta(minutes=1)


@frozen
class Flight:
    """One departure (a row of ``flights-3m.parquet``)."""

    date: dt.datetime
    delay: int
    distance: int
    origin: str
    destination: str


@define(unsafe_hash=True)
class FlightEvent:
    """One departure as the dataflow streams it: ``minute`` is the departure time in
    whole minutes since 1970-01-01 (the event time, see :func:`time_minutes`).  Only
    ``minute``, ``delay`` and ``origin`` are required; ``distance`` and ``destination``
    may be missing (None) in an input file.

    A slotted attrs class, hashable by value but not frozen (building one costs half as
    much as a frozen one): treat it as immutable -- matches share the event objects."""

    minute: int
    delay: int
    distance: Optional[int]
    origin: str
    destination: Optional[str]

    @property
    def date(self) -> dt.datetime:
        """The departure time as a naive UTC ``datetime``."""
        return _EPOCH + self.minute * _MINUTE

    @classmethod
    def from_flight(cls, f: Flight) -> FlightEvent:
        return cls(time_minutes(f), f.delay, f.distance, f.origin, f.destination)


def time_minutes(flight: Flight) -> int:
    """Event time of a flight: whole minutes since 1970-01-01 (dates are naive UTC)."""
    return (flight.date - _EPOCH) // _MINUTE


def delay_cascade() -> Pattern:
    """first (delay > 30) -> rise{2,} (each delayed more than the previous), within 3 h."""
    return (
        Pattern.begin("first", skip=AfterMatchSkip.skip_past_last_event())
        .where(lambda f: f.delay > CASCADE_MIN_DELAY)
        .followed_by("rise")
        .where(lambda f, ctx: f.delay > ctx.previous().delay)
        .times_or_more(2)
        .within(CASCADE_WINDOW)
    )


def recovery() -> Pattern:
    """delayed (delay > 60) -> on_time (delay <= 0), no other delay > 60 in between,
    within 2 h."""
    return (
        Pattern.begin("delayed", skip=AfterMatchSkip.no_skip())
        .where(lambda f: f.delay > RECOVERY_MIN_DELAY)
        .not_followed_by("another_delay")
        .where(lambda f: f.delay > RECOVERY_MIN_DELAY)
        .followed_by("on_time")
        .where(lambda f: f.delay <= 0)
        .within(RECOVERY_WINDOW)
    )


def read_flights(
    path: str = DATA_PATH, start: int = 0, stop: int | None = None
) -> list[Flight]:
    """Rows ``start..stop`` of the parquet file as :class:`Flight` objects (in file
    order, which is date order)."""
    return list(iter_flights(path, start, stop))


def iter_flights(
    path: str = DATA_PATH, start: int = 0, stop: int | None = None
) -> Iterator[Flight]:
    import pyarrow.parquet as pq

    table = pq.read_table(
        path, columns=["date", "delay", "distance", "origin", "destination"]
    )
    if stop is None:
        stop = table.num_rows
    table = table.slice(start, max(0, stop - start))
    cols = [
        table.column(c).to_pylist()
        for c in ("date", "delay", "distance", "origin", "destination")
    ]
    for row in zip(*cols):
        yield Flight(*row)


#: A MATCH_RECOGNIZE query over the flights (Flink's text): a delay above 30 minutes,
#: two or more rising delays, then a falling one, within three hours, per origin
RISING_DELAYS_SQL = """
    PARTITION BY origin
    ORDER BY date
    MEASURES A.date AS start, A.delay AS first_delay, COUNT(B.*) AS rises, C.date AS stop, C.delay AS end_delay
    ONE ROW PER MATCH
    AFTER MATCH SKIP PAST LAST ROW
    PATTERN (A B{2,}? C) WITHIN INTERVAL '3' HOUR
    DEFINE
        A AS A.delay > 30,
        B AS B.delay > LAST(delay, 1),
        C AS C.delay < LAST(delay, 1)
"""
