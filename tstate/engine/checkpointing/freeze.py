"""Copy-on-write freezing: what keeps asynchronous checkpoints off the processing path
(``mode="fork"`` needs none: the fork is the freeze, see :mod:`tstate.engine.checkpointing.forked`).

At a checkpoint the processing thread only *freezes* each changed bin: the bin's keys
changed (and cleared) since the previous checkpoint become its ``frozen`` dict -- each
key mapped to its state at the checkpoint's time (the bin's ``dirty`` dict, which maps
every changed key to its state after its last change, is handed over as it is;
cleared keys map to :data:`MISSING`) -- and its change sets start afresh.  That is one
dict handed over per bin, whatever the number of keys (a bin written whole, a snapshot,
freezes a C-level copy of its ``states``).  The checkpoint then reads each bin later
(:meth:`Frozen.take`: the frozen dict's values, no lookup in the bin), in slices on the
processing thread (``mode="async"``, :mod:`tstate.engine.checkpointing.slices`) or on a
background thread (``mode="thread"``).

A frozen state object is what the checkpoint will encode, so it must not change
meanwhile.  A state that is *replaced* (an ``int``, a tuple, a frozen attrs class: the
function returns the new one) never changes: the frozen dict keeps the old object.  A
state that can change *in place* is copied first: before the processing thread writes a
key still frozen and not copied (a record or timer for it; ``type(v) is not Copied``),
it calls :meth:`Frozen.before_write`, which replaces the frozen object by a
:class:`Copied` copy sharing nothing mutable with it
(:func:`tstate.types.copier.compile_copier`: ``list.copy`` for a ``list[int]``) -- a
key-granular copy-on-write.  Nothing is copied for the keys nobody writes in the
meantime (usually most of them), a copy is encoded and checked with the rest of its bin
(in one call), and the bin's file lists its keys in the same order whichever were
copied.

>>> from tstate.state.bin import Bin
>>> from tstate.types import StateCodec
>>> b = Bin(0); b.states = {"a": [1], "b": [2]}
>>> f = Frozen(StateCodec(list[int]), "op")
>>> f.freeze(b, dict(b.states))
>>> f.before_write(b, "a"); b.states["a"].append(99)     # the processing thread moves on
>>> f.take(b)
(['a', 'b'], [[1], [2]], 1)
>>> b.frozen is None
True
"""

from __future__ import annotations

import threading
from typing import Any

from tstate.state.bin import NO_STATE, Bin
from tstate.state.cow import Copied, must_copy

__all__ = ["Frozen", "Copied", "MISSING", "must_copy"]

#: the state of a key that had none at the checkpoint's time (:data:`tstate.state.bin.NO_STATE`)
MISSING: Any = NO_STATE


class Frozen:
    """The frozen bins of one operator instance in one in-flight checkpoint: the
    :class:`~tstate.state.cow.CopyOnWrite` the processing path calls."""

    __slots__ = ("lock", "codec", "operator", "copies", "bins", "copy")

    def __init__(self, codec: Any, operator: str) -> None:
        self.lock = threading.Lock()
        self.codec = codec
        self.operator = operator
        self.copy = codec.copier  # a copy sharing nothing mutable (not checked: the encoding checks it)
        self.copies: dict[int, int] = {}  # id(bin) -> how many of its keys were copied
        self.bins: dict[int, tuple[Bin, dict[Any, Any]]] = {}  # id(bin) -> (bin, its frozen keys), not taken yet

    @property
    def pending(self) -> bool:
        """Whether some frozen bin has not been read yet."""
        return bool(self.bins)

    def freeze(self, b: Bin, keys: dict[Any, Any]) -> None:
        """Processing thread, at the checkpoint: ``keys`` (key -> its state at the
        checkpoint's time, or :data:`MISSING`; handed over: it becomes ``b.frozen``) are
        to be read."""
        b.frozen = keys
        self.bins[id(b)] = (b, keys)

    def before_write(self, b: Bin, k: Any) -> None:
        """Processing thread, before changing ``k``'s state in place (callers check
        first that :func:`must_copy`): keep its frozen state."""
        with self.lock:
            fz = b.frozen
            if fz is not None:
                v = fz.get(k, MISSING)
                if v is not MISSING and type(v) is not Copied:
                    fz[k] = Copied(self.copy(v))
                    i = id(b)
                    self.copies[i] = self.copies.get(i, 0) + 1

    def before_write_bin(self, b: Bin) -> None:
        """Processing thread, before code that may change any key of ``b`` in place."""
        with self.lock:
            fz = b.frozen
            if fz:
                self._copy_all(b, fz)

    def _copy_all(self, b: Bin, fz: dict[Any, Any]) -> None:
        n = 0
        copy = self.copy
        for k, v in fz.items():
            if v is not MISSING and type(v) is not Copied:
                fz[k] = Copied(copy(v))
                n += 1
        if n:
            self.copies[id(b)] = self.copies.get(id(b), 0) + n

    def take(self, b: Bin, use: Any = None) -> Any:
        """Writer: ``(keys, values, copies)`` of ``b`` at the checkpoint's time -- a value
        is the state object (unchanged since), its copy, or :data:`MISSING` for a key
        that had none; ``copies`` counts the copies -- and ``b`` is released (no more
        copy-on-write).  With ``use``, returns ``use(keys, values, copies)`` computed
        while the processing thread cannot change ``b`` (a background writer must encode
        the states before they change)."""
        with self.lock:
            _b, fz = self.bins.pop(id(b), (b, {}))
            if b.frozen is fz:
                b.frozen = None  # (else a later checkpoint froze it again: its own now)
            copies = self.copies.pop(id(b), 0)
            keys = list(fz)
            values = list(fz.values())
            if copies:
                values = [v.value if type(v) is Copied else v for v in values]
            return (keys, values, copies) if use is None else use(keys, values, copies)

    def drain(self) -> None:
        """Copy every frozen state not read yet (the next checkpoint is about to freeze
        again while this one is still being read)."""
        for b, fz in list(self.bins.values()):
            with self.lock:
                self._copy_all(b, fz)
