"""The vocabulary of a pattern's description: how a stage attaches to the previous one
(:class:`Contiguity`), what kind of stage it is (:class:`StageKind`) and which after-match
skip strategy applies (:class:`SkipKind`).  :mod:`apps.cep.pattern` builds patterns
with them (and exports them); :mod:`apps.cep.pattern_rules` checks them.
"""

from __future__ import annotations

import enum

__all__ = ["Contiguity", "SkipKind", "StageKind"]


class Contiguity(enum.Enum):
    """How a stage attaches to the previous one (or, inside a quantified stage, how its
    events attach to each other)."""

    STRICT = "strict"  # next() / consecutive()
    RELAXED = "relaxed"  # followed_by() / default inside loops
    ANY = "any"  # followed_by_any() / allow_combinations()


class StageKind(enum.Enum):
    POSITIVE = "positive"
    NOT_NEXT = "not_next"
    NOT_FOLLOWED_BY = "not_followed_by"


class SkipKind(enum.Enum):
    NO_SKIP = "no_skip"
    SKIP_TO_NEXT = "skip_to_next"
    SKIP_PAST_LAST_EVENT = "skip_past_last_event"
    SKIP_TO_FIRST = "skip_to_first"
    SKIP_TO_LAST = "skip_to_last"
