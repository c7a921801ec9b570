"""Conditions: user predicates over events, with or without the partial-match context.

A condition is any callable taking either ``(event)`` (a *simple* condition) or
``(event, ctx)`` (an *iterative* condition, as in Flink's ``IterativeCondition``).  The
arity is detected once, when the condition is attached to a pattern, never per event.

``ctx`` (:class:`Context`) gives the events already accepted into the partial match
that is being extended -- never the event under test:

* ``ctx.events(stage)``: the events accepted so far for ``stage``, oldest first
  (Flink's ``getEventsForPattern``);
* ``ctx.last(stage)``: the latest of them, or ``None`` (MATCH_RECOGNIZE's
  ``LAST(stage)``) -- cheaper than ``events(stage)[-1]``;
* ``ctx.previous()``: the latest event accepted into the partial match by any stage,
  or ``None``;
* ``ctx.all_events()``: every event accepted into the partial match, oldest first
  (MATCH_RECOGNIZE's default variable ``*``, the current row excluded);
* ``ctx.timestamp``: the timestamp of the event under test.

Conditions must be pure functions of their arguments: the engine evaluates each
condition at most once per (partial match, event) and may skip conditions whose result
cannot matter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from attrs import frozen

from apps.cep.errors import PatternError

__all__ = ["Condition", "Context", "cond_and", "cond_not", "cond_or", "make_condition"]


class Context(Protocol):
    """What an iterative condition sees of the partial match it would extend."""

    timestamp: Any

    def events(self, stage: str) -> Sequence[Any]: ...

    def last(self, stage: str) -> Any: ...

    def previous(self) -> Any: ...

    def all_events(self) -> Sequence[Any]: ...


@frozen(eq=False)
class Condition:
    """A compiled condition: ``fn(event)`` or, when ``takes_ctx``, ``fn(event, ctx)``.

    ``leaves`` are the user callables it is made of (used to attribute errors)."""

    fn: Callable[..., Any]
    takes_ctx: bool
    leaves: tuple[Callable[..., Any], ...]

    def __call__(self, event: Any, ctx: Any = None) -> bool:
        return bool(self.fn(event, ctx) if self.takes_ctx else self.fn(event))


def _arity(fn: Callable[..., Any], where: str) -> bool:
    """True if ``fn`` takes ``(event, ctx)``, False if it takes ``(event)``."""
    if not callable(fn):
        raise PatternError(f"{where}: a condition must be callable, got {fn!r}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: assume (event)
        return False
    required = 0
    positional = 0
    var_positional = False
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
            if p.default is p.empty:
                required += 1
        elif p.kind is p.VAR_POSITIONAL:
            var_positional = True
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            raise PatternError(
                f"{where}: condition {fn!r} has a required keyword-only parameter "
                f"{p.name!r}; a condition takes (event) or (event, ctx)"
            )
    if required == 2:
        return True
    if required == 1 or (required == 0 and (positional >= 1 or var_positional)):
        return False
    raise PatternError(
        f"{where}: condition {fn!r} takes {required} required arguments; "
        "a condition takes (event) or (event, ctx)"
    )


def make_condition(fn: Callable[..., Any] | Condition, where: str) -> Condition:
    """Wrap a user callable (arity detected now, once)."""
    if isinstance(fn, Condition):
        return fn
    return Condition(fn=fn, takes_ctx=_arity(fn, where), leaves=(fn,))


def cond_and(a: Condition | None, b: Condition) -> Condition:
    """``a AND b`` (``a`` is evaluated first; ``None`` means "no condition yet")."""
    if a is None:
        return b
    fa, fb = a.fn, b.fn
    if a.takes_ctx or b.takes_ctx:
        ga = fa if a.takes_ctx else (lambda e, c, _f=fa: _f(e))
        gb = fb if b.takes_ctx else (lambda e, c, _f=fb: _f(e))
        return Condition(lambda e, c: ga(e, c) and gb(e, c), True, a.leaves + b.leaves)
    return Condition(lambda e: fa(e) and fb(e), False, a.leaves + b.leaves)


def cond_or(a: Condition | None, b: Condition) -> Condition:
    """``a OR b`` (``a`` is evaluated first; ``None`` means "no condition yet")."""
    if a is None:
        return b
    fa, fb = a.fn, b.fn
    if a.takes_ctx or b.takes_ctx:
        ga = fa if a.takes_ctx else (lambda e, c, _f=fa: _f(e))
        gb = fb if b.takes_ctx else (lambda e, c, _f=fb: _f(e))
        return Condition(lambda e, c: ga(e, c) or gb(e, c), True, a.leaves + b.leaves)
    return Condition(lambda e: fa(e) or fb(e), False, a.leaves + b.leaves)


def cond_not(a: Condition) -> Condition:
    fa = a.fn
    if a.takes_ctx:
        return Condition(lambda e, c: not fa(e, c), True, a.leaves)
    return Condition(lambda e: not fa(e), False, a.leaves)


TRUE = Condition(lambda e: True, False, ())
