"""Where a bin's keyed state lives: :class:`KeyedBin`, the seam between the stateful
runtime and the storage of its states.

The runtime (:mod:`tstate.operators.stateful`) reads and changes a bin's states only
through this protocol: a key's state (:meth:`~KeyedBin.get`, :meth:`~KeyedBin.put`,
:meth:`~KeyedBin.clear_key`), the bin's keys and states (:meth:`~KeyedBin.items`), its
timers, and what changed since the last checkpoint captured it
(:meth:`~KeyedBin.take_changes`, a :class:`Changes`).  Today's bins keep every state on
the heap (:class:`tstate.state.bin.Bin`); a store that keeps states encoded elsewhere
(an embedded key-value store per worker) implements the same protocol, its
:attr:`~KeyedBin.states` then being the *resident* part -- the keys loaded (or
written) since it last wrote them back -- and :meth:`~KeyedBin.load` reading one more.

The processing path's inner loop is the one place that does not call a method per
key: it reads and writes :attr:`~KeyedBin.states` (a plain dict) and records a change
in :attr:`~KeyedBin.dirty` / :attr:`~KeyedBin.added` directly, and calls
:meth:`~KeyedBin.load` for a key not resident before taking it as new.  Everything
else (checkpoints, migration, state queries, ``ctx.clear``) calls the methods.

>>> from tstate.state.bin import Bin
>>> b = Bin(4)
>>> b.put("a", 1, track=True); b.put("b", 2, track=True)
>>> b.get("a"), b.get("zz") is NO_STATE, sorted(b.items())
(1, True, [('a', 1), ('b', 2)])
>>> c = b.take_changes(); sorted(c.dirty), c.full, b.changed()
(['a', 'b'], False, False)
>>> b.clear_key("a"); sorted(b.take_changes().removed)      # "a" was captured: a tombstone
['a']
>>> isinstance(b, KeyedBin)
True
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Protocol, runtime_checkable

from attrs import frozen

__all__ = ["Changes", "KeyedBin", "NewBin", "NO_STATE"]

#: the state of a key that has none (in a bin's ``dirty`` and ``frozen``; what
#: :meth:`KeyedBin.get` and :meth:`KeyedBin.load` return for a key without state)
NO_STATE: Any = object()


@frozen
class Changes:
    """What changed in a bin since the last capture: ``dirty`` (key -> its state after
    its last change, :data:`~tstate.state.bin.NO_STATE` for a timer set for a key
    without state), ``removed`` (keys cleared that the last capture may hold: a delta
    deletes them), ``timers_changed`` (a timer was set or fired: a delta carries the
    whole timer set) and ``full`` (the next checkpoint must write the bin whole)."""

    dirty: dict[Any, Any]
    removed: dict[Any, None]
    timers_changed: bool = False
    full: bool = False


@runtime_checkable
class KeyedBin(Protocol):
    """The keyed state of one bin (see the module docstring)."""

    index: int
    #: key -> state of the resident keys (a heap bin: every key); the hot path's dict
    states: dict[Any, Any]
    #: time -> keys with a timer at that time (insertion-ordered)
    timers: dict[Any, dict[Any, None]]
    #: key -> its state after its last change since the last capture (the hot path's)
    dirty: dict[Any, Any]
    #: keys created since the last capture (the hot path's)
    added: dict[Any, None]
    #: a timer set or fired since the last capture
    timers_changed: bool
    #: the next capture writes the whole bin
    full: bool
    #: while a checkpoint that captured this bin has not read it: the keys it still
    #: needs -> their state (:mod:`tstate.state.cow`); None otherwise
    frozen: Optional[dict[Any, Any]]

    def load(self, key: Any) -> Any:
        """The state of ``key``, which is not resident, made resident; ``NO_STATE`` if
        it has none (a heap bin: always)."""
        ...

    def get(self, key: Any) -> Any:
        """``key``'s state (``NO_STATE``: none)."""
        ...

    def put(self, key: Any, state: Any, track: bool) -> None:
        """Set ``key``'s state (``track``: recorded as a change for the next capture)."""
        ...

    def clear_key(self, key: Any, track: bool = True) -> None:
        """Drop ``key``'s state (its timers stay)."""
        ...

    def items(self) -> Iterable[tuple[Any, Any]]:
        """Every ``(key, state)`` of the bin."""
        ...

    def all_resident(self) -> dict[Any, Any]:
        """Every state of the bin made resident: ``states`` (for code handed the whole bin)."""
        ...

    def __len__(self) -> int: ...

    def is_empty(self) -> bool:
        """No state and no timer."""
        ...

    def add_timer(self, time: Any, key: Any) -> bool:
        """A timer of ``key`` at ``time``; True if the bin had none at ``time``."""
        ...

    def mark_dirty(self, key: Any) -> None:
        """``key`` changed (a timer of it): the next capture writes it."""
        ...

    def changed(self) -> bool:
        """Whether the next capture must write something for this bin."""
        ...

    def take_changes(self) -> Changes:
        """What changed since the last capture; the bin starts afresh (a capture)."""
        ...


#: makes the (empty) bin of an index: where a runtime's new bins come from (the heap
#: store: :class:`tstate.state.bin.Bin`)
NewBin = Callable[[int], KeyedBin]
