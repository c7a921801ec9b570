"""Copy-on-write freezing: what keeps ``mode="thread"`` checkpoints off the processing
path (``mode="fork"`` needs none: the fork is the freeze, see
:mod:`tstate.checkpoint.forked`).

At a checkpoint the processing thread only *freezes* each changed bin: it notes which
keys the checkpoint must read (``pending``) and resets the bin's dirty set — O(changed
bins), no copying.  The writer thread then reads those keys' states from the live bins,
a chunk at a time under a lock, and encodes them.  Before the processing thread writes a
key that is still pending (a record or timer for it, or ``ctx.clear()``), it copies the
key's state first (:meth:`Frozen.before_write`), so the writer always sees the state as
it was at the checkpoint's time: a key-granular copy-on-write.

>>> from tstate.state.bin import Bin
>>> from tstate.types import StateCodec
>>> b = Bin(0); b.states = {"a": [1], "b": [2]}
>>> f = Frozen(StateCodec(list[int]), "op")
>>> f.freeze(b, ["a", "b"])
>>> f.before_write("a"); b.states["a"].append(99)     # the processing thread moves on
>>> [StateCodec(list[int]).decode(raw) for raw in f.read(["a", "b"])]
[[1], [2]]
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

from tstate.errors import StateTypeError
from tstate.state.bin import Bin
from tstate.types.wire import Raw

__all__ = ["Frozen", "MISSING"]

#: the state of a key that had none at the checkpoint's time
MISSING = object()


class Frozen:
    """The keys of one operator instance that an in-flight checkpoint must still read."""

    __slots__ = ("lock", "pending", "copies", "codec", "operator")

    def __init__(self, codec: Any, operator: str) -> None:
        self.lock = threading.Lock()
        self.pending: dict[Any, Bin] = {}
        self.copies: dict[Any, Any] = {}
        self.codec = codec
        self.operator = operator

    def freeze(self, b: Bin, keys: Iterable[Any]) -> None:
        """Processing thread, at the checkpoint: these keys of ``b`` are to be read."""
        pending = self.pending
        for k in keys:
            pending[k] = b

    def _value(self, b: Bin, k: Any) -> Any:
        """The state of ``k`` as it is now, encoded (``msgspec.Raw``: a copy that the
        payload's encoder embeds as it is)."""
        v = b.states.get(k, MISSING)
        if v is MISSING:
            return MISSING
        try:
            return Raw(self.codec.encode(v))
        except StateTypeError as exc:
            raise StateTypeError(f"operator {self.operator!r}, key {k!r}: {exc}") from None

    def before_write(self, k: Any) -> None:
        """Processing thread, before changing pending key ``k``: keep its frozen state."""
        with self.lock:
            b = self.pending.pop(k, None)
            if b is not None:
                self.copies[k] = self._value(b, k)

    def before_write_bin(self, b: Bin) -> None:
        """Processing thread, before code that may change any key of ``b``."""
        with self.lock:
            for k in [k for k, kb in self.pending.items() if kb is b]:
                del self.pending[k]
                self.copies[k] = self._value(b, k)

    def read(self, keys: list[Any]) -> list[Any]:
        """Writer thread: the frozen states of ``keys`` (``MISSING`` for none)."""
        out = []
        with self.lock:
            pending, copies = self.pending, self.copies
            for k in keys:
                if k in copies:
                    out.append(copies.pop(k))
                else:
                    b = pending.pop(k, None)
                    out.append(MISSING if b is None else self._value(b, k))
        return out

    def drain(self) -> None:
        """Copy every key still pending (e.g. before the next checkpoint freezes)."""
        with self.lock:
            for k, b in list(self.pending.items()):
                self.copies[k] = self._value(b, k)
            self.pending.clear()
