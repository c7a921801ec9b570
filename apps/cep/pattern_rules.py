"""The rules of the pattern API (Flink's): what a call may do to the last stage of a
:class:`~apps.cep.pattern.Pattern` (what only a whole pattern can satisfy is checked by
``apps.cep.pattern``'s ``check_pattern``, beside the class it reads).

Each check raises :class:`~apps.cep.errors.PatternError` naming the stage (``where``:
the call, as ``stage 'b': greedy()``) or returns; :class:`~apps.cep.pattern.Pattern`'s
methods call the check of their rule, then build the new pattern.
"""

from __future__ import annotations

import datetime as dt
import numbers
from typing import Any

from apps.cep.errors import PatternError
from apps.cep.kinds import Contiguity, StageKind
from apps.cep.stage import Stage

__all__ = [
    "check_append",
    "check_count",
    "check_greedy",
    "check_inner",
    "check_name",
    "check_quantify",
    "check_until",
    "window_of",
]


def check_name(name: Any, where: str) -> str:
    """``name`` as a stage name (a non-empty str not starting with ``$``)."""
    if not isinstance(name, str) or not name:
        raise PatternError(
            f"{where}: a stage name must be a non-empty str, got {name!r}"
        )
    if name.startswith("$"):
        raise PatternError(
            f"{where}: stage name {name!r}: names starting with '$' are reserved"
        )
    return name


def check_count(n: Any, what: str, where: str, minimum: int) -> int:
    """``n`` as a count of events: an int (not a bool) >= ``minimum``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise PatternError(f"{where}: {what} must be an int, got {n!r}")
    if n < minimum:
        raise PatternError(f"{where}: {what} must be >= {minimum}, got {n}")
    return int(n)


def check_append(last: Stage, name: str, kind: StageKind, method: str) -> None:
    """A stage ``name`` of ``kind`` may follow the stage ``last`` (``method``: the call)."""
    if kind is not StageKind.POSITIVE:
        if last.optional:
            raise PatternError(
                f"{method}({name!r}): a negative stage cannot follow the optional stage "
                f"{last.name!r} (Flink rejects an optional path to a NOT stage)"
            )
        if last.negative and (
            kind is StageKind.NOT_NEXT or last.kind is StageKind.NOT_NEXT
        ):
            raise PatternError(
                f"{method}({name!r}): not_next cannot be adjacent to another negative stage "
                f"({last.name!r}); only not_followed_by stages may be chained"
            )


def check_until(st: Stage, where: str) -> None:
    """Stage ``st`` may take a stop condition."""
    if st.negative:
        raise PatternError(f"{where}: a negative stage has no stop condition")
    if not st.looping:
        raise PatternError(
            f"{where}: the stop condition applies only to looping stages "
            "(one_or_more / times_or_more); call it after the quantifier"
        )
    if st.until is not None:
        raise PatternError(f"{where}: the stop condition is already set")


def check_quantify(st: Stage, where: str) -> None:
    """Stage ``st`` may be quantified."""
    if st.negative:
        raise PatternError(f"{where}: a negative stage cannot be quantified")
    if st.quantified:
        raise PatternError(
            f"{where}: the stage is already quantified ({st.describe()})"
        )


def check_greedy(st: Stage, where: str) -> None:
    """Stage ``st`` may be made greedy."""
    if st.negative:
        raise PatternError(f"{where}: a negative stage cannot be greedy")
    if not st.quantified:
        raise PatternError(
            f"{where}: greedy applies only to quantified stages (times / one_or_more)"
        )
    if st.inner is Contiguity.ANY:
        raise PatternError(
            f"{where}: greedy cannot be combined with allow_combinations"
        )


def check_inner(st: Stage, where: str, contiguity: Contiguity) -> None:
    """The events of stage ``st`` may attach to each other with ``contiguity``."""
    if st.negative or not st.quantified:
        raise PatternError(
            f"{where}: applies only to quantified stages (times / one_or_more)"
        )
    if st.inner_set:
        raise PatternError(
            f"{where}: the inner contiguity is already set ({st.inner.value})"
        )
    if contiguity is Contiguity.ANY and st.greedy:
        raise PatternError(
            f"{where}: greedy cannot be combined with allow_combinations"
        )


def window_of(
    window: float | dt.timedelta | None, duration: float | dt.timedelta, where: str
) -> float | dt.timedelta:
    """The window of a pattern whose window is ``window`` after ``within(duration)``:
    ``duration`` checked, the smaller of the two."""
    if isinstance(duration, dt.timedelta):
        if duration <= dt.timedelta(0):
            raise PatternError(f"{where}: the window must be positive, got {duration!r}")
    elif isinstance(duration, bool) or not isinstance(duration, numbers.Real):
        raise PatternError(
            f"{where}: the window must be a datetime.timedelta or a number, got {duration!r}"
        )
    elif not duration > 0:
        raise PatternError(
            f"{where}: the window must be positive, got {duration!r}"
        )
    w: float | dt.timedelta
    if window is None:
        w = duration
    elif isinstance(window, dt.timedelta) and isinstance(duration, dt.timedelta):
        w = min(window, duration)
    elif not isinstance(window, dt.timedelta) and not isinstance(duration, dt.timedelta):
        w = min(window, duration)
    else:
        raise PatternError(
            f"{where}: the pattern already has the window {window!r}; give both as "
            "timedeltas or both as numbers"
        )
    return w
