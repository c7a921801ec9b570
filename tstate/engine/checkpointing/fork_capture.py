"""Fork mode's captures (``mode="fork"``): each checkpoint's changed bins are handed,
change sets and all, to a forked snapshot process
(:class:`~tstate.engine.checkpointing.forked.Snapshot`) that encodes and writes them
while the processing path goes on; the coordinator commits them in order once their
process reported (:meth:`ForkedCapture.poll`).  A snapshot process that dies loses its
checkpoint and every later one (each builds on it): the next checkpoint writes every
bin whole (:meth:`ForkedCapture.lose`, a
:class:`~tstate.errors.CheckpointLostWarning`).

The strategy object of one checkpoint mode: it reads and updates its
:class:`~tstate.engine.checkpointing.coordinator.Coordinator` (the checkpoints not
committed yet, the chain lengths, the restore still under way: :class:`Captures`),
which decides when to capture and commits.
"""

from __future__ import annotations

import time as _time
import warnings
from concurrent.futures import Future
from typing import Any, Optional, Protocol

from tstate.checkpoint import delta as _delta
from tstate.checkpoint import store as _store
from tstate.engine.checkpointing.forked import Snapshot
from tstate.engine.checkpointing.pending import Pending
from tstate.errors import CheckpointError, CheckpointLostWarning
from tstate.hash_kind import HashKind
from tstate.state.bin import Bin
from tstate.checkpoint.store import CheckpointStore

__all__ = ["ForkedCapture", "Captures"]


class Captures(Protocol):
    """The coordinator as fork mode's captures read and update it
    (:class:`~tstate.engine.checkpointing.coordinator.Coordinator`)."""

    store: CheckpointStore
    lazy: Any
    capture_seconds: list[float]
    fork_seconds: list[float]
    snapshot_seconds: list[float]
    lost: list[tuple[int, str]]
    _uncommitted: list[Pending]
    _fresh: bool
    _chains: dict[tuple[str, int], int]
    _base_manifest: Any
    _last_id: Optional[int]

    def _precopy(self) -> Any: ...

    def _stateful(self) -> list[Any]: ...

    def _schema_of(self, op: Any) -> tuple[Any, int, HashKind]: ...

    def _wants_snapshot(self, name: str, index: int, full: bool) -> bool: ...

    def _meta_at(self, t: int) -> dict[str, Any]: ...

    def _release(self, t: int) -> None: ...

    def _discard(self, p: Pending) -> None: ...


class ForkedCapture:
    """Fork mode's captures for coordinator ``c`` (see the module docstring)."""

    def __init__(self, c: Captures) -> None:
        self.c = c

    def capture(self, t: int) -> None:
        """Fork mode: take each changed bin's change sets (resetting them), fork a
        snapshot process that encodes and writes them, and go on."""
        start = _time.perf_counter()
        precopy = self.c._precopy()
        if precopy is not None:
            precopy.before_capture()
        # per changed bin: (bin, dirty, removed, snapshot?) -- None: empty, dropped
        work: list[tuple[str, Any, list[tuple[Bin, dict[Any, None], dict[Any, None], Optional[bool]]]]] = []
        schemas: dict[str, tuple[Any, int, HashKind]] = {}
        for op in self.c._stateful():
            schemas.setdefault(op.name, self.c._schema_of(op))
            changed: list[tuple[Bin, dict[Any, None], dict[Any, None], Optional[bool]]] = []
            for b in op.bins.values():
                if b.changed():
                    if b.is_empty():  # every key cleared, no timer: the checkpoint drops its chain
                        self.c._chains[op.name, b.index] = 0
                        changed.append((b, b.dirty, b.removed, None))
                    else:
                        changed.append((b, b.dirty, b.removed, self.c._wants_snapshot(op.name, b.index, b.full)))
                    b.reset_changes()
            if changed:
                work.append((op.name, op.codec, changed))
        meta = self.c._meta_at(t)
        writer = self.c.store.begin(t, full=self.c._fresh)
        if self.c._fresh:
            self.c._base_manifest = None
        self.c._fresh = False
        self.c._last_id = writer.id
        if precopy is not None:
            precopy.captured(writer.id)
        store = self.c.store

        def job() -> dict[str, Any]:
            """In the snapshot process: encode and write every changed bin."""
            files: list[list[Any]] = []
            total = 0
            fs = store.fs
            try:
                for name, codec, changed in work:
                    for b, dirty, removed, snapshot in changed:
                        if snapshot is None:  # an empty bin: dropped
                            files.append([name, b.index, True, None, 0, None])
                            continue
                        view = Bin(b.index)
                        view.states, view.timers, view.dirty, view.removed = dict(b.items()), b.timers, dirty, removed
                        # (looked up when called: fault-injection tests replace them)
                        data = _delta.encode_change(view, codec, snapshot=snapshot, operator=name)
                        kind = "snap" if snapshot else "delta"
                        ref = _store.write_data_file(fs, name, b.index, writer.id, writer.token, kind, data)
                        files.append([name, b.index, snapshot, ref.path, ref.size, ref.xxh64])
                        total += ref.size
            except BaseException:
                for f in files:  # a failed checkpoint leaves no files behind
                    if f[3] is not None:
                        fs.delete(f[3])
                raise
            return {"files": files, "bytes": total}

        forked = _time.perf_counter()
        try:
            snapshot: Optional[Snapshot] = Snapshot.start(job)
        except CheckpointError as exc:
            snapshot, reason = None, str(exc)
        self.c.fork_seconds.append(_time.perf_counter() - forked)
        self.c._release(t)
        self.c._uncommitted.append(Pending(t, writer, Future(), snapshot, schemas, meta))
        if snapshot is None:
            self.lose(len(self.c._uncommitted) - 1, reason)
        self.c.capture_seconds.append(_time.perf_counter() - start)

    def poll(self, block: bool = False) -> None:
        """Fork mode: collect what finished snapshot processes reported (``block``:
        wait for every one)."""
        for i, p in enumerate(self.c._uncommitted):
            s = p.snapshot
            if s is None or p.written.done():
                continue
            if block:
                s.wait()
            elif not s.poll():
                continue
            if s.seconds is not None:
                self.c.snapshot_seconds.append(s.seconds)
            if s.lost is not None:
                self.lose(i, s.lost)
                return  # the list ends here now
            if s.error is not None:
                p.written.set_exception(s.error)  # raised like a failed write in thread mode
            else:
                p.files = s.result["files"]
                p.written.set_result(s.result["bytes"])

    def lose(self, i: int, reason: str) -> None:
        """Fork mode: the checkpoint ``_uncommitted[i]`` cannot be written (its snapshot
        process died).  It and every later one (each builds on it) are abandoned; the
        next checkpoint writes every bin whole, on no earlier checkpoint."""
        gone = self.c._uncommitted[i:]
        del self.c._uncommitted[i:]
        for p in gone:
            if p.snapshot is not None and not p.snapshot.done:
                p.snapshot.kill()
            self.c._discard(p)
        self.c._fresh = True
        self.c._chains.clear()
        if self.c.lazy is not None:  # the next checkpoint writes every bin whole: decode them
            self.c.lazy.materialise_all()
        for op in self.c._stateful():
            for b in op.bins.values():
                b.full = True
        t = gone[0].time
        self.c.lost.append((t, reason))
        warnings.warn(
            CheckpointLostWarning(
                f"checkpoint at time {t} abandoned ({reason})"
                + (f", with the {len(gone) - 1} captured after it" if len(gone) > 1 else "")
                + "; the next checkpoint writes every bin whole"
            ),
            stacklevel=2,
        )
