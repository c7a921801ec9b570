"""The pattern API: a Flink-CEP-compatible, chainable, immutable description of an
event pattern.

>>> from apps.cep import Pattern, AfterMatchSkip
>>> p = (Pattern.begin("start", skip=AfterMatchSkip.skip_past_last_event())
...      .where(lambda e: e.kind == "a")
...      .followed_by("middle").where(lambda e: e.kind == "b").one_or_more()
...      .next("end").where(lambda e: e.kind == "c")
...      .within(10))

Every call returns a new :class:`Pattern` (an attrs ``@frozen`` value); the stage the
quantifier/condition calls apply to is always the *last* one added.  The vocabulary is
Flink's, in snake case:

==========================  =========================================================
``Pattern.begin(name)``     the first stage (``skip=`` the after-match skip strategy)
``.next(name)``             strict contiguity: directly after the previous stage
``.followed_by(name)``      relaxed: skips non-matching events in between
``.followed_by_any(name)``  non-deterministic relaxed: may also skip matching events
``.not_next(name)``         the next event must not match
``.not_followed_by(name)``  no matching event until the next stage (or until
                            ``within`` expires, when it is the last stage)
``.times(n)`` / ``(n, m)``  exactly n / between n and m events (``times(0, m)`` is
                            ``times(1, m).optional()``, as in Flink)
``.times_or_more(n)``       n or more (looping); ``.one_or_more()`` = 1 or more
``.optional()``             the stage may be absent
``.greedy()``               a quantified stage takes as many events as it can
``.consecutive()``          strict contiguity *inside* a quantified stage
``.allow_combinations()``   non-deterministic relaxed contiguity inside it
                            (the default inside is relaxed)
``.where(cond)``            AND a condition; ``.or_where(cond)`` ORs one
``.until(cond)``            stop condition of a looping stage
``.within(d)``              the whole match spans less than ``d`` (a ``timedelta``,
                            or a number in the unit of the timestamps)
==========================  =========================================================

Conditions take ``(event)`` or ``(event, ctx)`` (see :mod:`apps.cep.conditions`).
Errors are :class:`~apps.cep.errors.PatternError`, raised by the offending call when it
can be decided there, otherwise when the pattern is compiled (``Matcher(pattern)`` or
:meth:`Pattern.validate`); messages name the stage.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs
from attrs import frozen

from apps.cep.conditions import Condition, cond_and, cond_or, make_condition
from apps.cep.errors import PatternError
from apps.cep.kinds import Contiguity, SkipKind, StageKind
from apps.cep.stage import Stage
from apps.cep.pattern_rules import (
    check_append,
    check_count,
    check_greedy,
    check_inner,
    check_name,
    check_quantify,
    check_until,
    window_of,
)

__all__ = ["AfterMatchSkip", "Contiguity", "Pattern", "SkipKind", "Stage", "StageKind"]


@frozen
class AfterMatchSkip:
    """Which partial matches are discarded after a match is emitted (Flink's
    ``AfterMatchSkipStrategy``).  With any strategy but ``no_skip`` a match is emitted
    only once no partial match that started earlier is still alive (so the earliest
    match wins, as in MATCH_RECOGNIZE); ``no_skip`` emits every match at once.

    * ``no_skip()``: discard nothing;
    * ``skip_to_next()``: discard partial matches that started at or before the match's
      first event;
    * ``skip_past_last_event()``: discard those that started at or before its last event
      (every event belongs to at most one match);
    * ``skip_to_first(stage)`` / ``skip_to_last(stage)``: discard those that started
      before the first / last event the match assigned to ``stage`` (nothing, when the
      match has no event for ``stage``) -- unless :meth:`throw_exception_on_miss` was
      called: then a match with no event for ``stage``, or whose first / last
      ``stage`` event is its own first event, raises
      :class:`~apps.cep.errors.AfterMatchSkipError` when it is emitted (Flink's
      ``throwExceptionOnMiss``, which MATCH_RECOGNIZE's ``SKIP TO FIRST/LAST`` uses).
    """

    kind: SkipKind = SkipKind.NO_SKIP
    stage: str | None = None
    throw_on_miss: bool = False

    @classmethod
    def no_skip(cls) -> AfterMatchSkip:
        return cls(SkipKind.NO_SKIP)

    @classmethod
    def skip_to_next(cls) -> AfterMatchSkip:
        return cls(SkipKind.SKIP_TO_NEXT)

    @classmethod
    def skip_past_last_event(cls) -> AfterMatchSkip:
        return cls(SkipKind.SKIP_PAST_LAST_EVENT)

    @classmethod
    def skip_to_first(cls, stage: str) -> AfterMatchSkip:
        if not isinstance(stage, str) or not stage:
            raise PatternError(
                f"skip_to_first: the stage name must be a non-empty str, got {stage!r}"
            )
        return cls(SkipKind.SKIP_TO_FIRST, stage)

    @classmethod
    def skip_to_last(cls, stage: str) -> AfterMatchSkip:
        if not isinstance(stage, str) or not stage:
            raise PatternError(
                f"skip_to_last: the stage name must be a non-empty str, got {stage!r}"
            )
        return cls(SkipKind.SKIP_TO_LAST, stage)

    def throw_exception_on_miss(self) -> AfterMatchSkip:
        """``skip_to_first/last`` that raises instead of pruning nothing (see above)."""
        if self.stage is None:
            raise PatternError(
                f"{self.kind.value}: throw_exception_on_miss applies only to skip_to_first / skip_to_last"
            )
        return attrs.evolve(self, throw_on_miss=True)


@frozen
class Pattern:
    """An immutable pattern: the stages in order, the after-match skip strategy and the
    time window.  Build it with :meth:`begin` and the chainable methods."""

    stages: tuple[Stage, ...]
    skip: AfterMatchSkip = AfterMatchSkip()
    #: a number (in the unit of the timestamps) or a ``datetime.timedelta``
    window: float | dt.timedelta | None = None

    # ---- construction -------------------------------------------------------------
    @classmethod
    def begin(cls, name: str, skip: AfterMatchSkip | None = None) -> Pattern:
        check_name(name, "Pattern.begin")
        if skip is None:
            skip = AfterMatchSkip.no_skip()
        if not isinstance(skip, AfterMatchSkip):
            raise PatternError(
                f"Pattern.begin({name!r}): skip must be an AfterMatchSkip, got {skip!r}"
            )
        return cls(stages=(Stage(name),), skip=skip)

    def _append(
        self, name: str, kind: StageKind, contiguity: Contiguity, method: str
    ) -> Pattern:
        check_name(name, method)
        for st in self.stages:
            if st.name == name:
                raise PatternError(f"{method}({name!r}): duplicate stage name {name!r}")
        check_append(self.stages[-1], name, kind, method)
        return attrs.evolve(
            self, stages=self.stages + (Stage(name, kind=kind, contiguity=contiguity),)
        )

    def next(self, name: str) -> Pattern:
        """Append a stage whose first event must directly follow the previous stage's
        last event (strict contiguity)."""
        return self._append(name, StageKind.POSITIVE, Contiguity.STRICT, "next")

    def followed_by(self, name: str) -> Pattern:
        """Append a stage that skips non-matching events before its first event
        (relaxed contiguity: the first matching event is taken)."""
        return self._append(name, StageKind.POSITIVE, Contiguity.RELAXED, "followed_by")

    def followed_by_any(self, name: str) -> Pattern:
        """Append a stage that may skip any event, matching or not (non-deterministic
        relaxed contiguity: every later matching event starts an alternative)."""
        return self._append(name, StageKind.POSITIVE, Contiguity.ANY, "followed_by_any")

    def not_next(self, name: str) -> Pattern:
        """Append a negative stage: the event right after the previous stage must not
        satisfy this stage's condition."""
        return self._append(name, StageKind.NOT_NEXT, Contiguity.STRICT, "not_next")

    def not_followed_by(self, name: str) -> Pattern:
        """Append a negative stage: no event satisfying its condition may occur between
        the previous stage and the next one (or, as the last stage, before ``within``
        expires -- then the match is emitted when the window closes)."""
        return self._append(
            name, StageKind.NOT_FOLLOWED_BY, Contiguity.RELAXED, "not_followed_by"
        )

    # ---- modifying the last stage ---------------------------------------------------
    def _last(self) -> Stage:
        return self.stages[-1]

    def _replace_last(self, **changes: Any) -> Pattern:
        return attrs.evolve(
            self, stages=self.stages[:-1] + (attrs.evolve(self._last(), **changes),)
        )

    def _where(self, method: str) -> str:
        return f"stage {self._last().name!r}: {method}()"

    def where(self, cond: Callable[..., Any]) -> Pattern:
        """AND ``cond`` to the last stage's condition (``cond(event)`` or
        ``cond(event, ctx)``)."""
        c = make_condition(cond, self._where("where"))
        return self._replace_last(condition=cond_and(self._last().condition, c))

    def or_where(self, cond: Callable[..., Any]) -> Pattern:
        """OR ``cond`` with the last stage's condition (Flink's ``or``)."""
        c = make_condition(cond, self._where("or_where"))
        return self._replace_last(condition=cond_or(self._last().condition, c))

    def until(self, cond: Callable[..., Any]) -> Pattern:
        """Stop condition of a looping stage: once an event satisfies it, the stage
        accepts no more events (and the partial match cannot wait in the stage past it)."""
        where = self._where("until")
        check_until(self._last(), where)
        return self._replace_last(until=make_condition(cond, where))

    def _quantify(
        self, method: str, lo: int, hi: int | None, optional: bool = False
    ) -> Pattern:
        st = self._last()
        check_quantify(st, self._where(method))
        return self._replace_last(
            min_times=lo,
            max_times=hi,
            quantified=True,
            optional=st.optional or optional,
        )

    def times(self, n: int, m: int | None = None) -> Pattern:
        """Exactly ``n`` events, or (``times(n, m)``) between ``n`` and ``m``."""
        where = self._where("times")
        if m is None:
            n = check_count(n, "times", where, 1)
            return self._quantify("times", n, n)
        n = check_count(n, "the lower bound of times", where, 0)
        m = check_count(m, "the upper bound of times", where, 1)
        if n > m:
            raise PatternError(
                f"{where}: lower bound {n} is greater than upper bound {m}"
            )
        if n == 0:
            return self._quantify("times", 1, m, optional=True)
        return self._quantify("times", n, m)

    def times_or_more(self, n: int) -> Pattern:
        """``n`` or more events (a looping stage)."""
        n = check_count(n, "times_or_more", self._where("times_or_more"), 1)
        return self._quantify("times_or_more", n, None)

    def one_or_more(self) -> Pattern:
        """One or more events (a looping stage)."""
        return self._quantify("one_or_more", 1, None)

    def optional(self) -> Pattern:
        """The stage may take no event at all."""
        st = self._last()
        if st.negative:
            raise PatternError(
                f"{self._where('optional')}: a negative stage cannot be optional"
            )
        return self._replace_last(optional=True)

    def greedy(self) -> Pattern:
        """A quantified stage takes as many events as it can: the stage after it
        cannot take (or skip) an event this stage would take."""
        check_greedy(self._last(), self._where("greedy"))
        return self._replace_last(greedy=True)

    def _inner(self, method: str, contiguity: Contiguity) -> Pattern:
        check_inner(self._last(), self._where(method), contiguity)
        return self._replace_last(inner=contiguity, inner_set=True)

    def consecutive(self) -> Pattern:
        """Strict contiguity between the events of a quantified stage."""
        return self._inner("consecutive", Contiguity.STRICT)

    def allow_combinations(self) -> Pattern:
        """Non-deterministic relaxed contiguity between the events of a quantified stage."""
        return self._inner("allow_combinations", Contiguity.ANY)

    def within(self, duration: float | dt.timedelta) -> Pattern:
        """The first and the last event of a match are less than ``duration`` apart.
        Partial matches older than that are discarded (and reported as timed out).

        ``duration`` is a ``datetime.timedelta`` (``within(timedelta(hours=3))``) or a
        number in the unit of the timestamps (``within(180)`` for minutes).  A
        ``timedelta`` works directly with ``datetime`` timestamps; with numeric ones the
        matcher converts it with the stream's time unit (``Matcher(...,
        time_unit=timedelta(minutes=1))``; :func:`apps.cep.dataflow.cep` takes the unit
        from the source).  Called several times, the smallest window wins."""
        w = window_of(self.window, duration, f"stage {self._last().name!r}: within()")
        return attrs.evolve(self, window=w)

    # ---- inspection ---------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    def validate(self) -> Pattern:
        """Check what can only be checked on the whole pattern; raise
        :class:`PatternError` (naming the stage) or return ``self``."""
        check_pattern(self)
        return self

    def __repr__(self) -> str:
        parts = []
        for i, st in enumerate(self.stages):
            op = {
                StageKind.NOT_NEXT: "!next ",
                StageKind.NOT_FOLLOWED_BY: "!",
            }.get(
                st.kind,
                ""
                if i == 0
                else {
                    Contiguity.STRICT: "next ",
                    Contiguity.RELAXED: "-> ",
                    Contiguity.ANY: "->any ",
                }[st.contiguity],
            )
            parts.append(op + st.describe())
        w = f" within {self.window}" if self.window is not None else ""
        return f"Pattern({' '.join(parts)}{w}, {self.skip.kind.value}{'(' + self.skip.stage + ')' if self.skip.stage else ''})"


def check_pattern(pattern: Pattern) -> None:
    """What can only be checked on the whole pattern (:meth:`Pattern.validate
    <apps.cep.pattern.Pattern.validate>`)."""
    stages = pattern.stages
    if stages[0].negative:  # cannot happen through the API
        raise PatternError(
            f"stage {stages[0].name!r}: a pattern cannot begin with a negative stage"
        )
    for st in stages:
        if st.until is not None and not st.looping:
            raise PatternError(
                f"stage {st.name!r}: until() applies only to looping stages (one_or_more / times_or_more)"
            )
    last = stages[-1]
    if last.kind is StageKind.NOT_FOLLOWED_BY and pattern.window is None:
        raise PatternError(
            f"stage {last.name!r}: a pattern cannot end with not_followed_by unless it has a "
            "time window (add .within(...))"
        )
    for k, st in enumerate(stages):
        after = [s for s in stages[k + 1 :] if not s.negative]
        if (
            st.kind is StageKind.NOT_NEXT
            and after
            and all(s.optional for s in after)
        ):
            raise PatternError(
                f"stage {st.name!r}: not_next must be followed by a mandatory stage or end the "
                "pattern (here every later stage is optional)"
            )
    if pattern.skip.stage is not None:
        names = {s.name: s for s in stages}
        target = names.get(pattern.skip.stage)
        if target is None:
            raise PatternError(
                f"{pattern.skip.kind.value}({pattern.skip.stage!r}): no stage named {pattern.skip.stage!r} "
                f"in the pattern (stages: {', '.join(pattern.names)})"
            )
        if target.negative:
            raise PatternError(
                f"{pattern.skip.kind.value}({pattern.skip.stage!r}): stage {pattern.skip.stage!r} is negative "
                "and never holds events"
            )
