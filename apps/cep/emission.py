"""Match emission: turning completed matches into :class:`~apps.cep.matcher.Match`
values, in order, under the pattern's after-match skip strategy.

A completed match arrives as ``(node id, start time, start event id, event id)`` (a
"potential"; it holds one reference on its buffer node).  With ``no_skip`` the
potentials of one call are emitted at once, ordered by their first event, then by the
event that completed them, then by their event ids.  With another strategy a match is
held back (``KeyState.held``, in that order) while a partial match that started
earlier is still alive (as Flink does); releasing it prunes the partial and held
matches the strategy skips.
"""

from __future__ import annotations

import bisect
from typing import Any

from apps.cep.buffer import chain, release
from apps.cep.errors import AfterMatchSkipError
from apps.cep.pattern import Pattern, SkipKind
from apps.cep.state import KeyState

__all__ = ["MatchEmitter"]


class MatchEmitter:
    """Emission of the matches of ``pattern`` (see the module docstring); ``match``:
    the class of the matches it builds (``match(events by stage, first time, last
    time, positive stages)``); ``report_timeouts``: whether timed-out partial matches
    are reported (when not, partial matches a held match dooms are dropped early)."""

    def __init__(self, pattern: Pattern, match: Any, report_timeouts: bool) -> None:
        self._match = match
        self.skip = pattern.skip
        self._names = pattern.names
        self._positive = tuple(s.name for s in pattern.stages if not s.negative)
        self._no_skip = pattern.skip.kind is SkipKind.NO_SKIP
        self._drop_doomed = not report_timeouts and pattern.skip.kind in (
            SkipKind.SKIP_TO_NEXT,
            SkipKind.SKIP_PAST_LAST_EVENT,
        )
        index = {n: i for i, n in enumerate(self._names)}
        self._skip_stage = index.get(pattern.skip.stage) if pattern.skip.stage else None

    def materialize(self, st: KeyState, nid: int) -> Any:
        """The match (or timed-out partial match) whose newest buffer node is ``nid``."""
        names = self._names
        events = st.events
        groups: dict[int, list[Any]] = {}
        nodes = chain(st, nid)
        for n in nodes:
            groups.setdefault(n[1], []).append(events[n[0]])
        return self._match(
            {names[k]: tuple(groups[k]) for k in sorted(groups)},
            st.times[nodes[0][0]],
            st.times[nodes[-1][0]],
            self._positive,
        )

    def emit(self, st: KeyState, potentials: list, out: list[Any], seq: int) -> None:
        """Emit the completed matches ``potentials`` of event ``seq`` (and the held
        matches nothing holds back any more) into ``out``, in order."""
        if self._no_skip:
            if len(potentials) > 1:
                potentials.sort(key=lambda m: self._key(st, m))
            for m in potentials:
                out.append(self.materialize(st, m[0]))
                release(st, m[0])
            return
        held = st.held
        for m in potentials:
            self._hold(st, m)
        self._release_held(st, out)
        if self._drop_doomed and held and potentials:
            # A run that shares its start with a held match can never yield a match that
            # survives (the held match is emitted first and prunes it, or is pruned
            # together with it), and with timeouts unreported it has no other effect:
            # drop it now rather than evaluate it until then.
            for m in potentials:
                self._drop_runs_from(st, m[2])

    def _key(self, st: KeyState, m: tuple[int, Any, int, int]) -> tuple:
        return (m[2], m[3], tuple((n[0], n[1]) for n in chain(st, m[0])))

    def _hold(self, st: KeyState, m: tuple[int, Any, int, int]) -> None:
        """Insert ``m`` into the held matches, ordered by (start, completion, events)."""
        held = st.held
        k = (m[2], m[3])
        i = bisect.bisect_right(held, k, key=lambda x: (x[2], x[3]))
        if i and (held[i - 1][2], held[i - 1][3]) == k:  # a tie: order by event ids
            lo = bisect.bisect_left(held, k, key=lambda x: (x[2], x[3]))
            mk = self._key(st, m)
            i = lo + bisect.bisect_right([self._key(st, h) for h in held[lo:i]], mk)
        held.insert(i, m)

    def _drop_runs_from(self, st: KeyState, start_id: int) -> None:
        runs = st.runs
        lo = bisect.bisect_left(runs, start_id, key=lambda r: r[3])
        hi = lo
        while hi < len(runs) and runs[hi][3] == start_id:
            release(st, runs[hi][1])
            hi += 1
        if hi > lo:
            del runs[lo:hi]

    def _release_held(self, st: KeyState, out: list[Any]) -> None:
        held = st.held
        while held:
            m = held[0]
            runs = st.runs
            if runs and runs[0][3] < m[2]:
                break  # a partial match that started earlier is still alive
            del held[0]
            nodes = chain(st, m[0])
            out.append(self.materialize(st, m[0]))
            pid, inclusive = self._pruning_id(nodes, st)
            if pid is not None:
                k = 0
                while k < len(runs) and (
                    runs[k][3] <= pid if inclusive else runs[k][3] < pid
                ):
                    release(st, runs[k][1])
                    k += 1
                if k:
                    st.runs = runs[k:]
                k = 0
                while k < len(held) and (
                    held[k][2] <= pid if inclusive else held[k][2] < pid
                ):
                    release(st, held[k][0])
                    k += 1
                if k:
                    del held[:k]
            release(st, m[0])

    def _pruning_id(self, nodes: list[list[int]], st: KeyState) -> tuple[int | None, bool]:
        kind = self.skip.kind
        if kind is SkipKind.SKIP_TO_NEXT:
            return nodes[0][0], True
        if kind is SkipKind.SKIP_PAST_LAST_EVENT:
            return nodes[-1][0], True
        k = self._skip_stage
        ids = [n[0] for n in nodes if n[1] == k]
        pid = (ids[0] if kind is SkipKind.SKIP_TO_FIRST else ids[-1]) if ids else None
        if self.skip.throw_on_miss and (pid is None or pid == nodes[0][0]):
            self._skip_error(nodes, st, pid is None)
        return pid, False

    def _skip_error(self, nodes: list[list[int]], st: KeyState, missing: bool) -> None:
        names = self._names
        events = st.events
        match: dict[str, list[Any]] = {}
        for n in nodes:
            match.setdefault(names[n[1]], []).append(events[n[0]])
        how = "first" if self.skip.kind is SkipKind.SKIP_TO_FIRST else "last"
        if missing:
            raise AfterMatchSkipError(
                f"after match skip to {how} {self.skip.stage!r}: the match {match!r} has no event for "
                f"{self.skip.stage!r} (throw_exception_on_miss)"
            )
        raise AfterMatchSkipError(
            f"after match skip to {how} {self.skip.stage!r}: the target is the first event of the match "
            f"{match!r}, so the next match would start where this one did (throw_exception_on_miss)"
        )
