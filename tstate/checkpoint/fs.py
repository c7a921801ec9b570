"""The tiny filesystem a :class:`~tstate.checkpoint.store.CheckpointStore` writes through.

Every byte of a checkpoint goes through the :class:`FileSystem` protocol, whose paths
are **relative, ``/``-separated** strings (``"manifests/ckpt-000042.manifest"``,
``"data/track-1f2e3d4c/7/000042-a1b2c3d4-snap.bin"``) below one root.  The store needs
only these operations:

=====================  ====================================================================
``read_bytes(p)``      the whole file (``FileNotFoundError`` when missing)
``write_atomic(p, b)`` write ``b`` to a temporary sibling, fsync it, rename it over ``p``:
                       a reader sees the old file or the new one, never a part
``list(d)``            the names of the files directly in directory ``d`` ([] if missing)
``list_dirs(d)``       the names of the sub-directories of ``d`` ([] if missing)
``delete(p)``          remove a file (no error if it is already gone); never *through* a
                       symlink: ``OSError`` if a directory on the way resolves elsewhere
``remove_dir(d)``      remove a directory if it is empty (no error otherwise; never
                       through or at a symlink)
``exists(p)``          whether a file exists
``size(p)``            a file's size in bytes
``fsync_dir(d)``       make the renames / deletions in ``d`` durable
``check_writable()``   raise ``OSError`` unless files can be created below the root
=====================  ====================================================================

A backend whose directories can be symlinks also offers ``linked_dirs(tops)``: the
store's own directories that do not resolve to themselves below the root (the store
refuses to open for writing with one: it could write there but never delete).

A backend may also offer ``write_new(p, b)``: like ``write_atomic`` but failing with
``FileExistsError`` if ``p`` exists (a conditional PUT); the store then commits manifests
with it, so two writers can never both commit one checkpoint id.

:class:`LocalFS` implements it over a local directory;
:class:`~tstate.checkpoint.objectfs.ObjectFS` over an object store or HDFS (there
``write_atomic`` is a single PUT, which is atomic already, ``fsync_dir`` and
``remove_dir`` do nothing, ``list`` is a prefix listing);
:func:`tstate.checkpoint.location.open_filesystem` picks one for a path or URL.  Another
backend can be passed as ``CheckpointStore(..., fs=...)``.  Nothing else in
:mod:`tstate.checkpoint` touches ``os`` or ``open``.

>>> import tempfile
>>> fs = LocalFS(tempfile.mkdtemp())
>>> fs.write_atomic("a/b.bin", b"hello")
>>> fs.read_bytes("a/b.bin"), fs.list("a"), fs.list_dirs(""), fs.size("a/b.bin")
(b'hello', ['b.bin'], ['a'], 5)
>>> fs.delete("a/b.bin"); fs.delete("a/b.bin"); fs.exists("a/b.bin")
False
"""

from __future__ import annotations

import builtins
import errno
import os
import secrets
from typing import Protocol, runtime_checkable

__all__ = ["FileSystem", "LocalFS", "TMP_MARK"]

#: What a temporary file's name contains: ``<final name>.tmp-<random hex>``.
TMP_MARK = ".tmp-"


