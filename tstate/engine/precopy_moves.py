"""What the pre-copy modules of the embedded engine share (:mod:`tstate.engine.precopy`,
:mod:`tstate.engine.precopy_preload`): the execution as they read it (:class:`Moving`),
one planned move with its changes and its copy (:class:`Track`), and what the moves did
(:class:`PreCopyStats`, :attr:`PreCopy.stats <tstate.engine.precopy.PreCopy>`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol

from attrs import define, field

from tstate.metrics import Metrics
from tstate.migration.handover import Changes
from tstate.progress.frontier import Antichain
from tstate.state.bin import Bin

if TYPE_CHECKING:  # pragma: no cover
    from tstate.checkpoint.manifest import FileRef

__all__ = ["Moving", "PreCopyStats", "Track"]


class Moving(Protocol):
    """The execution whose moves :class:`PreCopy` makes, as it reads it (the embedded
    engine's :class:`~tstate.engine.execution.Execution`)."""

    @property
    def activations(self) -> int: ...

    @property
    def coordinator(self) -> Any: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def operators(self) -> list[list[Any]]: ...

    def frontier(self, node: int, port: int = 0) -> Antichain: ...


@define
class PreCopyStats:
    """What pre-copy moves did so far (all operators): ``planned`` bins; ``handovers``:
    bins handed over as a delta on a preloaded copy, ``delta_bytes`` / ``delta_keys``
    their deltas' bytes and keys; ``fallbacks``: bins shipped whole instead
    (``whole_bytes``), per reason in ``fallback_reasons``; ``preloaded``: copies read
    from a checkpoint (``preload_bytes`` read, ``preload_seconds`` spent, ``late``: of
    them read only at the hand-over, not ahead), ``rebased``: copies brought forward to a
    newer checkpoint (``rebase_bytes`` read); ``handover_seconds``: time in the
    hand-overs (encoding, decoding, applying); ``undecoded``: hand-overs of bins a lazy
    restore had left encoded at their old owner (handed over without decoding them)."""

    planned: int = 0
    handovers: int = 0
    delta_bytes: int = 0
    delta_keys: int = 0
    fallbacks: int = 0
    whole_bytes: int = 0
    fallback_reasons: dict[str, int] = field(factory=dict)
    preloaded: int = 0
    preload_bytes: int = 0
    preload_seconds: float = 0.0
    late: int = 0
    rebased: int = 0
    rebase_bytes: int = 0
    handover_seconds: float = 0.0
    undecoded: int = 0


class Track:
    """One planned pre-copy move: bin ``bin`` of stateful node ``node`` from worker
    ``src`` to ``dst`` at ``time``; ``changes`` since the checkpoints captured meanwhile;
    ``copy``: the bin as of checkpoint ``base`` (its files: ``chain``), or None."""

    __slots__ = ("node", "bin", "src", "dst", "time", "changes", "copy", "base", "chain")

    def __init__(self, node: int, bin: int, src: int, dst: int, time: int, changes: Changes) -> None:
        self.node = node
        self.bin = bin
        self.src = src
        self.dst = dst
        self.time = time
        self.changes = changes
        self.copy: Optional[Bin] = None
        self.base: Optional[int] = None
        self.chain: tuple["FileRef", ...] = ()

    def __repr__(self) -> str:
        return f"Track(node={self.node}, bin={self.bin}, {self.src} -> {self.dst} at {self.time}, base={self.base})"
