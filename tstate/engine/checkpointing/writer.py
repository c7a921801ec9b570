"""A helper process that writes checkpoint data files and commits checkpoints: I/O and
bookkeeping that never wait for, nor hold, the processing process's interpreter lock.

A checkpoint writes one data file per changed bin -- a thousand small files is common
-- and its commit builds and writes a manifest naming every file, then deletes the
files no retained checkpoint needs any more (another thousand).  A writer *thread*
needs the interpreter lock for all of it: around every system call (open, write,
rename, stat, unlink: several per file) and for the manifest's Python bookkeeping
(tens of milliseconds per commit), and while the processing thread runs Python code it
gets the lock only every switch interval (5 ms): each hand-over preempts the processing
thread.  :class:`FileWriter` instead starts ``python -m tstate.engine.checkpointing.writer
LOCATION`` once (a small process: it imports only the store layer) and sends it
The child signals once it has started (until then :attr:`FileWriter.ready` is unset and
a caller may write another way: an interpreter takes a few hundred milliseconds to start).

- *batches* of ``(path, bytes)`` (:meth:`FileWriter.write`): the child writes each file
  straight under its name (:meth:`~tstate.checkpoint.fs.LocalFS.write_unread`: nothing
  reads a data file before a manifest names it; no fsync: the commit syncs once);
- *commits* (:meth:`FileWriter.commit`): which files a checkpoint adopts (per bin: its
  new snapshot or delta, or that it is now empty), its operators' schemas and its
  metadata; the child builds the manifest on the previous one
  (:class:`~tstate.checkpoint.store.CheckpointWriter`, the same code a commit in
  process runs), syncs, writes it and collects garbage
  (:meth:`~tstate.checkpoint.store.CheckpointStore._collect`).

One pipe write per message, made by a feeder thread (the lock is released during the
write); the child handles messages in order and acknowledges each, and every method
returns a future.  A child that dies, or cannot write, fails the futures of the
messages not acknowledged with a :class:`~tstate.errors.CheckpointError` naming the
file: the checkpoint is then abandoned like any failed write.  The child runs at a
lower priority (``nice`` 10): where it shares a processor with the processing process,
the processing process comes first.  The child dies with its parent (``PR_SET_PDEATHSIG`` on Linux): a checkpoint is never committed by a child
outliving a killed run (a restarted run could be writing the same checkpoint id).

Frames are a 4-byte big-endian length and msgspec MessagePack: ``[seq, 0, [[path,
bytes], ...]]`` or ``[seq, 1, request]`` one way (``request``: msgpack bytes, like the
manifest it becomes), ``[seq, None | error, result]`` the other.  No pickle.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> w = FileWriter(d)
>>> w.write([("data/x/0/a.bin", b"hello")]).result(timeout=30)
>>> open(os.path.join(d, "data/x/0/a.bin"), "rb").read()
b'hello'
>>> w.close()
"""

from __future__ import annotations

import os
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import IO, Any, Mapping, Optional, Sequence

import msgpack
import msgspec

from tstate.errors import CheckpointError
from tstate.hash_kind import HashKind

__all__ = ["FileWriter", "commit_request", "main"]

_LEN = struct.Struct(">I")
_FILES, _COMMIT = 0, 1  # the kinds of message
_encode = msgspec.msgpack.Encoder().encode


def _read_frame(f: IO[bytes]) -> Optional[bytes]:
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = _LEN.unpack(head)
    body = f.read(n)
    if len(body) < n:
        return None
    return body


