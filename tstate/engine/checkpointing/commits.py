"""Committing captured checkpoints in order (:class:`CommitOrder`), whatever the mode
that captured them.

**Committed after the sinks, in capture order.**  A checkpoint at ``T`` is committed
only once every sink has committed every epoch before ``T`` and its data files are
written (durably: the commit syncs), and only after every checkpoint captured before
it: each builds on the one before.  Once one is not committed (a write or a commit
failed, the execution was abandoned), none after it may be (``broken``): each is
abandoned and what it wrote deleted.

A commit runs on one of three routes: the helper process that wrote its files
(``mode="async"`` on a local store, once that process has started:
:class:`~tstate.engine.checkpointing.writer.FileWriter`), a thread that only commits
(every mode but ``sync``), or in place (``sync``).  The commit itself -- the manifest
on the previous one -- is :func:`tstate.checkpoint.commit.commit`, the path both
engines share.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional

from tstate.checkpoint.commit import BinFile, commit
from tstate.checkpoint.manifest import FileRef
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.pending import Pending, files_of, wait_quietly
from tstate.engine.checkpointing.writer import FileWriter, commit_request
from tstate.errors import CheckpointError

__all__ = ["CommitOrder"]


class CommitOrder:
    """The checkpoints captured and not committed yet, committed in order (see the
    module docstring); ``threaded``: commits run on a thread that only commits."""

    def __init__(self, store: CheckpointStore, threaded: bool) -> None:
        self.store = store
        self.uncommitted: list[Pending] = []
        self.broken = False  # a checkpoint was not committed: none after it may be
        self.pool: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint-commit") if threaded else None
        )
        self.committed: list[int] = []  # times of checkpoints committed by this execution
        #: ids of the checkpoints committed by this execution (and the one restored from),
        #: in order: what a pre-copy move may load a bin from (tstate.engine.precopy)
        self.committed_ids: list[int] = []
        self.committed_set: set[int] = set()
        self.written_bytes: list[int] = []  # bytes of data files written, per committed checkpoint
        #: the RocksDB operators' file checkpoints (tstate.engine.checkpointing.file_capture), if any
        self.files: Any = None

    def restored(self, checkpoint_id: int) -> None:
        """The run resumed from checkpoint ``checkpoint_id`` (a committed one)."""
        self.committed_ids.append(checkpoint_id)
        self.committed_set.add(checkpoint_id)

    @property
    def writing(self) -> int:
        """How many captured checkpoints are still being encoded and written."""
        return sum(1 for p in self.uncommitted if not p.written.done())

    def newest_writing(self) -> bool:
        """Whether the newest captured checkpoint's files are still being written."""
        return bool(self.uncommitted) and not self.uncommitted[-1].written.done()

    def written_uncommitted(self) -> list[tuple[int, bool, list[list[Any]]]]:
        """The checkpoints captured after the last commit whose files are all written
        (in order, up to the first that is not): ``(id, full, files)``, ``files`` as
        ``[operator, bin, snapshot, path, size, xxh64]`` (``path`` None: the bin's chain
        dropped).  Each builds on the one before it (the first on the last committed; a
        ``full`` one on nothing): what a pre-copy move may load a bin from before the
        commit (tstate.engine.precopy; the files are checked by size and xxh64 when read)."""
        out: list[tuple[int, bool, list[list[Any]]]] = []
        for p in self.uncommitted:
            w = p.written
            if self.broken or not w.done() or w.cancelled() or w.exception() is not None:
                break
            out.append((p.writer.id, bool(p.writer.full), files_of(p)))
        return out

    def advance(
        self, sinks_past: Callable[[int], bool], remote: Optional[FileWriter], after_report: bool, wait: bool = False
    ) -> int:
        """Start, in order, the commits of the checkpoints whose time every sink has
        passed (``sinks_past``), then collect the commits done, in order; return how
        many were.  ``remote``: the writer process that commits (async mode, once it
        started); ``after_report``: a checkpoint commits only once its files are
        reported written (fork mode); ``wait``: every checkpoint, now (the end)."""
        local: Optional[Future[Any]] = None  # the last commit submitted here, in this order
        for p in self.uncommitted:
            if p.commit is not None:
                local = p.commit
                continue
            if not (wait or sinks_past(p.time)):
                break
            if after_report and not p.written.done():
                break  # its snapshot process is still writing: later ones wait, in order
            if remote is not None:
                # the writer process commits (in order, after the files it was sent)
                if not p.written.done():
                    if not wait:
                        break  # its files are still being written: later ones wait, in order
                    wait_quietly(p.written)  # (abandoned by the commit if it failed)
                if local is not None and not local.done():
                    if not wait:
                        break  # an earlier checkpoint still commits here: later ones wait
                    wait_quietly(local)
                p.commit = self._commit_remote(p, remote)
                continue
            if self.pool is not None:
                # one thread, in order; it waits for the write job (thread mode)
                p.commit = local = self.pool.submit(self._commit_in_order, p)
            else:
                p.written.result()
                done: Future[Any] = Future()
                done.set_result(self._commit_in_order(p))
                p.commit = done
        return self._collect(wait)

    def _collect(self, wait: bool) -> int:
        """Record, in order, the commits done (``wait``: waiting for each); a write or
        commit error is raised here."""
        n = 0
        while self.uncommitted:
            p = self.uncommitted[0]
            if p.commit is None or (not p.commit.done() and not wait):
                break
            self.written_bytes.append(p.written.result())  # re-raises a writer error here
            p.commit.result()
            self.committed.append(p.time)
            self.committed_ids.append(p.writer.id)
            self.committed_set.add(p.writer.id)
            self.uncommitted.pop(0)
            n += 1
        return n

    def _abandoned(self, p: Pending) -> bool:
        """Whether ``p`` must not commit (its data or an earlier checkpoint failed:
        a later checkpoint, built incrementally on it, would be wrong)."""
        written = p.written
        if self.broken or written.cancelled() or written.exception() is not None:
            self.broken = True
            p.writer.abort()
            return True
        return False

    def _commit_remote(self, p: Pending, files: FileWriter) -> Future[Any]:
        """Async mode, local store: have the writer process commit ``p`` (whose files it
        wrote) -- the manifest, the sync and the garbage collection off this process --
        unless its data or an earlier checkpoint failed."""
        writer = p.writer
        if self._abandoned(p):
            failed: Future[Any] = Future()
            failed.set_exception(CheckpointError(f"checkpoint at {writer.time!r} abandoned: an earlier write or commit failed"))
            return failed
        store = self.store
        request = commit_request(writer, store, files_of(p), p.schemas, p.meta, p.base)
        fut: Future[Any] = files.commit(request)

        def done(f: Future[Any]) -> None:  # (on the writer's acknowledging thread)
            if f.cancelled() or f.exception() is not None:
                self.broken = True
                return
            store.committed_elsewhere(writer)
            store.problems = list((f.result() or {}).get("problems", []))

        fut.add_done_callback(done)
        return fut

    def _commit_in_order(self, p: Pending) -> Any:
        """Commit thread (or in place): commit ``p`` unless it is abandoned; files as
        the job or the snapshot process reported them."""
        if self._abandoned(p):
            raise CheckpointError(f"checkpoint at {p.writer.time!r} abandoned: an earlier write or commit failed")
        if p.sst is not None:  # the databases' files uploaded first
            try:
                self.files.wait(p.sst)
            except BaseException:
                self.broken = True
                p.writer.abort()
                raise
        files = [
            BinFile(name, b, None if path is None else FileRef(path, size, xxh64), snapshot=snap)  # None: emptied
            for name, b, snap, path, size, xxh64 in files_of(p)
        ]
        try:
            done = commit(p.writer, p.schemas, files, p.meta)  # the commit path both engines share
        except BaseException:
            self.broken = True
            raise
        if p.sst is not None:
            self.files.committed(p.sst)
        return done

    def discard(self, p: Pending) -> None:
        """Delete what an abandoned checkpoint wrote."""
        p.writer.abort()
        for f in files_of(p):  # reported by its snapshot process or encoded by its job (adopted or not)
            if f[3] is not None:
                self.store.fs.delete(f[3])

    def abort(self) -> None:
        """The execution failed: every checkpoint not committed is abandoned (snapshot
        processes killed, what they wrote deleted)."""
        self.broken = True
        for p in self.uncommitted:
            if p.snapshot is not None and not p.snapshot.done:
                p.snapshot.kill()
            for f in (p.written, p.commit, p.sst):
                if f is not None:
                    f.cancel()
                    try:
                        f.result()
                    except Exception:
                        pass
            c = p.commit
            ok = c is not None and c.done() and not c.cancelled() and c.exception() is None
            if not ok:
                self.discard(p)
        self.uncommitted.clear()

    def shutdown(self) -> None:
        """Wait for the commit thread to finish and stop it."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
