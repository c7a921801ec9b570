"""Checkpoint deltas of ``list`` states proportional to what was appended.

A state declared as a plain ``list[T]`` is the user's own list: it cannot log its
changes as a tracked :class:`~tstate.types.tracked.Array` does, so a key whose list
grew by one item since the last checkpoint used to be written whole in the next delta
(a 10M-item list appended to once per epoch: 50 MB per delta).  An :class:`AppendLog`
(one per bin, created by the first delta that needs it) remembers, for each key of such
a state that a delta wrote with at least :data:`MIN_BYTES` of encoding, what the bin's
chain now holds for it: how many items, the length of their encoding and its digest
(xxh3-128).  At the next delta the key's list is encoded; if the encoding starts with
those bytes (same digest over the same length), the items written before are unchanged
-- MessagePack items are self-delimiting, so equal leading bytes are the same leading
items -- and the delta carries only the items after them (its ``appends``,
:mod:`tstate.checkpoint.delta`); otherwise (an item changed, the list shrank or was
replaced by another) the whole state, as before.

The log describes the chain only if nothing else writes the key: :meth:`AppendLog.split`
updates it for every key a delta writes, :meth:`AppendLog.drop` forgets a key a delta
deletes, and a bin written whole (a snapshot) empties it (:meth:`AppendLog.forget`)
and logs what the snapshot holds (so the next delta is already proportional); a
bin restored, moved or split is a new ``Bin`` with no log.  Cost: the encoding and one
hash of a changed list per checkpoint (CPU proportional to the list, as encoding it
always was); bytes written: the appended items.

>>> from tstate.types.codec import StateCodec
>>> codec = StateCodec(list[int])
>>> log = AppendLog()
>>> v = list(range(1000))
>>> log.split(["k"], [v])[2:]                       # first delta: whole, now logged
([], [])
>>> v.append(7)
>>> keys, values, akeys, suffixes = log.split(["k"], [v])
>>> keys, akeys, suffixes
([], ['k'], [[7]])
>>> v[0] = -1                                      # an item changed: whole again
>>> log.split(["k"], [v])[0]
['k']
"""

from __future__ import annotations

from typing import Any, Optional

import xxhash

from tstate.types import wire
from tstate.types.schema import Kind

__all__ = ["AppendLog", "MIN_BYTES", "appendable"]

#: lists whose encoding is shorter than this are written whole (a log entry costs more
#: than it saves)
MIN_BYTES = 1024


def appendable(codec: Any) -> bool:
    """Whether states of ``codec`` (a :class:`~tstate.types.StateCodec`) are plain lists
    that msgspec encodes and decodes as they are: what an :class:`AppendLog` handles."""
    return bool(codec.schema.kind is Kind.LIST and codec.encodes_natively and codec.wire_type is not None)


def _header_length(first: int) -> int:
    """The length of a MessagePack array header from its first byte."""
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    return -1  # not an array


class AppendLog:
    """Per key: ``(items, encoded length, digest)`` of the list the bin's chain holds
    for it (see the module docstring)."""

    __slots__ = ("bases",)

    def __init__(self) -> None:
        self.bases: dict[Any, tuple[int, int, bytes]] = {}

    def __len__(self) -> int:
        return len(self.bases)

    def forget(self) -> None:
        """The bin was written whole: nothing logged describes its chain any more."""
        self.bases.clear()

    def drop(self, key: Any) -> None:
        """A delta deletes ``key``."""
        self.bases.pop(key, None)

    def split(self, keys: list[Any], values: list[Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """``(keys, values)`` a delta writes, split into those written whole and those
        written as what was appended: ``(keys, values, append_keys, suffixes)``
        (``suffixes[i]`` a new list of the items appended to ``append_keys[i]``).  The
        log is updated as if the delta were written."""
        bases = self.bases
        whole_k: list[Any] = []
        whole_v: list[Any] = []
        app_k: list[Any] = []
        app_v: list[Any] = []
        for k, v in zip(keys, values):
            suffix = self._suffix(k, v, bases.get(k)) if type(v) is list else None
            if suffix is None:
                whole_k.append(k)
                whole_v.append(v)
            else:
                app_k.append(k)
                app_v.append(suffix)
        return whole_k, whole_v, app_k, app_v

    def _suffix(self, k: Any, v: list[Any], base: Optional[tuple[int, int, bytes]]) -> Optional[list[Any]]:
        """The items of ``v`` after those of ``base`` (None: write ``v`` whole); logs
        ``v`` (or forgets ``k``)."""
        bases = self.bases
        try:
            data = wire.encode(v)
        except (OverflowError, TypeError, ValueError, RecursionError):
            bases.pop(k, None)
            return None  # written whole: the encoding there says what is wrong
        start = _header_length(data[0])
        if start < 0 or len(data) - start < MIN_BYTES:
            bases.pop(k, None)
            return None
        body = memoryview(data)[start:]
        h = xxhash.xxh3_128()
        suffix: Optional[list[Any]] = None
        if base is not None:
            items, length, digest = base
            if items <= len(v) and length <= len(body):
                h.update(body[:length])
                if h.digest() == digest:
                    suffix = v[items:]
                    h.update(body[length:])
        if suffix is None:
            h.reset()
            h.update(body)
        bases[k] = (len(v), len(body), h.digest())
        return suffix
