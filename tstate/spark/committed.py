"""What a committed micro-batch leaves for the next (:class:`Committed`): the
manifest's ``spark`` meta.

>>> c = Committed(batch=4, frontier=10, fresh=False, timers={"count": {3: 12}})
>>> c.meta(2)["timers"], Committed.of_meta(c.meta(2), 5).timers
({'count': {'3': 12}}, {'count': {3: 12}})
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import define, field

from tstate.spark.held import checked_path
from tstate.spark.output import Part

__all__ = ["Committed"]


@define
class Committed:
    """What the last committed batch leaves for the next: its id, the frontier (None:
    the run finished), the pending timers per operator and bin (the earliest time, or
    in a loop the minimal ``[[epoch, inner], ...]``), the newest event time seen
    (event-time streaming), its held file, its output index and the output parts
    waiting for later times.  ``fresh``: nothing committed or resumed yet."""

    batch: int = -1
    frontier: Optional[int] = 0
    fresh: bool = True
    timers: dict[str, dict[int, Any]] = field(factory=dict)
    newest: Optional[int] = None
    held: Optional[str] = None
    output: Optional[str] = None
    pending: list[Part] = field(factory=list)

    @classmethod
    def of_checkpoint(cls, head: Any) -> "Committed":
        """What checkpoint ``head`` left: a Spark batch's (its ``spark`` meta) or an
        embedded run's (continue from its time)."""
        meta = head.meta.get("spark")
        if meta is None:  # an embedded run's checkpoint: continue from its time
            t = int(head.time)
            meta = {
                "batch": -1, "frontier": t,
                # which bins hold timers is not recorded: every bin is looked at once
                "timers": {op: {str(b): t for b in e.chains} for op, e in head.operators.items()},
            }
        return cls.of_meta(meta, head.id)

    @classmethod
    def of_meta(cls, meta: dict[str, Any], checkpoint_id: int) -> "Committed":
        """The inverse of :meth:`meta` (``checkpoint_id``: named in errors)."""
        return cls(
            batch=int(meta["batch"]),
            frontier=meta["frontier"],
            fresh=False,
            timers={op: {int(b): t for b, t in bins.items()} for op, bins in meta.get("timers", {}).items()},
            newest=meta.get("newest"),
            held=checked_path(meta.get("held"), checkpoint_id),
            output=meta.get("output"),
            pending=[Part.from_builtins(p) for p in meta.get("output_pending", [])],
        )

    def meta(self, partitions: int) -> dict[str, Any]:
        """The manifest's ``spark`` meta of the batch (run on ``partitions`` partitions)."""
        return {
            "batch": self.batch, "frontier": self.frontier, "partitions": partitions, "newest": self.newest,
            "held": self.held, "timers": {op: {str(b): t for b, t in tm.items()} for op, tm in self.timers.items()},
            "output": self.output, "output_pending": [p.to_builtins() for p in self.pending],
        }
