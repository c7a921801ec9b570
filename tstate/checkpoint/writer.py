"""A helper process that writes checkpoint data files: I/O that never waits for, nor
holds, the processing process's interpreter lock.

A checkpoint writes one data file per changed bin -- a thousand small files is common.
A writer *thread* needs the interpreter lock around every system call it makes (open,
write, close, rename: several per file), and while the processing thread runs Python
code it gets the lock only every switch interval (5 ms): a thousand files then take
seconds, and each hand-over preempts the processing thread.  :class:`FileWriter`
instead starts ``python -m tstate.checkpoint.writer LOCATION`` once (a small process: it
imports only the filesystem layer) and sends it *batches* of ``(path, bytes)``: one
pipe write per batch, made by a feeder thread (the lock is released during the
write).  The child writes each file atomically (temporary name, rename; no fsync: the
commit syncs once) and acknowledges the batch; :meth:`FileWriter.write` returns a
future per batch.  A child that dies, or cannot write, fails the futures of the
batches not acknowledged with a :class:`~tstate.errors.CheckpointError` naming the
file: the checkpoint is then abandoned like any failed write.

Frames are a 4-byte big-endian length and msgspec MessagePack: ``[seq, [[path, bytes],
...]]`` one way, ``[seq, None | error]`` the other.  No pickle.

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
from typing import IO, Optional, Sequence

import msgspec

from tstate.errors import CheckpointError

__all__ = ["FileWriter", "main"]

_LEN = struct.Struct(">I")
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
        # the directory holding the tstate package (this file is tstate/checkpoint/writer.py)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.location = location
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tstate.checkpoint.writer", location],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self._lock = threading.Lock()
        self._futures: dict[int, tuple[Future[None], list[str]]] = {}
        self._seq = 0
        #: set once the child has started (until then a caller may write another way:
        #: starting an interpreter takes a few hundred milliseconds)
        self.ready = threading.Event()
        self._dead: Optional[str] = None
        self._out = self._proc.stdin
        self._queue: queue.SimpleQueue[Optional[bytes]] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="tstate-checkpoint-writer-acks", daemon=True)
        self._reader.start()
        self._feeder = threading.Thread(target=self._feed, name="tstate-checkpoint-writer-feed", daemon=True)
        self._feeder.start()

    def write(self, files: Sequence[tuple[str, bytes]]) -> Future[None]:
        """Write ``files`` (paths relative to the location); the future completes once
        all of them are written.  Returns at once: the batch is handed to the child by
        a feeder thread (queued until it has started: see :attr:`ready`)."""
        fut: Future[None] = Future()
        with self._lock:
            if self._dead is not None:
                fut.set_exception(CheckpointError(self._dead))
                return fut
            self._seq += 1
            seq = self._seq
            self._futures[seq] = (fut, [p for p, _ in files])
        self._queue.put(_encode([seq, [[p, d] for p, d in files]]))
        return fut

    def _feed(self) -> None:
        """The feeder thread: one blocking pipe write per batch (without the lock)."""
        out = self._out
        assert out is not None
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

    def _read(self) -> None:
        f = self._proc.stdout
        assert f is not None
        while True:
            frame = _read_frame(f)
            if frame is None:
                code = self._proc.wait()
                self._fail(f"the checkpoint writer process exited (status {code})")
                return
            seq, error = msgspec.msgpack.decode(frame)
            if seq == 0:
                self.ready.set()
                continue
            with self._lock:
                fut, _paths = self._futures.pop(seq, (None, []))
            if fut is None:
                continue
            if error is None:
                fut.set_result(None)
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

    def kill(self) -> None:
        """Stop the child now (what it did not acknowledge fails)."""
        self._proc.kill()
        self._proc.wait()
        self._reader.join(timeout=10)


def main(argv: Optional[list[str]] = None) -> int:
    """The child: write the files of every batch read from stdin, acknowledge each."""
    from tstate.checkpoint.location import open_filesystem

    args = sys.argv[1:] if argv is None else argv
    fs = open_filesystem(args[0])
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    ready = _encode([0, None])  # started: the parent may send batches here from now on
    out.write(_LEN.pack(len(ready)) + ready)
    out.flush()
    while True:
        frame = _read_frame(inp)
        if frame is None:
            return 0
        seq, files = msgspec.msgpack.decode(frame)
        error = None
        for path, data in files:
            try:
                fs.write_atomic(path, data, fsync=False)
            except (OSError, ValueError) as exc:
                error = f"{path}: cannot be written ({exc})"
                break
        reply = _encode([seq, error])
        out.write(_LEN.pack(len(reply)))
        out.write(reply)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
