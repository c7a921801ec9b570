"""Which buffered time a stateful runtime processes next: :func:`next_ready`.

Records wait in a time-ordered buffer (``stash``: time -> batches) and timers in their
index (time -> bins); both are walked together, records of a time before its timers.

>>> from tstate.progress.frontier import MutableAntichain
>>> frontier = MutableAntichain([(5, 1)])
>>> next_ready({3: None, 6: None}, {3: None}, frontier, None)     # records at 3 first
(3, 0)
>>> next_ready({}, {3: None}, frontier, None), next_ready({}, {3: None}, frontier, 3)
((3, 1), None)
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable, Optional

from tstate.progress.timestamp import epoch, less_equal

__all__ = ["next_ready"]


def next_ready(stash: Iterable[Any], timers: Iterable[Any], frontier: Any, held: Optional[int]) -> Optional[tuple[Any, int]]:
    """The next buffered time to process: ``(t, 0)`` for records, ``(t, 1)`` for timers
    (``stash`` and ``timers``: their times, sorted), or None.  Ready means: records at
    ``t`` once no earlier time can arrive (``not frontier.less_than(t)``), timers once
    the frontier passed ``t``, nothing at or after epoch ``held`` (a checkpoint
    barrier's, or the time of a move this worker has not made yet) -- and no buffered
    item at a time ``<= t`` is still waiting.  Candidates are walked in lexicographic
    order, a linear extension of the product order, so an item that must come first is
    always met first; with ``int`` times the first one decides."""
    blocked: list[Any] = []
    records = ((t, 0) for t in stash)
    fires = ((t, 1) for t in timers)
    for t, kind in heapq.merge(records, fires):
        ready = not frontier.less_than(t) if kind == 0 else not frontier.less_equal(t)
        if ready and held is not None and epoch(t) >= held:
            ready = False
        if ready and not any(less_equal(b, t) for b in blocked):
            return t, kind
        if type(t) is int:
            return None  # a total order: every later item waits too
        blocked.append(t)
    return None
