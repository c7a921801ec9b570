"""The exceptions the CEP library raises.  Both derive from
:class:`tstate.errors.TstateError`, so ``except TstateError`` catches them too."""

from __future__ import annotations

from tstate.errors import TstateError

__all__ = ["AfterMatchSkipError", "EventFieldError", "ExpressionError", "PatternError", "SqlError"]


class PatternError(TstateError):
    """A pattern is malformed.  Raised while the pattern is built (``Pattern`` calls) or
    compiled (``Matcher(pattern)``); the message names the offending stage."""


class EventFieldError(TstateError):
    """A condition read a field the event does not have (an ``AttributeError`` or
    ``KeyError`` inside the condition).  The message names the pattern stage and the
    field; the original exception is chained as ``__cause__``."""

    def __init__(self, message: str, *, stage: str, field: object) -> None:
        super().__init__(message)
        self.stage = stage
        self.field = field


class SqlError(PatternError):
    """A MATCH_RECOGNIZE query (:mod:`apps.cep.sql`) cannot be parsed or compiled.  The
    message starts with the position in the query (``line L, column C``) and shows the
    line with a caret under it; ``line`` / ``column`` hold the position (1-based)."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class ExpressionError(TstateError):
    """An expression of a MATCH_RECOGNIZE query (a DEFINE condition or a measure) failed
    on a row: a type mismatch (``'a' > 1``), a division by zero.  The message names the
    clause, the pattern variable or measure, the expression and its position."""


class AfterMatchSkipError(TstateError):
    """``AFTER MATCH SKIP TO FIRST/LAST x`` (Flink's ``throwExceptionOnMiss``) met a match
    with no row for ``x``, or one whose skip target is its own first row (the next match
    would start where this one did).  Raised by the matcher when it emits the match."""
