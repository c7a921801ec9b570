"""One worker's way back for a ``local_rounds`` stateful operator (the embedded engine).

The plan's :class:`~tstate.plan.local_rounds.LocalLoop` says how the operator's output
comes back to it; :class:`LocalReturn` runs it on one worker: given a batch the
operator emitted at ``t``, it applies the way back (the stateless nodes and the
feedback's re-timing), sends the records for bins other workers own straight into
their inboxes at the fed-back time -- exactly what the loop would have delivered, as
one round of the scope -- and returns the records for this worker's own bins, which
the operator applies at once, at ``t`` (:mod:`tstate.operators.stateful`).

Progress stays sound: the records sent on are counted at the operator's input at the
fed-back time in the same batch of pointstamp changes as the record being applied
(which is at ``t``, earlier), as the feedback edge itself would have counted them.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from tstate.errors import OperatorError, TstateError
from tstate.plan.local_rounds import LocalLoop
from tstate.progress.shared import SharedProgress

__all__ = ["LocalReturn", "Splitter"]


class Splitter(Protocol):
    """The operator's input channel: records split per worker by their bin's owner at a time."""

    def split(self, records: list[Any], time: Any) -> list[list[Any]]: ...


class LocalReturn:
    """See the module docstring.  ``inboxes``: the operator's input inbox on every
    worker; ``progress``: its pointstamp interface; ``note_round(scope, epoch, k)``: the
    metrics' count of rounds."""

    __slots__ = ("loop", "router", "inboxes", "progress", "worker", "note_round", "scope", "operator")

    def __init__(
        self,
        loop: LocalLoop,
        router: Splitter,
        inboxes: list[Any],
        progress: SharedProgress,
        worker: int,
        note_round: Callable[[str, Any, int], None],
        operator: str,
    ) -> None:
        self.loop = loop
        self.router = router
        self.inboxes = inboxes
        self.progress = progress
        self.worker = worker
        self.note_round = note_round
        self.scope = loop.feedback.scope.name
        self.operator = operator

    def split(self, t: Any, out: list[Any]) -> list[Any]:
        """Send on what of ``out`` (emitted at ``t``) comes back to other workers' bins;
        return what comes back to this worker's, to be applied now."""
        try:
            t2, k, back = self.loop.back(t, out)
        except TstateError:
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {self.operator!r} (local_rounds) on worker {self.worker} at time {t!r}: the way back "
                f"through {', '.join(n.name for n in self.loop.before + self.loop.after)} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if t2 is None or not back:
            return []
        parts = self.router.split(back, t2)
        sent = False
        for w, part in enumerate(parts):
            if part and w != self.worker:
                self.inboxes[w].append((t2, part))
                self.progress.arrived(0, t2)
                sent = True
        if sent:
            self.note_round(self.scope, t2.outer, k)
        return parts[self.worker]
