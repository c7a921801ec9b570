"""The shared buffer of a key's state: reference counting of its nodes and events.

A node of :attr:`KeyState.nodes <apps.cep.state.KeyState>` is ``[event id, stage index,
previous node id, refcount]`` (see :mod:`apps.cep.state`).  The matching engine takes
references when partial matches, held matches and queued timeouts point at a node, and
gives them back with :func:`release`; :func:`chain` reads a partial match back.
"""

from __future__ import annotations

from apps.cep.state import KeyState

__all__ = ["chain", "release"]


def release(st: KeyState, nid: int) -> None:
    """Drop one reference to buffer node ``nid`` (freeing what becomes unreferenced)."""
    nodes = st.nodes
    while nid >= 0:
        n = nodes[nid]
        n[3] -= 1
        if n[3] > 0:
            return
        del nodes[nid]
        eid = n[0]
        r = st.refs[eid] - 1
        if r:
            st.refs[eid] = r
        else:
            del st.refs[eid]
            del st.events[eid]
            del st.times[eid]
        nid = n[2]


def chain(st: KeyState, nid: int) -> list[list[int]]:
    """The nodes of the partial match whose newest node is ``nid``, oldest first."""
    nodes = st.nodes
    out = []
    while nid >= 0:
        n = nodes[nid]
        out.append(n)
        nid = n[2]
    out.reverse()
    return out
