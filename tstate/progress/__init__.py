"""Timely progress tracking: timestamps, path summaries, antichains, change batches and
the reachability tracker.  One concept per module:

- :mod:`~tstate.progress.timestamp` — ``int`` epochs and :class:`Product` times;
- :mod:`~tstate.progress.summary` — :class:`PathSummary`;
- :mod:`~tstate.progress.frontier` — :class:`Antichain`, :class:`MutableAntichain`;
- :mod:`~tstate.progress.change_batch` — :class:`ChangeBatch`;
- :mod:`~tstate.progress.reachability` — :class:`GraphBuilder`, :class:`Tracker`;
- :mod:`~tstate.progress.reference` — the all-pairs tracker the tests compare with.
"""

from tstate.progress.change_batch import ChangeBatch
from tstate.progress.frontier import Antichain, MutableAntichain
from tstate.progress.reachability import GraphBuilder, Location, Tracker
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import TIME_MAX, Product, Timestamp, less_equal, less_than

__all__ = [
    "Antichain",
    "ChangeBatch",
    "GraphBuilder",
    "Location",
    "MutableAntichain",
    "PathSummary",
    "Product",
    "TIME_MAX",
    "Timestamp",
    "Tracker",
    "less_equal",
    "less_than",
]
