"""Record classes the typed-record tests build from columns (top level, so that cells
can name them)."""

from __future__ import annotations

from typing import NamedTuple

from attrs import frozen


@frozen
class Event:
    k: str
    v: int
    t: int


class Pair(NamedTuple):
    v: int
    k: str
