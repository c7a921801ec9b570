"""The exceptions the CEP library raises.  Both derive from
:class:`tstate.errors.TstateError`, so ``except TstateError`` catches them too."""

from __future__ import annotations

from tstate.errors import TstateError

__all__ = ["EventFieldError", "PatternError"]


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