class FileWriter:
    """Writes data files through a helper process (see the module docstring) for the
    store at ``location`` (a local directory)."""

    def __init__(self, location: str) -> None:
        # the directory holding the tstate package (this file is tstate/engine/checkpointing/writer.py)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.location = location
        self._lock = threading.Lock()
        self._futures: dict[int, tuple[Future[Any], list[str]]] = {}
        self._seq = 0
        #: set once the child has started (until then a caller may write another way:
        #: starting an interpreter takes a few hundred milliseconds)
        self.ready = threading.Event()
        self._dead: Optional[str] = None
        self._queue: queue.SimpleQueue[Optional[bytes]] = queue.SimpleQueue()
        # the feeder thread starts the child and outlives it: the child's parent-death
        # signal (sent when the thread that started it ends) comes only once it is done
        started: Future[subprocess.Popen[bytes]] = Future()
        # (``-c`` rather than ``-m``: the package imports this module before ``-m`` would
        # run it as ``__main__``, which makes runpy warn)
        cmd = [sys.executable, "-c", _CHILD, location]
        self._feeder = threading.Thread(target=self._feed, args=(cmd, env, started), name="tstate-checkpoint-writer-feed",
                                        daemon=True)
        self._feeder.start()
        self._proc = started.result()  # (raises the OSError of a child that cannot start)
        self._reader = threading.Thread(target=self._read, name="tstate-checkpoint-writer-acks", daemon=True)
        self._reader.start()

    def write(self, files: Sequence[tuple[str, bytes]]) -> Future[None]:
        """Write ``files`` (paths relative to the location); the future completes once
        all of them are written.  Returns at once: the batch is handed to the child by
        a feeder thread (queued until it has started: see :attr:`ready`)."""
        return self._send(_FILES, [[p, d] for p, d in files], [p for p, _ in files])

    def commit(self, request: dict[str, Any]) -> Future[Any]:
        """Commit a checkpoint in the child (see :func:`commit_request`); the future's
        result is ``{"problems": [...]}`` (what garbage collection found wrong), or a
        :class:`~tstate.errors.CheckpointError` saying why nothing was committed."""
        return self._send(_COMMIT, msgpack.packb(request, use_bin_type=True), [f"the manifest of checkpoint {request['id']}"])

    def _send(self, kind: int, body: Any, names: list[str]) -> Future[Any]:
        """Queue one message for the child; its future fails naming ``names`` (what it
        writes) if the child dies first."""
        fut: Future[Any] = Future()
        with self._lock:
            if self._dead is not None:
                fut.set_exception(CheckpointError(self._dead))
                return fut
            self._seq += 1
            seq = self._seq
            self._futures[seq] = (fut, names)
        self._queue.put(_encode([seq, kind, body]))
        return fut

    def _feed(self, cmd: list[str], env: dict[str, str], started: Future[Any]) -> None:
        """The feeder thread: starts the child, then one blocking pipe write per
        message (without the lock); at the end waits for the child to exit."""
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        except OSError as exc:
            started.set_exception(exc)
            return
        started.set_result(proc)
        out = proc.stdin
        assert out is not None
        try:
            while True:
                frame = self._queue.get()
                try:
                    if frame is None:
                        out.close()
                        return
                    out.write(_LEN.pack(len(frame)) + frame)
                    out.flush()
                except (OSError, ValueError) as exc:
                    self._fail(f"the checkpoint writer process stopped ({exc})")
                    return
        finally:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:  # pragma: no cover - a wedged child
                proc.kill()
                proc.wait()

    def _read(self) -> None:
        f = self._proc.stdout
        assert f is not None
        while True:
            frame = _read_frame(f)
            if frame is None:
                code = self._proc.wait()
                self._fail(f"the checkpoint writer process exited (status {code})")
                return
            seq, error, result = msgspec.msgpack.decode(frame)
            if seq == 0:  # the child has started
                self.ready.set()
                continue
            with self._lock:
                fut, _paths = self._futures.pop(seq, (None, []))
            if fut is None:
                continue
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(CheckpointError(error))

    def _fail(self, why: str) -> None:
        with self._lock:
            if self._dead is None:
                self._dead = why
            pending = list(self._futures.values())
            self._futures.clear()
        for fut, paths in pending:
            if not fut.done():
                where = f"{paths[0]} and {len(paths) - 1} more" if len(paths) > 1 else (paths[0] if paths else "no file")
                fut.set_exception(CheckpointError(f"{where}: not written: {why}"))

    @property
    def alive(self) -> bool:
        return self._dead is None and self._proc.poll() is None

    def close(self) -> None:
        """Let the child finish what it was sent, then stop it."""
        self._queue.put(None)
        self._feeder.join(timeout=60)
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # pragma: no cover - a wedged child
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=10)

    def release(self) -> None:
        """Let the child finish what it was sent, then exit -- without waiting for it
        (what the owner of an execution nobody holds any more calls: a finalizer)."""
        self._queue.put(None)

    def kill(self) -> None:
        """Stop the child now (what it did not acknowledge fails)."""
        self._queue.put(None)
        self._proc.kill()
        self._proc.wait()
        self._reader.join(timeout=10)


