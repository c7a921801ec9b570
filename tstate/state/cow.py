"""Copy-on-write, as the processing path sees it: :class:`CopyOnWrite`.

An asynchronous checkpoint reads a bin's states *after* processing has gone on past the
checkpoint's time.  At the capture it *freezes* the keys it will read (``bin.frozen``:
key -> its state at the checkpoint's time); from then until it has read them, the
processing path must not change one of those state objects in place.  Before it does
(a record or a timer for a frozen key whose state can change in place), it asks the
checkpoint to keep a copy: :meth:`CopyOnWrite.before_write` replaces the frozen object
by a :class:`Copied` copy.  A key whose frozen state is :class:`Copied` already (or
that is not frozen) needs nothing.

The engine's checkpoints implement the protocol
(:class:`tstate.engine.checkpointing.freeze.Frozen`); the stateful runtime
(:mod:`tstate.operators.stateful`) only calls it, so this layer names no engine.

>>> frozen = {"a": [1], "b": Copied([2])}
>>> must_copy(frozen, "a"), must_copy(frozen, "b"), must_copy(frozen, "c"), must_copy(None, "a")
(True, False, False, False)
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from tstate.state.bin import NO_STATE, Bin

__all__ = ["Copied", "CopyOnWrite", "must_copy"]


class Copied:
    """A frozen state's copy (made before the processing thread changed the state)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Copied({self.value!r})"


def must_copy(frozen: Optional[dict[Any, Any]], key: Any) -> bool:
    """Whether ``key``'s state must be copied before it changes in place: it is frozen
    and not copied yet (what the processing path checks inline)."""
    if frozen is None:
        return False
    v = frozen.get(key, NO_STATE)
    return v is not NO_STATE and type(v) is not Copied


class CopyOnWrite(Protocol):
    """An in-flight checkpoint's frozen bins of one operator instance, as the
    processing path must respect them (see the module docstring)."""

    @property
    def pending(self) -> bool:
        """Whether some frozen bin has not been read yet."""
        ...

    def before_write(self, b: Bin, key: Any) -> None:
        """Before ``key``'s state in ``b`` changes in place (callers check
        :func:`must_copy` first): keep its frozen state."""
        ...

    def before_write_bin(self, b: Bin) -> None:
        """Before code that may change any key of ``b`` in place (a ``fold_bins``
        function gets the whole bin)."""
        ...

    def drain(self) -> None:
        """Copy every frozen state not read yet (the next checkpoint is about to freeze
        again while this one is still being read)."""
        ...
