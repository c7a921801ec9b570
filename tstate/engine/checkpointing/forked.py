"""Snapshot processes: a checkpoint encoded and written by a forked child (``fork(2)``).

Redis' ``BGSAVE`` trick: at a checkpoint the processing thread calls :func:`os.fork`;
the child inherits the whole heap **copy-on-write**, so it sees every bin exactly as it
was at the checkpoint's time while the parent goes on changing its own copy.  The child
encodes and writes the checkpoint's data files, reports their references back over a
pipe (msgpack, never pickle) and leaves with :func:`os._exit`.  The encoding then costs
the processing path no CPU time, but the ``fork`` is not free: copying the page tables
takes 20-30 ms per GB of heap, and afterwards every page the parent writes to for the
first time faults (on the benchmark machine, a VM: ~4 us while the child lives, the page
is copied; ~1.5 us after).  A CPython process that updates state spread over its whole
heap pays that on most of its writes (reference counts are writes), so the fork mode
trades the encoding's CPU time for page faults: see ``benchmarks/checkpoints.py``.

:class:`Snapshot` is one such child, seen from the parent: :meth:`Snapshot.poll` never
blocks (call it between steps), :meth:`Snapshot.wait` does, :meth:`Snapshot.kill`
ends it.  Every child is reaped (no zombies), also when its :class:`Snapshot` is
dropped un-waited or the interpreter exits.  The outcome is one of:

- ``result``: what the job returned;
- ``error``: the job raised (re-created in the parent as the same
  :mod:`tstate.errors` class with the same message, else a
  :class:`~tstate.errors.CheckpointError` naming the original type);
- ``lost``: the child died without a complete report (killed, crashed, out of
  memory); ``lost`` says how.

**Forking a process with threads.**  Only the forking thread exists in the child, and a
lock another thread held at that instant stays locked there forever.  The job therefore
must not take locks other threads of the parent may hold (the checkpoint job uses only
the filesystem, the state codec and msgpack, never the store's or a writer's locks),
and it must not import modules the parent has not imported yet (the import machinery
has per-module locks): import them before forking.  On Linux the child also asks to be
killed if the thread that forked it dies (``PR_SET_PDEATHSIG``), so a crashed parent
leaves no child writing into its checkpoint directory.

>>> s = Snapshot.start(lambda: {"answer": 6 * 7})
>>> s.wait()
True
>>> s.result, s.error, s.lost
({'answer': 42}, None, None)
"""

from __future__ import annotations

import gc
import os
import select
import signal
import struct
import sys
import threading
import time as _time
import weakref
from typing import Any, Callable, Optional

import msgpack

from tstate import errors as _errors
from tstate.checkpoint.settings import fork_available
from tstate.errors import CheckpointError

__all__ = ["Snapshot", "fork_available"]

_HEADER = struct.Struct(">Q")  # the length of the msgpack report that follows
_PR_SET_PDEATHSIG = 1
_UNKNOWN = -(1 << 16)  # the exit status of a child someone else reaped


def _load_prctl() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None


# loaded here, in the parent: a child must not dlopen (the loader has a lock)
_prctl = _load_prctl()


def _reap(pid: int, fd: int, owner: int) -> None:
    """Kill and reap a child nobody waits for any more (finalizer; parent only)."""
    if os.getpid() != owner:  # a copy of the finalizer inside another child: not ours
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def _rebuild_error(name: str, message: str) -> BaseException:
    cls = getattr(_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, _errors.TstateError):
        return cls(message)
    return CheckpointError(f"snapshot process failed: {name}: {message}")


