"""One checkpoint mode's strategy (:class:`CaptureMode`), and the coordinator as the
strategies see it (:class:`Capturing`).

The :class:`~tstate.engine.checkpointing.coordinator.Coordinator` decides *when* to
capture (the barrier) and commits in order
(:class:`~tstate.engine.checkpointing.commits.CommitOrder`); *how* a checkpoint's bins
are captured, encoded and written is the mode's: ``sync`` and ``thread``
(:mod:`~tstate.engine.checkpointing.frozen_capture`), ``async``
(:mod:`~tstate.engine.checkpointing.async_capture`), ``fork``
(:mod:`~tstate.engine.checkpointing.fork_capture`).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Optional, Protocol

from tstate.checkpoint.settings import Checkpoints, Mode
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.chains import Chains
from tstate.engine.checkpointing.commits import CommitOrder
from tstate.engine.checkpointing import pending as _pending
from tstate.engine.checkpointing.slices import Pacer
from tstate.engine.checkpointing.writer import FileWriter

__all__ = ["Capturing", "CaptureMode", "write_now"]


class Capturing(Protocol):
    """The coordinator as a mode's strategy reads and updates it
    (:class:`~tstate.engine.checkpointing.coordinator.Coordinator`)."""

    cfg: Checkpoints
    store: CheckpointStore
    chains: Chains
    commits: CommitOrder
    pacer: Pacer
    lazy: Any
    #: the RocksDB operators' checkpoints as files (None: no RocksDB state;
    #: :mod:`tstate.engine.checkpointing.file_capture`)
    files: Any
    interval: Optional[float]
    capture_seconds: list[float]
    fork_seconds: list[float]
    snapshot_seconds: list[float]
    lost: list[tuple[int, str]]
    slice_seconds: list[float]
    slice_cpu_seconds: list[float]

    def precopy(self) -> Any: ...

    def stateful(self) -> list[Any]: ...

    def meta_at(self, t: int) -> dict[str, Any]: ...

    def release(self, t: int) -> None: ...

    def _frontier_epoch(self) -> Optional[int]: ...

    def _applied_max(self) -> Optional[int]: ...


def write_now(fs: Any) -> Any:
    """A sink that writes each batch of files right away, on the calling thread."""

    def now(batch: Any) -> Future[None]:
        done: Future[None] = Future()
        try:
            _pending.write_batch(fs, batch)  # (looked up when called: a test replaces it)
            done.set_result(None)
        except BaseException as exc:
            done.set_exception(exc)
        return done

    return now


class CaptureMode:
    """How one checkpoint mode captures, encodes and writes a checkpoint for
    coordinator ``c``; the defaults are what a mode without that part does."""

    #: the mode's name (``Checkpoints.mode``)
    name: Mode = "sync"
    #: a checkpoint commits only once its files are reported written (fork mode)
    after_report = False

    def __init__(self, c: Capturing) -> None:
        self.c = c

    def capture(self, t: int) -> None:
        """Capture every changed bin at ``t`` and release the barrier."""
        raise NotImplementedError

    def step(self) -> None:
        """After every step: do a share of the work left on the processing path."""

    def busy(self) -> bool:
        """Whether the next barrier waits (the previous checkpoint is still being
        encoded or written)."""
        return False

    def poll(self, block: bool = False) -> None:
        """Collect what finished writing (``block``: wait for all of it)."""

    def remote(self) -> Optional[FileWriter]:
        """The writer process that commits, once it has started (async mode)."""
        return None

    def sink(self) -> Any:
        """Where a job's batches of files go (here: written right away)."""
        return write_now(self.c.store.fs)

    def finish(self) -> None:
        """The execution completed: do what is left of the work now."""

    def abort(self) -> None:
        """The execution failed: stop the work under way (its checkpoints are
        abandoned by the commit order)."""

    def shutdown(self) -> None:
        """Stop the threads and processes the mode started."""
