"""Fork mode's captures (``mode="fork"``): each checkpoint's changed bins are handed,
change sets and all, to a forked snapshot process
(:class:`~tstate.engine.checkpointing.forked.Snapshot`) that encodes and writes them
while the processing path goes on; the coordinator commits them in order once their
process reported (:meth:`ForkedCapture.poll`).  A snapshot process that dies loses its
checkpoint and every later one (each builds on it): the next checkpoint writes every
bin whole (:meth:`ForkedCapture.lose`, a
:class:`~tstate.errors.CheckpointLostWarning`).

The strategy object of one checkpoint mode
(:class:`~tstate.engine.checkpointing.capture.CaptureMode`): the
:class:`~tstate.engine.checkpointing.coordinator.Coordinator` decides when to capture
and commits (in order, once a snapshot process reported: :attr:`ForkedCapture.after_report`).
"""

from __future__ import annotations

import time as _time
import warnings
from concurrent.futures import Future
from typing import Any, Callable, Optional

from tstate.checkpoint import delta as _delta
from tstate.checkpoint import store as _store
from tstate.engine.checkpointing.capture import CaptureMode
from tstate.engine.checkpointing.forked import Snapshot
from tstate.engine.checkpointing.pending import Pending
from tstate.errors import CheckpointError, CheckpointLostWarning
from tstate.hash_kind import HashKind
from tstate.state.bin import Bin

__all__ = ["ForkedCapture"]

#: a changed bin: (bin, dirty, removed, snapshot?) -- snapshot None: emptied, its chain dropped
_Changed = tuple[Bin, dict[Any, None], dict[Any, None], Optional[bool]]
#: an operator's changed bins: (operator, codec, changed bins)
_Work = tuple[str, Any, list[_Changed]]


def _snapshot_job(store: Any, writer: Any, work: list[_Work]) -> Callable[[], dict[str, Any]]:
    """What the snapshot process runs: encode and write every changed bin of ``work``
    for checkpoint ``writer``; its report is the files written and their bytes."""

    def job() -> dict[str, Any]:
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

    return job


class ForkedCapture(CaptureMode):
    """Fork mode's captures for coordinator ``c`` (see the module docstring); the
    commits run on the commit thread."""

    name = "fork"
    after_report = True

    def capture(self, t: int) -> None:
        """Fork mode: take each changed bin's change sets (resetting them), fork a
        snapshot process that encodes and writes them, and go on."""
        start = _time.perf_counter()
        precopy = self.c.precopy()
        if precopy is not None:
            precopy.before_capture()
        work, schemas = self._take_changes()
        meta = self.c.meta_at(t)
        writer = self.c.chains.begin(self.c.store, t)
        if precopy is not None:
            precopy.captured(writer.id)
        forked = _time.perf_counter()
        try:
            snapshot: Optional[Snapshot] = Snapshot.start(_snapshot_job(self.c.store, writer, work))
        except CheckpointError as exc:
            snapshot, reason = None, str(exc)
        self.c.fork_seconds.append(_time.perf_counter() - forked)
        self.c.release(t)
        self.c.commits.uncommitted.append(Pending(t, writer, Future(), snapshot, schemas, meta))
        if snapshot is None:
            self.lose(len(self.c.commits.uncommitted) - 1, reason)
        self.c.capture_seconds.append(_time.perf_counter() - start)

    def _take_changes(self) -> tuple[list[_Work], dict[str, tuple[Any, int, HashKind]]]:
        """Each stateful operator's changed bins with their change sets (which start
        afresh), and the operators' schemas."""
        work: list[_Work] = []
        schemas: dict[str, tuple[Any, int, HashKind]] = {}
        chains = self.c.chains
        for op in self.c.stateful():
            schemas.setdefault(op.name, chains.schema_of(op))
            changed: list[_Changed] = []
            for b in op.bins.values():
                if b.changed():
                    if b.is_empty():  # every key cleared, no timer: the checkpoint drops its chain
                        chains.dropped(op.name, b.index)
                        changed.append((b, b.dirty, b.removed, None))
                    else:
                        changed.append((b, b.dirty, b.removed, chains.wants_snapshot(op.name, b.index, b.full)))
                    b.reset_changes()
            if changed:
                work.append((op.name, op.codec, changed))
        return work, schemas

    def poll(self, block: bool = False) -> None:
        """Fork mode: collect what finished snapshot processes reported (``block``:
        wait for every one)."""
        for i, p in enumerate(self.c.commits.uncommitted):
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
        """Fork mode: the checkpoint ``commits.uncommitted[i]`` cannot be written (its snapshot
        process died).  It and every later one (each builds on it) are abandoned; the
        next checkpoint writes every bin whole, on no earlier checkpoint."""
        gone = self.c.commits.uncommitted[i:]
        del self.c.commits.uncommitted[i:]
        for p in gone:
            if p.snapshot is not None and not p.snapshot.done:
                p.snapshot.kill()
            self.c.commits.discard(p)
        self.c.chains.reset()
        if self.c.lazy is not None:  # the next checkpoint writes every bin whole: decode them
            self.c.lazy.materialise_all()
        for op in self.c.stateful():
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
