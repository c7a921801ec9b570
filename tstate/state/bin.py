"""A bin: the state of every key whose hash falls in one slice of the hash space.

``bin = key_hash(key) >> (64 - log2(bins))``: the top bits of the key's stable 64-bit
hash (see :mod:`tstate.keys`).  A bin holds

- ``states``: key → state value;
- ``timers``: time → keys with a timer at that time (insertion-ordered, deterministic);
- ``dirty``: keys changed since the last checkpoint (insertion-ordered);

and is what moves between workers and what a checkpoint writes.  The payload of a bin
(:meth:`Bin.to_payload`) is plain msgpack-ready data, encoded by the state's codec:
the same bytes for a checkpoint file and a migration message.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

__all__ = ["Bin"]


class Bin:
    """The state of one bin (see the module docstring)."""

    __slots__ = ("index", "states", "timers", "dirty", "removed")

    def __init__(self, index: int) -> None:
        self.index = index
        self.states: dict[Any, Any] = {}
        self.timers: dict[Any, dict[Any, None]] = {}
        self.dirty: dict[Any, None] = {}
        self.removed: dict[Any, None] = {}  # keys cleared since the last checkpoint

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.states)

    def is_empty(self) -> bool:
        return not self.states and not self.timers

    def add_timer(self, time: Any, key: Any) -> bool:
        """Register a timer; True if ``time`` had no timer in this bin before."""
        keys = self.timers.get(time)
        if keys is None:
            self.timers[time] = {key: None}
            return True
        keys[key] = None
        return False

    def timer_times(self) -> list[Any]:
        return sorted(self.timers)

    def clear_key(self, key: Any) -> None:
        """Drop a key's state (its timers stay: they fire with a fresh state)."""
        if self.states.pop(key, _MISSING) is not _MISSING:
            self.removed[key] = None
            self.dirty.pop(key, None)

    # -- payload --------------------------------------------------------------------
    def to_payload(self, encode_state: Callable[[Any], Any], encode_key: Callable[[Any], Any]) -> dict[str, Any]:
        """Msgpack-ready payload: ``{"bin", "states": [[key, state]...], "timers": [[time, [key...]]...]}``."""
        return {
            "bin": self.index,
            "states": [[encode_key(k), encode_state(v)] for k, v in self.states.items()],
            "timers": [[t, [encode_key(k) for k in keys]] for t, keys in self.timers.items()],
        }

    @classmethod
    def from_payload(
        cls, payload: dict[str, Any], decode_state: Callable[[Any], Any], decode_key: Callable[[Any], Any]
    ) -> "Bin":
        b = cls(payload["bin"])
        b.states = {decode_key(k): decode_state(v) for k, v in payload["states"]}
        b.timers = {t: {decode_key(k): None for k in keys} for t, keys in payload["timers"]}
        return b

    def __repr__(self) -> str:
        return f"Bin({self.index}, keys={len(self.states)}, timers={sum(len(k) for k in self.timers.values())})"


_MISSING = object()