def commit_request(
    writer: Any, store: Any, files: list[list[Any]], schemas: Mapping[str, tuple[Any, int, HashKind]], meta: dict[str, Any], base: Optional[int]
) -> dict[str, Any]:
    """What :meth:`FileWriter.commit` sends for ``writer`` (a
    :class:`~tstate.checkpoint.store.CheckpointWriter` of ``store``, whose files were
    written elsewhere): ``files`` rows ``[operator, bin, snapshot, path, size, xxh64]``
    (``path`` ``None``: the bin is empty now), the operators' ``schemas``, ``meta``, and
    ``base``, the id of the checkpoint it builds on (``None``: none, or it carries
    nothing over)."""
    from tstate.state.payload import encode_time

    return {
        "id": writer.id, "time": encode_time(writer.time), "token": writer.token, "full": writer.full, "base": base,
        "files": files, "schemas": {name: [schema, bins, hash.value] for name, (schema, bins, hash) in schemas.items()}, "meta": meta,
        "store": {"retain": store.retain, "compact_after": store.compact_after, "gc_scan_every": store.gc_scan_every,
                  "fsync": store.fsync},
    }


def _commit(location: str, stores: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The child: commit ``request`` (see :func:`commit_request`) to the store at ``location``."""
    from tstate.checkpoint.manifest import FileRef
    from tstate.checkpoint.store import CheckpointStore
    from tstate.state.payload import decode_time

    opts = request["store"]
    store = stores.get("store")
    if store is None:
        store = stores["store"] = CheckpointStore(location, create=False, **opts)
    base = request["base"]
    if not request["full"] and base is not None:
        store.base_on(base)
    w = store.writer_for(request["id"], decode_time(request["time"]), request["token"], request["full"])
    try:
        for name, (schema, bins, hash) in request["schemas"].items():
            w.put_operator_schema(name, schema, bins, HashKind(hash))
        for name, b, snap, path, size, xxh64 in request["files"]:
            if path is None:  # an empty bin
                w.drop_bin(name, b)
            else:
                w.adopt(name, b, [FileRef(path, size, xxh64)], replace=snap)
        for k, v in request["meta"].items():
            w.put_meta(k, v)
        w.commit()
    except BaseException:
        store._forget(w)  # (its files are the parent's to delete: it abandons the checkpoint)
        raise
    return {"problems": list(store.problems)}


def _die_with_parent() -> None:
    """Linux: be killed when the parent dies (no commit after a killed run)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl here
        return


_CHILD = "import sys; from tstate.engine.checkpointing.writer import main; sys.exit(main(sys.argv[1:]))"


def main(argv: Optional[list[str]] = None) -> int:
    """The child: write the files of every batch read from stdin, commit every commit
    request, acknowledge each."""
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # pragma: no cover - the parent died before prctl
        return 0
    args = sys.argv[1:] if argv is None else argv
    try:
        return _serve(args[0], parent)
    except BrokenPipeError:  # the parent went away: nobody waits for an answer
        return 0


def _serve(location: str, parent: int) -> int:
    """The child's loop (see :func:`main`)."""
    from tstate.checkpoint.location import open_filesystem

    fs = open_filesystem(location)
    # data files: straight under their names where the filesystem can (a manifest names
    # them only once written and synced: LocalFS.write_unread)
    unread = getattr(fs, "write_unread", None)
    write: Any = unread if unread is not None else (lambda path, data: fs.write_atomic(path, data, fsync=False))
    if hasattr(os, "nice"):
        try:
            os.nice(10)  # the processing process comes first when they share a core
        except OSError:  # pragma: no cover
            pass
    stores: dict[str, Any] = {}
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    ready = _encode([0, None, None])  # started: the parent may send batches here from now on
    out.write(_LEN.pack(len(ready)) + ready)
    out.flush()
    while True:
        frame = _read_frame(inp)
        if frame is None:
            return 0
        seq, kind, body = msgspec.msgpack.decode(frame)
        error: Optional[str] = None
        result: Any = None
        if kind == _FILES:
            for path, data in body:
                try:
                    write(path, data)
                except (OSError, ValueError) as exc:
                    error = f"{path}: cannot be written ({exc})"
                    break
        else:
            if os.getppid() != parent:  # the run was killed: it may restart and write this checkpoint itself
                return 0
            try:
                result = _commit(location, stores, msgpack.unpackb(body, raw=False, strict_map_key=False))
            except (CheckpointError, OSError, ValueError, KeyError, TypeError) as exc:
                error = str(exc) if isinstance(exc, CheckpointError) else f"checkpoint not committed: {exc!r}"
        reply = _encode([seq, error, result])
        out.write(_LEN.pack(len(reply)))
        out.write(reply)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
