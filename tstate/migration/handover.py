"""The pre-copy hand-over: a bin's changes since a checkpoint, as a delta.

A pre-copy move (``strategy="precopy"``, :mod:`tstate.engine.precopy`) has the bin's
new owner load the bin from a committed checkpoint ahead of the move; at the move the
old owner hands over only what changed since that checkpoint.  This module holds the
two pieces that need no engine:

- :class:`Changes`: which keys of one bin changed since each checkpoint captured while
  it was tracked -- one *segment* of keys per interval between two captures (the keys
  a capture took from the bin's ``dirty`` and ``removed`` sets, which it then resets),
  so that the keys changed since *any* tracked checkpoint are the union of the segments
  from it on plus the bin's live change sets;
- :func:`encode_handover` / :func:`apply_handover`: the hand-over message, a bin delta
  in the format of incremental checkpoints (:mod:`tstate.checkpoint.delta`: upserts of
  the changed keys that have a state, deletes of those that have none, the bin's full
  timer set), applied on top of the preloaded copy.

Exactness: a key not in the union was neither written, created, cleared nor given a
timer since the base checkpoint, so its state in the copy is its state now; a key in
it is overwritten or deleted; the timer set is replaced whole.  So the copy after the
hand-over equals the bin the old owner had.

>>> from tstate.state.bin import Bin
>>> from tstate.types import StateCodec
>>> codec = StateCodec(int)
>>> old = Bin(2); old.states = {"a": 1, "b": 2}
>>> ch = Changes(open=5)                      # tracked since checkpoint 5 was captured
>>> ch.capture(7, {"a"}, valid=True)          # checkpoint 7 took the change of "a"
>>> sorted(ch.since(5, {"c"})), sorted(ch.since(7, {"c"})), ch.since(4, set())
(['a', 'c'], ['c'], None)
>>> copy = Bin(2); copy.states = {"a": 0, "b": 2, "c": 3}    # as of checkpoint 5
>>> old.states["a"] = 1; old.timers = {9: {"b": None}}      # "a" changed, "c" cleared
>>> data = encode_handover(old, ch.since(5, {"c"}), codec)
>>> apply_handover(copy, data, codec).states == old.states, copy.timers
(True, {9: {'b': None}})
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from tstate.checkpoint.delta import catch_up, encode_change
from tstate.state.bin import Bin
from tstate.state.storage import NO_STATE

__all__ = ["Changes", "encode_handover", "apply_handover"]


class Changes:
    """The keys of one bin changed since the checkpoints captured while it was tracked.

    ``open``: the id of the last checkpoint captured while the bin was tracked and held
    by the worker that tracks it (``None``: none yet -- the bin was not here, or its
    change sets did not start at a capture, e.g. it had just arrived whole); the keys
    changed since then are the bin's live ``dirty`` and ``removed`` sets.
    ``segments[i]``: the keys changed between checkpoint ``i``'s capture and the next
    capture."""

    __slots__ = ("open", "segments")

    def __init__(self, open: Optional[int] = None) -> None:
        self.open = open
        self.segments: dict[int, set[Any]] = {}

    def capture(self, checkpoint_id: int, keys: set[Any], *, valid: bool) -> None:
        """Checkpoint ``checkpoint_id`` was captured; ``keys``: the bin's change sets it
        took (changed since the previous capture); ``valid``: whether it recorded the
        bin as it is now (the bin is held here: its state at the capture is in that
        checkpoint's chain, whether written now or kept)."""
        if self.open is not None:
            self.segments[self.open] = keys
        self.open = checkpoint_id if valid else None
        if not valid:
            self.segments.clear()  # a gap: no base before it can be used

    def tracks(self, checkpoint_id: int) -> bool:
        """Whether the changes since checkpoint ``checkpoint_id`` are known."""
        return checkpoint_id == self.open or checkpoint_id in self.segments

    def bases(self) -> list[int]:
        """The checkpoints the changes since which are known, oldest first."""
        out = sorted(self.segments)
        if self.open is not None:
            out.append(self.open)
        return out

    def since(self, checkpoint_id: int, live: Iterable[Any]) -> Optional[set[Any]]:
        """The keys changed since checkpoint ``checkpoint_id`` was captured, ``live``
        being the bin's current change sets (``None``: not known)."""
        if not self.tracks(checkpoint_id) or self.open is None:
            return None
        out: set[Any] = set(live)
        for i, keys in self.segments.items():
            if i >= checkpoint_id:
                out |= keys
        return out

    def forget_before(self, checkpoint_id: int) -> None:
        """Drop the segments of checkpoints before ``checkpoint_id`` (no longer a base)."""
        for i in [i for i in self.segments if i < checkpoint_id]:
            del self.segments[i]


def encode_handover(b: Bin, keys: Iterable[Any], codec: Any, operator: Optional[str] = None) -> bytes:
    """The hand-over delta of bin ``b``: the states of ``keys`` that ``b`` holds
    (upserts), the others as deletes, and ``b``'s full timer set -- the bytes of a
    :mod:`tstate.checkpoint.delta` delta (every state checked against its
    declaration)."""
    view = Bin(b.index)
    marked = dict.fromkeys(keys)
    get = b.get  # (a bin of a store: the resident part, else loaded)
    view.states = {k: s for k in marked if (s := get(k)) is not NO_STATE}
    view.timers = b.timers
    view.dirty = marked  # upserts: those with a state ...
    view.removed = marked  # ... deletes: those without
    return encode_change(view, codec, snapshot=False, operator=operator)


def apply_handover(copy: Bin, data: bytes, codec: Any) -> Bin:
    """Apply a hand-over delta (:func:`encode_handover`) to the preloaded ``copy`` in
    place (deletes, then upserts, then the timer set replaced); returns it."""
    return catch_up(copy, [data], codec)
