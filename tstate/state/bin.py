"""A bin: the state of every key whose hash falls in one slice of the hash space.

``bin = key_hash(key) >> (64 - log2(bins))``: the top bits of the key's stable 64-bit
hash (see :mod:`tstate.keys`).  A bin holds

- ``states``: key → state value;
- ``timers``: time → keys with a timer at that time (insertion-ordered, deterministic);
- ``dirty``: keys changed since the last checkpoint (insertion-ordered), each mapped to
  its state after its last change (:data:`NO_STATE` if it has none: a timer set for a
  key without state) -- a checkpoint reads the states it writes from here, not from
  ``states`` (:mod:`tstate.engine.checkpointing.freeze`); ``removed``:
  keys cleared since then that the last checkpoint may hold (its next delta deletes
  them), ``added``: keys created since then (clearing one of those needs no
  tombstone: no checkpoint holds it), ``timers_changed``: a timer was set or fired
  since then (a delta carries the whole timer set), ``full``: the next checkpoint must
  write the whole bin (all these are kept only while checkpointing);
- ``frozen``: while a checkpoint that captured this bin has not read it yet, the keys
  whose state at the checkpoint's time it still needs, each mapped to that state
  (``None`` otherwise): the copy-on-write set of :mod:`tstate.engine.checkpointing.freeze`;

and is what moves between workers and what a checkpoint writes (encoded by
:mod:`tstate.state.payload`: the same bytes for a checkpoint file and a migration
message).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from tstate.state.appends import AppendLog
from tstate.state.storage import NO_STATE, Changes

__all__ = ["Bin", "NO_STATE"]


class Bin:
    """The state of one bin (see the module docstring), every state on the heap: the
    :class:`~tstate.state.storage.KeyedBin` of today's stateful operators."""

    __slots__ = ("index", "states", "timers", "dirty", "removed", "added", "timers_changed", "full", "frozen", "appends")

    def __init__(self, index: int) -> None:
        self.index = index
        self.states: dict[Any, Any] = {}
        self.timers: dict[Any, dict[Any, None]] = {}
        self.dirty: dict[Any, Any] = {}  # key -> its state after its last change (or NO_STATE)
        self.removed: dict[Any, None] = {}  # keys cleared since the last checkpoint (tombstones)
        self.added: dict[Any, None] = {}  # keys created since the last checkpoint
        self.timers_changed = False  # a timer set or fired since the last checkpoint
        self.full = False  # the next checkpoint writes the whole bin (e.g. it just moved here)
        self.frozen: dict[Any, Any] | None = None  # keys an in-flight checkpoint still reads -> their state
        #: list states a checkpoint may write as what was appended (tstate.state.appends); None: none yet
        self.appends: AppendLog | None = None

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.states)

    def load(self, key: Any) -> Any:
        """A key not in ``states`` has no state: every state of a heap bin is resident."""
        return NO_STATE

    def get(self, key: Any) -> Any:
        """``key``'s state (:data:`NO_STATE`: none)."""
        return self.states.get(key, NO_STATE)

    def put(self, key: Any, state: Any, track: bool) -> None:
        """Set ``key``'s state (``track``: the next checkpoint writes it)."""
        states = self.states
        if track:
            if key not in states:
                self.added[key] = None
            self.dirty[key] = state
        states[key] = state

    def items(self) -> Iterable[tuple[Any, Any]]:
        """Every ``(key, state)`` of the bin."""
        return self.states.items()

    def all_resident(self) -> dict[Any, Any]:
        """Every state of the bin made resident: ``states``, which code handed the whole
        bin (``fold_bins``) may change in place (a heap bin: always all of them)."""
        return self.states

    def is_empty(self) -> bool:
        return not self.states and not self.timers

    def write_back(self) -> None:
        """Resident states into the bin's store (a heap bin has none: nothing to do)."""

    def add_timer(self, time: Any, key: Any) -> bool:
        """Register a timer; True if ``time`` had no timer in this bin before."""
        keys = self.timers.get(time)
        if keys is None:
            self.timers[time] = {key: None}
            return True
        keys[key] = None
        return False

    def estimated_size(self, sample: int = 64) -> int:
        """Estimated encoded size in bytes (keys and states; from a sample of at most
        ``sample`` keys for large bins): what moving or checkpointing it costs."""
        from tstate.keys import key_bytes
        from tstate.types.size import estimated_size

        n = len(self.states)
        if not n:
            return 0
        items = self.states.items()
        if n > sample:
            step = n // sample
            picked = [kv for i, kv in enumerate(items) if i % step == 0][:sample]
        else:
            picked = list(items)
        per = sum(len(key_bytes(k)) + estimated_size(v) for k, v in picked) / len(picked)
        return int(per * n)

    def mark_dirty(self, key: Any) -> None:
        """``key`` changed (its state, or a timer of it): the next checkpoint writes it."""
        self.dirty[key] = self.states.get(key, NO_STATE)

    def timer_times(self) -> list[Any]:
        return sorted(self.timers)

    def clear_key(self, key: Any, track: bool = True) -> None:
        """Drop a key's state (its timers stay: they fire with a fresh state).  With
        ``track`` (checkpointing), the next delta deletes it -- unless it was created
        since the last checkpoint, which then never held it: no tombstone."""
        if self.states.pop(key, NO_STATE) is not NO_STATE:
            self.dirty.pop(key, None)
            if self.added.pop(key, NO_STATE) is NO_STATE and track:
                self.removed[key] = None

    def changed(self) -> bool:
        """Whether the next checkpoint must write something for this bin."""
        return bool(self.full or self.dirty or self.removed or self.timers_changed)

    def take_changes(self) -> Changes:
        """What changed since the last capture (the change sets themselves, handed
        over); the bin starts afresh."""
        out = Changes(self.dirty, self.removed, self.timers_changed, self.full)
        self.reset_changes()
        return out

    def reset_changes(self) -> None:
        """A checkpoint captured the bin: nothing changed since."""
        self.dirty = {}
        self.removed = {}
        self.added = {}
        self.timers_changed = False
        self.full = False

    def __repr__(self) -> str:
        return f"Bin({self.index}, keys={len(self.states)}, timers={sum(len(k) for k in self.timers.values())})"

