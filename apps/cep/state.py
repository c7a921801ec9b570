"""The per-key state of the matching engine: plain typed data.

Everything the engine remembers about one key lives in a :class:`KeyState` -- attrs
classes whose fields are ints, lists, dicts, tuples and the user's event type -- so
tstate can encode it with cattrs + msgpack, checkpoint it and migrate it between
workers.  Nothing in it refers to Python objects of the engine (conditions, NFA states
are referenced by index), and no pickle is ever needed.

Layout (a Flink ``SharedBuffer`` in miniature):

* ``events`` / ``times`` / ``refs``: the buffered events by event id, each stored once,
  its timestamp, and its reference count (the number of buffer nodes that hold it);
* ``nodes``: the shared buffer proper.  A node is ``[event_id, stage_index,
  previous_node_id, refcount]``: one event accepted into one stage, linked to the node
  of the event accepted before it.  A partial match is a pointer to its newest node;
  partial matches that share a prefix share its nodes (a persistent linked list).
  ``refcount`` counts the partial matches (and held matches, queued timeouts) pointing
  at the node plus the nodes linking to it; a node whose count drops to 0 is removed
  and releases its event and its predecessor;
* ``runs``: the partial matches ("computation states"), each
  ``(nfa_state_id, node_id, start_time, start_event_id, last_event_id)``, ordered by
  start (``last_event_id`` caches ``nodes[node_id][0]``);
* ``held``: complete matches held back by an after-match skip strategy until no partial
  match that started earlier is alive: ``(node_id, start_time, start_event_id, seq)``;
* ``expired``: timed-out partial matches found by ``process`` and not yet reported:
  ``(node_id, timeout_time)``;
* ``next_event`` / ``next_node``: id counters (event ids grow with arrival order and are
  what after-match skipping compares).

A state is only meaningful together with the :class:`~apps.cep.matcher.Matcher` (the
compiled pattern) that produced it; migrating it to a different pattern is not
supported.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from attrs import define, field

__all__ = ["E", "KeyState", "T"]

E = TypeVar("E")
T = TypeVar("T")


@define
class KeyState(Generic[E, T]):
    """All the matching state of one key (see the module docstring).

    Encode it with ``cattrs.Converter().unstructure(state, KeyState[Event, int])`` and
    decode it with ``structure(data, KeyState[Event, int])``;
    :attr:`Matcher.state_type <apps.cep.matcher.Matcher.state_type>` gives that type.
    """

    runs: list[tuple[int, int, T, int, int]] = field(factory=list)
    held: list[tuple[int, T, int, int]] = field(factory=list)
    expired: list[tuple[int, T]] = field(factory=list)
    events: dict[int, E] = field(factory=dict)
    times: dict[int, T] = field(factory=dict)
    refs: dict[int, int] = field(factory=dict)
    nodes: dict[int, list[int]] = field(factory=dict)
    next_event: int = 0
    next_node: int = 0

    def is_empty(self) -> bool:
        """True when nothing is pending: no partial match, no held match, no timeout to
        report (the key's state can then be dropped)."""
        return not self.runs and not self.held and not self.expired

    def size(self) -> dict[str, Any]:
        """Counts, for monitoring."""
        return {
            "runs": len(self.runs),
            "held": len(self.held),
            "expired": len(self.expired),
            "events": len(self.events),
            "nodes": len(self.nodes),
        }