class Snapshot:
    """One forked child running a job (see the module docstring).  Create with
    :meth:`start`; then :meth:`poll` until it returns True, or :meth:`wait`."""

    def __init__(self, pid: int, fd: int, started: float) -> None:
        self.pid = pid
        self._fd = fd
        self._buf = bytearray()
        self._eof = False
        self._status: Optional[int] = None  # exit code (negative: killed by that signal)
        self.started = started
        #: wall seconds from the fork to the job's end, as the child measured it
        self.seconds: Optional[float] = None
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.lost: Optional[str] = None
        self._finalizer = weakref.finalize(self, _reap, pid, fd, os.getpid())

    def __repr__(self) -> str:
        state = "running" if not self.done else ("lost" if self.lost else "error" if self.error else "done")
        return f"Snapshot(pid={self.pid}, {state})"

    @classmethod
    def start(cls, job: Callable[[], Any]) -> Snapshot:
        """Fork; the child runs ``job()`` (its return value must be msgpack-encodable)
        and reports.  Returns in the parent only; raises
        :class:`~tstate.errors.CheckpointError` if the fork fails."""
        r, w = os.pipe()
        parent = os.getpid()
        main = threading.current_thread() is threading.main_thread()
        started = _time.perf_counter()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(r)
            os.close(w)
            raise CheckpointError(f"cannot fork a snapshot process: {exc}") from None
        if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
            _child(r, w, job, parent, main, started)
        os.close(w)
        os.set_blocking(r, False)
        return cls(pid, r, started)

    # -- parent side --------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._status is not None and self._eof

    def _read(self) -> None:
        while not self._eof:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            except InterruptedError:  # pragma: no cover - PEP 475 retries already
                continue
            if not chunk:
                self._eof = True
                return
            self._buf += chunk

    def _reaped(self, block: bool) -> bool:
        if self._status is None:
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (a SIGCHLD handler...)
                self._status = _UNKNOWN  # then a complete report is trusted
                return True
            if pid == 0:
                return False
            self._status = os.waitstatus_to_exitcode(status)
        return True

    def poll(self) -> bool:
        """Read what the child reported so far and reap it if it ended; True once it
        is done (then ``result``, ``error`` or ``lost`` is set).  Never blocks."""
        if self.done:
            return True
        self._read()
        if not self._eof:
            if self._status is None and self._reaped(False):
                # it ended: whatever it wrote is in the pipe now (a killed child: nothing)
                self._read()
                self._eof = True
            else:
                return False
        if not self._reaped(False):
            return False
        self._settle()
        return True

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the child is done (or ``timeout`` seconds passed: then False)."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        while not self.poll():
            left = None if deadline is None else deadline - _time.monotonic()
            if left is not None and left <= 0:
                return False
            if not self._eof:
                select.select([self._fd], [], [], 0.05 if left is None else min(left, 0.05))
            else:  # the pipe is closed, the process not quite gone yet
                _time.sleep(0.001)
        return True

    def kill(self) -> None:
        """End the child now (SIGKILL) and reap it; it counts as lost unless it had
        finished already."""
        if not self.done:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._reaped(True)
            self._read()
            self._eof = True
            self._settle()

    def _settle(self) -> None:
        self._finalizer.detach()
        try:
            os.close(self._fd)
        except OSError:  # pragma: no cover
            pass
        status = self._status
        report = None
        buf = self._buf
        if len(buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(buf)
            if len(buf) == _HEADER.size + n:
                try:
                    report = msgpack.unpackb(bytes(buf[_HEADER.size :]), strict_map_key=False)
                except (ValueError, msgpack.UnpackException):
                    report = None
        self._buf = bytearray()
        if status not in (0, _UNKNOWN) or type(report) is not dict:
            if status is not None and status < 0:
                how = f"killed by signal {-status} ({signal.Signals(-status).name})"
            elif status:
                how = f"exited with status {status}"
            else:
                how = "ended without a complete report"
            self.lost = f"snapshot process {self.pid} {how}"
            return
        self.seconds = report.get("seconds")
        if "error" in report:
            name, message = report["error"]
            self.error = _rebuild_error(name, message)
        else:
            self.result = report.get("result")


def _child(r: int, w: int, job: Callable[[], Any], parent: int, main: bool, started: float) -> None:  # pragma: no cover
    """The child's whole life: run ``job``, report, ``os._exit`` -- it never returns
    into the parent's code, whatever happens."""
    code = 70
    try:
        os.close(r)
        if _prctl is not None and main:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the request took effect
                os._exit(code)
        gc.disable()  # a collection would touch (and so copy) every page of the heap
        try:
            report: dict[str, Any] = {"result": job()}
        except BaseException as exc:
            report = {"error": [type(exc).__name__, str(exc)]}
        report["seconds"] = _time.perf_counter() - started
        try:
            body = msgpack.packb(report, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            body = msgpack.packb({"error": ["CheckpointError", f"unencodable snapshot report: {exc}"]})
        data = memoryview(_HEADER.pack(len(body)) + body)
        while data:
            data = data[os.write(w, data) :]
        code = 0
    finally:
        os._exit(code)