@runtime_checkable
class FileSystem(Protocol):
    """What the checkpoint store needs from a storage backend (see the module docs).

    All paths are relative to the backend's root and use ``/``; ``""`` is the root."""

    def read_bytes(self, path: str) -> bytes: ...

    def write_atomic(self, path: str, data: bytes, *, fsync: bool = True) -> None: ...

    def list(self, directory: str) -> builtins.list[str]: ...

    def list_dirs(self, directory: str) -> builtins.list[str]: ...

    def delete(self, path: str) -> None: ...

    def remove_dir(self, directory: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def fsync_dir(self, directory: str) -> None: ...

    def sync_all(self) -> None:
        """Make everything written so far durable (data, renames, directories)."""
        ...

    def check_writable(self) -> None: ...

    def describe(self, path: str) -> str:
        """A human-readable location of ``path`` for error messages."""
        ...


class LocalFS:
    """:class:`FileSystem` over a local directory ``root`` (which must exist).

    ``write_atomic`` writes ``<path>.tmp-<random>`` in the target directory (creating
    missing parents), fsyncs it (unless ``fsync=False``), then ``os.replace``\\ s it
    onto ``path``.  It does **not** fsync the directory: callers batch that with
    :meth:`fsync_dir` (the store does it once per directory before committing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self._real_root: str | None = None

    def _abs(self, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"not a relative path inside the store: {path!r}")
        return os.path.join(self.root, *path.split("/")) if path else self.root

    def _no_symlink(self, directory: str) -> None:
        """Refuse (``PermissionError`` naming the path) unless ``directory`` (relative)
        resolves to itself below the root: no component of it is a symlink, so what is
        deleted in it is inside the store.  (The root itself may be a symlink: it is
        resolved once, as the user named it.)"""
        if self._real_root is None:
            self._real_root = os.path.realpath(self.root)
        parts = [p for p in directory.split("/") if p]
        expected = os.path.join(self._real_root, *parts) if parts else self._real_root
        real = os.path.realpath(os.path.join(self.root, *parts) if parts else self.root)
        if real != expected:
            raise PermissionError(
                errno.EPERM,
                f"{self._abs(directory) or '.'} resolves to {real}, outside the store's own directories "
                "(a symlink: nothing is deleted through one)",
            )

    def describe(self, path: str) -> str:
        return self._abs(path)

    def linked_dirs(self, tops: dict[str, int]) -> builtins.list[tuple[str, str]]:
        """The directories among ``tops`` (a top-level name -> how many levels of
        sub-directories below it count too: ``{"data": 2}`` is ``data/``, each
        ``data/<op>/`` and each ``data/<op>/<bin>/``) that are symlinks, or lie below
        one, as ``(relative path, the real path it resolves to)``; missing ones are
        skipped.  A symlinked directory is reported, not descended into.  (The root
        itself may be a symlink: it is resolved once, as the user named it.)"""
        self._real_root = os.path.realpath(self.root)
        found: builtins.list[tuple[str, str]] = []

        def visit(rel: str, depth: int) -> None:
            full = self._abs(rel)
            if os.path.islink(full):
                found.append((rel, os.path.realpath(full)))
                return
            if depth == 0 or not os.path.isdir(full):
                return
            try:
                with os.scandir(full) as it:
                    subs = sorted(e.name for e in it if e.is_symlink() or e.is_dir(follow_symlinks=False))
            except OSError:
                return
            for name in subs:
                visit(f"{rel}/{name}", depth - 1)

        for top, depth in tops.items():
            visit(top, depth)
        return found

    def read_bytes(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as f:
            return f.read()

    def write_atomic(self, path: str, data: bytes, *, fsync: bool = True) -> None:
        final = self._abs(path)
        tmp = f"{final}{TMP_MARK}{secrets.token_hex(4)}"
        fd = _create(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def write_unread(self, path: str, data: bytes) -> None:
        """Write a new file straight under its name (no temporary, no rename, no fsync):
        for a data file nothing reads before a manifest names it -- the commit syncs
        before it writes that manifest, and a file a crash tore is named by none (its
        size and checksum would not match anyway) and is collected as garbage.  Half
        the system calls of :meth:`write_atomic`.  ``FileExistsError`` if it exists."""
        final = self._abs(path)
        fd = _create(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            try:
                os.unlink(final)
            except OSError:
                pass
            raise
        os.close(fd)

    def list(self, directory: str) -> builtins.list[str]:
        try:
            with os.scandir(self._abs(directory)) as it:
                return sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_dirs(self, directory: str) -> builtins.list[str]:
        try:
            with os.scandir(self._abs(directory)) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, path: str) -> None:
        full = self._abs(path)
        self._no_symlink(path.rsplit("/", 1)[0] if "/" in path else "")
        try:
            os.unlink(full)  # (a symlink itself is unlinked, never what it points to)
        except FileNotFoundError:
            pass

    def remove_dir(self, directory: str) -> None:
        full = self._abs(directory)
        try:
            self._no_symlink(directory)
        except PermissionError:
            return  # a symlink (or a way through one): not ours to remove
        try:
            os.rmdir(full)
        except OSError:  # not empty, or gone already
            pass

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def size(self, path: str) -> int:
        return os.stat(self._abs(path)).st_size

    def fsync_dir(self, directory: str) -> None:
        try:
            fd = os.open(self._abs(directory), os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        except OSError:  # some filesystems refuse fsync on a directory: nothing to do there
            pass
        finally:
            os.close(fd)

    def sync_all(self) -> None:
        """One ``sync(2)``: every file written, renamed or created is on disk after it."""
        os.sync()

    def check_writable(self) -> None:
        """Create, fsync and delete a probe file in the root (``OSError`` if impossible).

        A probe is more reliable than ``os.access``, which says yes to root on a
        read-only mount."""
        probe = f".probe{TMP_MARK}{secrets.token_hex(4)}"
        self.write_atomic(probe, b"tstate", fsync=False)
        self.delete(probe)

    def __repr__(self) -> str:
        return f"LocalFS({self.root!r})"


def _create(full: str, flags: int) -> int:
    """Open the new file ``full`` (``flags`` hold ``O_CREAT``), creating its directories
    as needed.  A concurrent garbage collection may remove an (empty) directory on its
    path -- the parent before the open, or one above it while ``makedirs`` creates the
    ones below -- so the directories are created again and the open retried."""
    for attempt in range(5):
        try:
            return os.open(full, flags, 0o644)
        except FileNotFoundError:  # a new directory (or one garbage collection removed)
            if attempt == 4:
                raise
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
        except FileNotFoundError:  # (a directory above removed meanwhile: again)
            pass
    raise AssertionError("unreachable")  # pragma: no cover
