"""The PageRank operator's state: one block of vertices (:class:`PRBlock`), kept by
:func:`apps.graph.pagerank.pagerank` and updated by :mod:`apps.graph.pagerank_rounds`;
exported by :mod:`apps.graph.pagerank`."""

from __future__ import annotations

from typing import Optional, Union

from attrs import define, field

__all__ = ["PRBlock"]


@define
class PRBlock:
    """One block of vertices (see the module docstring).  Arrays are numpy arrays
    stored as ``bytes`` (``int64`` / ``float64``), one entry per slot or per edge."""

    ids: list[Optional[Union[int, str]]] = field(factory=list)  # slot -> vertex (None: free)
    slots: dict[Union[int, str], int] = field(factory=dict)  # vertex -> slot
    free: list[int] = field(factory=list)  # free slots, ascending
    indeg: bytes = b""  # int64 per slot
    deg: bytes = b""  # int64 per slot: out-degree
    y: bytes = b""  # float64 per slot
    r: bytes = b""  # float64 per slot: residual
    shown: bytes = b""  # float64 per slot: the rank last emitted (NaN: none)
    src: bytes = b""  # int64 per edge: source slot
    tgt: bytes = b""  # int64 per edge: target slot (in its block)
    starts: list[int] = field(factory=list)  # edges are grouped by target block: where each group starts
    blocks: int = 0  # the number of blocks the state was built for
    epoch: int = -1
    changes: list[tuple[str, Union[int, str], Union[int, str], int]] = field(factory=list)  # round 0
    outs: list[tuple[int, int, int, int]] = field(factory=list)  # round 1: (source slot, target block, slot, +1/-1)
    inbox: list[tuple[int, bytes, bytes]] = field(factory=list)  # this round's (source block, slots, amounts)
    parts: list[tuple[int, float]] = field(factory=list)  # the sum round's (block, sum of y)
