"""A brute-force reference matcher: the oracle of the property tests.

It does not build an automaton.  For a short event sequence it enumerates every
assignment of events to stages ("prefixes": strictly increasing event positions, each
labelled with a positive stage) and checks the rules below directly; a small simulation
over time then applies ``within``, timeouts and the after-match skip strategies.  It is
exponential and meant for sequences of a dozen events at most.

The rules -- our reading of Flink CEP's semantics (``NFA`` + ``NFACompiler``), stated
declaratively.  ``T_s`` is stage ``s``'s condition, ``U_s`` its stop (``until``)
condition, ``N`` a negative stage's condition; conditions see the partial match as it
was before the event under test (the events assigned so far).

1. *Take.*  An event assigned to stage ``s`` satisfies ``T_s`` (and not ``U_s``).
   Stage ``s`` gets 0 events (only if optional) or between ``min`` and ``max``.
   A match has at least one event; it may start at any event (stages before its first
   event must be optional).
2. *Gaps.*  Between two consecutive assigned events ``p`` (stage ``s``) and ``q`` (stage
   ``t``), the skipped events ``g`` must satisfy:

   * ``t == s`` (the stage continues), by the stage's inner contiguity: strict -- no
     gap; relaxed -- ``not T_s(g) and not U_s(g)``; any -- ``not U_s(g)``;
   * ``t > s`` (every positive stage in between is optional and skipped), by ``t``'s own
     contiguity: strict (``next``) -- no gap; relaxed (``followed_by``) -- ``not T_t(g)``;
     any (``followed_by_any``) -- nothing.
3. *not_followed_by N* between positive stages ``a`` and ``b``: no event after the first
   event of ``a`` satisfies ``N`` -- neither skipped events nor events taken by ``a`` --
   up to the first event of a later stage; an event taken (by ``a`` or by that later
   stage) may satisfy ``N`` only if the match ends at it (Flink keeps the matches a NOT
   event completes but drops every partial match it touches).  As the last stage (it
   needs ``within``) the forbidden zone runs until the window closes and the match is
   emitted then (it waits from its last event on, see the deviations in
   :mod:`apps.cep.nfa`).
4. *not_next N* after positive stage ``a``: for every event ``p`` taken by ``a`` once
   ``a`` has its minimum count, the event right after ``p`` must not satisfy ``N`` (it
   would kill the partial match).  As the last stage, the match is emitted at the event
   after its last event, if that event does not satisfy ``N``.
5. *within W*: every event of a match, and the event that completes it, lie less than
   ``W`` after the first one.
6. *Partial matches* (what times out, and what holds back matches under a skip
   strategy): a prefix is alive after event ``j`` if no rule killed it and it can still
   wait in some way: continuing its last stage ``s`` (below its max, every later event
   allowed by rule 2's inner rule), waiting for a later stage ``t`` (``s`` at its min,
   ``t`` not strict, every later event allowed by ``t``'s rule; Flink creates this
   branch at the first event after ``p``), waiting for a trailing ``not_followed_by``
   window, or, right after its last event, sitting in the state that follows it.  When
   ``W`` has passed since its first event it times out (time ``start + W``); what waits
   for a trailing ``not_followed_by`` becomes a match instead.
7. *Emission.*  Without a skip strategy every match is emitted when it completes.  With
   one, a completed match waits until no alive partial match started before it; then the
   earliest (by first event, then completion, then event ids) is emitted and prunes the
   partial and waiting matches that started at/before its first event (skip_to_next),
   at/before its last event (skip_past_last_event), or strictly before the first/last
   event of the named stage (skip_to_first/last; nothing when the stage is empty).
8. *Greedy* (a quantified stage ``s`` with ``greedy()``, min < max; modelled for
   mandatory stages without ``until``): the partial match cannot leave ``s`` on an
   event ``s`` would take -- the event after the last event of ``s`` must not satisfy
   ``T_s``, and while it waits for the next (mandatory) stage or for a trailing
   ``not_followed_by`` window, no event may satisfy ``T_s``; a ``not_next`` right after
   ``s`` neither kills nor completes on an event satisfying ``T_s``.  As Flink checks
   whether a match is complete on the event just taken, a match never ends with a
   greedy stage that has (optional) stages after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrs import define

from apps.cep.matcher import Match, TimedOut
from apps.cep.errors import AfterMatchSkipError
from apps.cep.pattern import Contiguity, Pattern, SkipKind, StageKind

__all__ = ["RefResult", "reference_run"]


class _Ctx:
    """The context a condition sees: the events assigned so far."""

    def __init__(
        self, names: Sequence[str], prefix: tuple, events: Sequence[Any], ts: Any
    ) -> None:
        self._names = names
        self._prefix = prefix
        self._events = events
        self.timestamp = ts

    def events(self, stage: str) -> list[Any]:
        k = self._names.index(stage)
        return [self._events[i] for i, s in self._prefix if s == k]

    def last(self, stage: str) -> Any:
        evs = self.events(stage)
        return evs[-1] if evs else None

    def previous(self) -> Any:
        return self._events[self._prefix[-1][0]] if self._prefix else None

    def all_events(self) -> list[Any]:
        return [self._events[i] for i, _ in self._prefix]


@define
class RefResult:
    """``matches``: (step, Match) in emission order; ``timeouts``: (step, TimedOut).
    A step is ``("advance", i)`` (before event i), ``("event", i)`` or ``("end",)``."""

    matches: list[tuple[tuple, Match]]
    timeouts: list[tuple[tuple, TimedOut]]


def reference_run(
    pattern: Pattern, stream: Sequence[tuple[Any, Any]], end_time: Any = None
) -> RefResult:
    """Run ``pattern`` over ``stream`` = [(event, timestamp), ...] (timestamps
    non-decreasing) as if ``advance_time(ts)`` were called before every event and
    ``advance_time(end_time)`` at the end (skipped when None)."""
    pattern.validate()
    stages = pattern.stages
    names = [s.name for s in stages]
    events = [e for e, _ in stream]
    times = [t for _, t in stream]
    n = len(events)
    W = pattern.window
    pos = [i for i, s in enumerate(stages) if not s.negative]
    last_pos = pos[-1]
    ends_nfb = stages[-1].kind is StageKind.NOT_FOLLOWED_BY
    ends_nn = stages[-1].kind is StageKind.NOT_NEXT

    def holds(cond: Any, i: int, prefix: tuple) -> bool:
        if cond is None:
            return True
        return bool(cond(events[i], _Ctx(names, prefix, events, times[i])))

    def T(s: int, i: int, prefix: tuple) -> bool:
        return holds(stages[s].condition, i, prefix)

    def U(s: int, i: int, prefix: tuple) -> bool:
        return stages[s].until is not None and holds(stages[s].until, i, prefix)

    def maxc(s: int) -> float:
        m = stages[s].max_times
        return float("inf") if m is None else m

    def count(prefix: tuple, s: int) -> int:
        return sum(1 for _, k in prefix if k == s)

    def later_positive(s: int) -> list[int]:
        """Positive stages reachable after s: up to and including the first mandatory one."""
        out = []
        for t in pos:
            if t > s:
                out.append(t)
                if not stages[t].optional:
                    break
        return out

    def negatives_after(s: int) -> list[int]:
        """Negative stages between s and the next positive stage."""
        out = []
        for k in range(s + 1, len(stages)):
            if not stages[k].negative:
                break
            out.append(k)
        return out

    def greedy(s: int) -> bool:
        st = stages[s]
        return st.greedy and (st.looping or st.min_times != st.max_times)

    def greedy_blocks(s: int, prefix: tuple, p: int, upto: int, t: int | None) -> bool:
        """Rule 8: leaving greedy stage s after its event p, towards stage t (None: the
        trailing not_followed_by), with events p+1..upto seen: violated?"""
        if not greedy(s) or upto <= p:
            return False
        if T(s, p + 1, prefix):
            return True
        nexts = [k for k in range(s + 1, len(stages)) if not stages[k].negative]
        direct = not any(
            stages[k].kind is StageKind.NOT_NEXT for k in negatives_after(s)
        ) and (t is None or (bool(nexts) and nexts[0] == t and not stages[t].optional))
        return direct and any(T(s, g, prefix) for g in range(p + 2, upto + 1))

    def nn_kills(s: int, k: int, p: int, prefix: tuple) -> bool:
        """Rule 4 (and 8): the not_next k after stage s kills at p+1."""
        return holds(stages[k].condition, p + 1, prefix) and not (
            greedy(s) and T(s, p + 1, prefix)
        )

    def waitable(
        t: int, strategy: Contiguity, g: int, prefix: tuple, inner: bool
    ) -> bool:
        if strategy is Contiguity.STRICT:
            return False
        if inner:
            if U(t, g, prefix):
                return False
            return strategy is Contiguity.ANY or not T(t, g, prefix)
        return strategy is Contiguity.ANY or not T(t, g, prefix)

    # ---- rules 1-4: valid prefixes ----------------------------------------------------
    # a prefix: tuple of (event index, stage index); flags: terminal (only valid as a
    # match that ends at its last event)
    prefixes: dict[tuple, bool] = {}

    def take_ok(s: int, q: int, prefix: tuple) -> bool:
        return T(s, q, prefix) and not U(s, q, prefix)

    def extend(prefix: tuple) -> None:
        p, s = prefix[-1]
        c = count(prefix, s)
        for q in range(p + 1, n):
            if W is not None and times[q] - times[prefix[0][0]] >= W:
                break
            gap = range(p + 1, q)
            # rule 4: not_next after s (checked once s reached its minimum)
            nn_dead = False
            for k in negatives_after(s):
                if (
                    stages[k].kind is StageKind.NOT_NEXT
                    and c >= stages[s].min_times
                    and nn_kills(s, k, p, prefix)
                ):
                    nn_dead = True
            if nn_dead:
                return
            nfb = [
                k
                for k in negatives_after(s)
                if stages[k].kind is StageKind.NOT_FOLLOWED_BY
            ]
            if any(holds(stages[k].condition, g, prefix) for k in nfb for g in gap):
                return  # every later q is behind this killing event
            candidates = []
            if c < maxc(s):
                candidates.append(s)
            if c >= stages[s].min_times:
                candidates.extend(later_positive(s))
            for t in candidates:
                if t == s:
                    st = stages[s]
                    if st.inner is Contiguity.STRICT and q != p + 1:
                        continue
                    if any(not waitable(s, st.inner, g, prefix, True) for g in gap):
                        continue
                else:
                    st = stages[t]
                    if st.contiguity is Contiguity.STRICT and q != p + 1:
                        continue
                    if any(
                        not waitable(t, st.contiguity, g, prefix, False) for g in gap
                    ):
                        continue
                    if greedy_blocks(s, prefix, p, q, t):
                        continue
                if not take_ok(t, q, prefix):
                    continue
                # rule 3: q is in the zone; it may satisfy N only if the match ends at q
                terminal = bool(nfb) and any(
                    holds(stages[k].condition, q, prefix) for k in nfb
                )
                new = prefix + ((q, t),)
                if new not in prefixes:
                    prefixes[new] = terminal
                    if not terminal:
                        extend(new)

    first_stages = []
    for t in pos:
        first_stages.append(t)
        if not stages[t].optional:
            break
    for x in range(n):
        for t in first_stages:
            if take_ok(t, x, ()):
                pre = ((x, t),)
                prefixes[pre] = False
                extend(pre)

    # ---- completion -------------------------------------------------------------------
    def completes(prefix: tuple) -> str | None:
        """'now' (at its last event), 'next' (at the event after it, trailing not_next),
        'window' (trailing not_followed_by) or None."""
        s = prefix[-1][1]
        c = count(prefix, s)
        if c < stages[s].min_times:
            return None
        if any(not stages[t].optional for t in pos if t > s):
            return None
        if ends_nfb:
            return "window" if s == last_pos else None
        if ends_nn:
            return "next" if s == last_pos else None
        if greedy(s) and s != last_pos:
            return None  # rule 8: the way to the end is closed to the event just taken
        return "now"

    completion_at: dict[int, list[tuple]] = {}
    for prefix, terminal in prefixes.items():
        how = completes(prefix)
        p = prefix[-1][0]
        x = prefix[0][0]
        if how == "now":
            completion_at.setdefault(p, []).append(prefix)
        elif how == "next" and not terminal and p + 1 < n:
            k = len(stages) - 1
            s = prefix[-1][1]
            if (
                (W is None or times[p + 1] - times[x] < W)
                and not holds(stages[k].condition, p + 1, prefix)
                and not (greedy(s) and T(s, p + 1, prefix))
            ):
                completion_at.setdefault(p + 1, []).append(prefix)

    # ---- rule 6: what is alive after event j --------------------------------------------
    def configs(prefix: tuple, j: int) -> set[str]:
        if prefixes[prefix]:
            return set()
        p, s = prefix[-1]
        c = count(prefix, s)
        tail = range(p + 1, j + 1)
        for k in negatives_after(s):
            cond = stages[k].condition
            if stages[k].kind is StageKind.NOT_FOLLOWED_BY:
                if any(holds(cond, g, prefix) for g in tail):
                    return set()
            elif c >= stages[s].min_times and p + 1 <= j and nn_kills(s, k, p, prefix):
                return set()
        out = set()
        pending = ends_nfb and s == last_pos and c >= stages[s].min_times
        if pending and not (greedy(s) and any(T(s, g, prefix) for g in tail)):
            out.add("pending")
        if not tail:
            if c < maxc(s):
                out.add("continue")
            elif later_positive(s) or ends_nn:
                out.add("after")
            return out
        inner = stages[s].inner
        if (
            c < maxc(s)
            and inner is not Contiguity.STRICT
            and all(waitable(s, inner, g, prefix, True) for g in tail)
        ):
            out.add("continue")
        if c >= stages[s].min_times:
            for t in later_positive(s):
                strat = stages[t].contiguity
                if (
                    strat is not Contiguity.STRICT
                    and all(waitable(t, strat, g, prefix, False) for g in tail)
                    and not greedy_blocks(s, prefix, p, j, t)
                ):
                    out.add("wait")
        return out

    by_start: dict[int, list[tuple]] = {}
    for prefix in prefixes:
        by_start.setdefault(prefix[0][0], []).append(prefix)

    # ---- rule 7: the simulation ---------------------------------------------------------
    skip = pattern.skip
    skip_stage = names.index(skip.stage) if skip.stage else None
    banned: set[int] = set()
    expired: set[int] = set()
    held: list[tuple[tuple, tuple]] = []  # (key, prefix)
    out_matches: list[tuple[tuple, Match]] = []
    out_timeouts: list[tuple[tuple, TimedOut]] = []
    last = -1

    def materialize(prefix: tuple) -> Match:
        groups: dict[int, list[Any]] = {}
        for i, s in prefix:
            groups.setdefault(s, []).append(events[i])
        return Match(
            {names[s]: tuple(groups[s]) for s in sorted(groups)},
            times[prefix[0][0]],
            times[prefix[-1][0]],
            tuple(st.name for st in pattern.stages if not st.negative),
        )

    def key(prefix: tuple, seq: int) -> tuple:
        return (prefix[0][0], seq, prefix)

    def live(x: int) -> bool:
        return any(
            all(i <= last for i, _ in pre) and configs(pre, last)
            for pre in by_start.get(x, ())
        )

    def emit(pots: list[tuple[tuple, tuple]], step: tuple) -> None:
        if skip.kind is SkipKind.NO_SKIP:
            for _, pre in sorted(pots):
                out_matches.append((step, materialize(pre)))
            return
        held.extend(pots)
        held.sort()
        while held:
            (start, _, _), pre = held[0]
            alive = [
                x
                for x in by_start
                if x <= last and x not in banned and x not in expired and live(x)
            ]
            if alive and min(alive) < start:
                break
            held.pop(0)
            out_matches.append((step, materialize(pre)))
            ids = [i for i, _ in pre]
            if skip.kind is SkipKind.SKIP_TO_NEXT:
                pid, inclusive = ids[0], True
            elif skip.kind is SkipKind.SKIP_PAST_LAST_EVENT:
                pid, inclusive = ids[-1], True
            else:
                named = [i for i, s in pre if s == skip_stage]
                if skip.throw_on_miss and (not named or (named[0] if skip.kind is SkipKind.SKIP_TO_FIRST else named[-1]) == ids[0]):
                    raise AfterMatchSkipError(f"skip to {skip.stage!r}: no event, or the match's first event")
                if not named:
                    continue
                pid = named[0] if skip.kind is SkipKind.SKIP_TO_FIRST else named[-1]
                inclusive = False
            for x in by_start:
                if x <= pid if inclusive else x < pid:
                    banned.add(x)
            held[:] = [h for h in held if h[1][0][0] not in banned]

    def advance(t: Any, step: tuple) -> None:
        if W is None:
            return
        pots = []
        for x in sorted(by_start):
            if x > last or x in banned or x in expired or t - times[x] < W:
                continue
            if not live(x):
                continue
            expired.add(x)
            for pre in by_start[x]:
                if any(i > last for i, _ in pre):
                    continue
                cf = configs(pre, last)
                if cf - {"pending"}:
                    out_timeouts.append(
                        (step, TimedOut(materialize(pre), times[x] + W))
                    )
                if "pending" in cf:
                    pots.append((key(pre, last + 1), pre))
        if pots or held:
            emit(pots, step)

    for i in range(n):
        advance(times[i], ("advance", i))
        last = i
        pots = [
            (key(pre, i), pre)
            for pre in completion_at.get(i, ())
            if pre[0][0] not in banned and pre[0][0] not in expired
        ]
        if pots or held:
            emit(pots, ("event", i))
    if end_time is not None:
        advance(end_time, ("end",))
    return RefResult(out_matches, out_timeouts)
