"""Copy-on-write freezing: what keeps asynchronous checkpoints off the processing path
(``mode="fork"`` needs none: the fork is the freeze, see :mod:`tstate.engine.checkpointing.forked`).

At a checkpoint the processing thread only *freezes* each changed bin: the bin's set of
keys changed (and cleared) since the previous checkpoint becomes its ``frozen`` dict --
the keys whose state at the checkpoint's time the checkpoint must still read, each
mapped to ``None`` -- and its change sets start afresh.  That is one dict handed over
per bin, whatever the number of keys (a bin written whole, a snapshot, freezes all its
keys: one C-level copy of its key set).  The checkpoint then reads each bin later
(:meth:`Frozen.take`), in slices on the processing thread (``mode="async"``,
:mod:`tstate.engine.checkpointing.slices`) or on a background thread (``mode="thread"``).
Before the processing thread writes a key still frozen and not copied (``frozen.get(k,
0) is None``: a record or timer for it, or ``ctx.clear()``), it encodes the key's state
first (:meth:`Frozen.before_write`: a ``msgspec.Raw`` -- embedded as it is in the bin's
file -- stored in place of the ``None``, or :data:`MISSING`), so the checkpoint always
sees the state as it was at the checkpoint's time: a key-granular copy-on-write.
Nothing is copied for the keys nobody writes in the meantime (usually most of them),
and the bin's file lists its keys in the same order whichever were copied.

>>> from tstate.state.bin import Bin
>>> from tstate.types import StateCodec
>>> b = Bin(0); b.states = {"a": [1], "b": [2]}
>>> f = Frozen(StateCodec(list[int]), "op")
>>> f.freeze(b, {"a": None, "b": None})
>>> f.before_write(b, "a"); b.states["a"].append(99)     # the processing thread moves on
>>> keys, values, copies = f.take(b)
>>> keys, [StateCodec(list[int]).decode(v) if type(v) is Raw else v for v in values], copies
(['a', 'b'], [[1], [2]], 1)
>>> b.frozen is None
True
"""

from __future__ import annotations

import threading
from typing import Any

from tstate.errors import StateTypeError
from tstate.state.bin import Bin
from tstate.types.wire import Raw

__all__ = ["Frozen", "MISSING", "Raw"]

#: the state of a key that had none at the checkpoint's time
MISSING: Any = object()


class Frozen:
    """The frozen bins of one operator instance in one in-flight checkpoint."""

    __slots__ = ("lock", "codec", "operator", "copies", "bins")

    def __init__(self, codec: Any, operator: str) -> None:
        self.lock = threading.Lock()
        self.codec = codec
        self.operator = operator
        self.copies: dict[int, int] = {}  # id(bin) -> how many of its keys were copied
        self.bins: dict[int, tuple[Bin, dict[Any, Any]]] = {}  # id(bin) -> (bin, its frozen keys), not taken yet

    @property
    def pending(self) -> bool:
        """Whether some frozen bin has not been read yet."""
        return bool(self.bins)

    def freeze(self, b: Bin, keys: dict[Any, Any]) -> None:
        """Processing thread, at the checkpoint: the states of ``keys`` (a dict of key
        to ``None``, handed over: it becomes ``b.frozen``) are to be read."""
        b.frozen = keys
        self.bins[id(b)] = (b, keys)

    def _value(self, b: Bin, k: Any) -> Any:
        """The state of ``k`` as it is now, encoded (``Raw``), or ``MISSING``."""
        v = b.states.get(k, MISSING)
        if v is MISSING:
            return MISSING
        try:
            return Raw(self.codec.encode(v))
        except StateTypeError as exc:
            raise StateTypeError(f"operator {self.operator!r}, key {k!r}: {exc}") from None

    def before_write(self, b: Bin, k: Any) -> None:
        """Processing thread, before changing ``k`` in ``b`` (callers check first that
        ``b.frozen.get(k, 0) is None``): keep its frozen state."""
        with self.lock:
            fz = b.frozen
            if fz is not None and fz.get(k, 0) is None:
                fz[k] = self._value(b, k)
                self.copies[id(b)] = self.copies.get(id(b), 0) + 1

    def before_write_bin(self, b: Bin) -> None:
        """Processing thread, before code that may change any key of ``b``."""
        with self.lock:
            fz = b.frozen
            if fz:
                self._copy_all(b, fz)

    def _copy_all(self, b: Bin, fz: dict[Any, Any]) -> None:
        n = 0
        for k, v in fz.items():
            if v is None:
                fz[k] = self._value(b, k)
                n += 1
        if n:
            self.copies[id(b)] = self.copies.get(id(b), 0) + n

    def take(self, b: Bin, use: Any = None) -> Any:
        """Writer: ``(keys, values, copies)`` of ``b`` at the checkpoint's time -- a value
        is the live state (unchanged since), a ``Raw`` copy, or ``MISSING`` for a key
        that had none; ``copies`` counts the ``Raw`` ones -- and ``b`` is released (no
        more copy-on-write).  With ``use``, returns ``use(keys, values, copies)``
        computed while the processing thread cannot change ``b`` (a background writer
        must encode the live states before they change)."""
        with self.lock:
            _b, fz = self.bins.pop(id(b), (b, {}))
            if b.frozen is fz:
                b.frozen = None  # (else a later checkpoint froze it again: its own now)
            copies = self.copies.pop(id(b), 0)
            keys = list(fz)
            states = b.states
            if copies:
                get = states.get
                values = [get(k, MISSING) if v is None else v for k, v in fz.items()]
            else:
                try:
                    values = list(map(states.__getitem__, keys))
                except KeyError:  # a key that had no state at the checkpoint's time (cleared)
                    values = list(map(states.get, keys, [MISSING] * len(keys)))
            return (keys, values, copies) if use is None else use(keys, values, copies)

    def drain(self) -> None:
        """Copy every frozen state not read yet (the next checkpoint is about to freeze
        again while this one is still being read)."""
        for b, fz in list(self.bins.values()):
            with self.lock:
                self._copy_all(b, fz)
