"""Checkpoints in an object store: the :class:`~tstate.checkpoint.fs.FileSystem` of
``s3://``, ``gs://``, ``abfs://`` and ``hdfs://`` locations, through `fsspec`_.

An object store has no rename and no directories, so the operations the checkpoint store
needs map onto it like this:

=====================  ====================================================================
``write_atomic(p, b)`` one PUT: an object appears whole or not at all
``write_new(p, b)``    one *conditional* PUT (S3 ``If-None-Match: *``): the manifest commit.
                       It fails (``FileExistsError``) if the name exists already -- another
                       writer committed that checkpoint -- unless the object there holds
                       exactly these bytes (our own PUT, retried after a lost answer)
                       (on HDFS: a temporary file renamed, which fails if the name exists)
``read_bytes(p)``      one GET
``list(d)``            a prefix listing of ``d/`` (delimited: the names directly in it)
``delete(p)``          one DELETE
``fsync_dir``,         nothing to do: a PUT is durable when it returns, and "directories"
``remove_dir``,        are only prefixes of the names in them
``sync_all``
``check_writable()``   PUTs and deletes a probe object below the root
=====================  ====================================================================

Recovery never trusts a listing alone: :meth:`~tstate.checkpoint.store.CheckpointStore.latest`
reads each manifest by name and verifies every data file's size and checksum, so a
listing that lags behind a write can hide a checkpoint, never make a torn one look good.

**Transient errors** (the store unreachable, a timeout, a 5xx or throttling answer) are
retried with exponential backoff (0.1 s doubling to 5 s) for up to ``retry_seconds``
(default 60; the environment variable ``TSTATE_STORE_RETRY_SECONDS`` changes the
default, e.g. for executors), then raised as ``ConnectionError`` naming the object's URL:
the checkpoint store turns it into a :class:`~tstate.errors.CheckpointError`, and a batch
whose manifest PUT did not succeed is not committed (its data files are orphans that
garbage collection removes later).  Missing objects (``FileNotFoundError``), denied
access (``PermissionError``) and an existing manifest (``FileExistsError``) are not
retried.

**Credentials and endpoints** come from the filesystem library's usual sources: for S3,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION``
(or ``AWS_DEFAULT_REGION``), ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, a
local server), ``~/.aws/*``, instance roles.  ``s3://`` needs ``s3fs`` (the
``objectstore`` extra), ``gs://`` ``gcsfs``, ``abfs://`` ``adlfs``, ``hdfs://`` pyarrow's
libhdfs (a Hadoop client and a JVM).

Every path is relative to the root (``bucket/prefix``), checked like
:class:`~tstate.checkpoint.fs.LocalFS` does (no ``..``, no leading ``/``), so nothing
outside the root is ever read, written or deleted.

>>> fs = ObjectFS("s3://my-bucket/ckpt/run-1")          # doctest: +SKIP
>>> fs.write_atomic("manifests/x", b"hello")             # doctest: +SKIP
>>> fs.read_bytes("manifests/x"), fs.list("manifests")   # doctest: +SKIP
(b'hello', ['x'])

.. _fsspec: https://filesystem-spec.readthedocs.io/
"""

from __future__ import annotations

import builtins
import os
import secrets
import time
from typing import Any, Callable, Optional, TypeVar

from tstate.checkpoint.fs import TMP_MARK

__all__ = ["ObjectFS", "SCHEMES", "default_retry_seconds"]

#: URL schemes served by :class:`ObjectFS` (and the fsspec package each needs)
SCHEMES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "az": "adlfs",
    "hdfs": "pyarrow",
}

_T = TypeVar("_T")

# Errors that are the answer, not a failure to get one: never retried.
_DEFINITE = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)
# Names of exception classes (in the MRO) of the HTTP stacks under fsspec that mean
# "no answer": botocore's connection errors and timeouts, aiohttp's client errors.
_TRANSIENT_NAMES = {
    "HTTPClientError",  # botocore: ConnectionClosedError, ReadTimeoutError, ...
    "ConnectionError",  # botocore's own (not the builtin): EndpointConnectionError, ConnectTimeoutError
    "ClientConnectionError",  # aiohttp
    "ServerTimeoutError",
    "ClientPayloadError",
}


def default_retry_seconds() -> float:
    """How long transient errors are retried: ``TSTATE_STORE_RETRY_SECONDS`` or 60."""
    raw = os.environ.get("TSTATE_STORE_RETRY_SECONDS", "")
    try:
        value = float(raw) if raw else 60.0
    except ValueError:
        value = 60.0
    return max(0.0, value)


def _transient(exc: BaseException) -> bool:
    """Whether ``exc`` means "no answer" (retry) rather than an answer.

    >>> _transient(ConnectionRefusedError()), _transient(TimeoutError()), _transient(OSError("503 SlowDown"))
    (True, True, True)
    >>> _transient(FileNotFoundError("x")), _transient(PermissionError("denied")), _transient(ValueError())
    (False, False, False)
    """
    if isinstance(exc, _DEFINITE):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if type(exc) is OSError:  # s3fs / gcsfs: a 5xx, throttling, an unparsed failure
        return True
    return any(c.__name__ in _TRANSIENT_NAMES for c in type(exc).__mro__)


def _storage_options(protocol: str) -> dict[str, Any]:
    """Options for the fsspec filesystem: listings never cached (the store lists to find
    what other processes wrote), its own retries kept short (:class:`ObjectFS` retries
    with a time budget instead)."""
    opts: dict[str, Any] = {"use_listings_cache": False, "skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        opts.update(
            max_concurrency=1,  # a GET is one request (else s3fs HEADs first for a parallel download)
            config_kwargs={"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 1}},
        )
    return opts


class ObjectFS:
    """:class:`~tstate.checkpoint.fs.FileSystem` below ``url`` in an object store or HDFS
    (see the module docstring).  ``retry_seconds``: how long transient errors are retried
    (default :func:`default_retry_seconds`)."""

    def __init__(self, url: str, *, retry_seconds: Optional[float] = None) -> None:
        self.url = url.rstrip("/")
        protocol = self.url.split("://", 1)[0].lower()
        need = SCHEMES.get(protocol, "an fsspec implementation")
        try:
            import fsspec.core

            fs, root = fsspec.core.url_to_fs(self.url, **_storage_options(protocol))
        except ImportError as exc:
            raise ImportError(f"{protocol}:// needs the {need} package ({exc})") from None
        if protocol in ("s3", "s3a") and hasattr(fs, "retries"):
            fs.retries = 1  # s3fs's own retries: ours (with a time budget) take over
        self.fs = fs
        self.root = str(root).rstrip("/")
        self.retry_seconds = default_retry_seconds() if retry_seconds is None else float(retry_seconds)
        # HDFS has an atomic rename (and a PUT-like write that is not atomic): use it
        self._rename = protocol == "hdfs"
        #: transient errors retried so far (all operations)
        self.retries = 0

    def __repr__(self) -> str:
        return f"ObjectFS({self.url!r})"

    # -- paths ---------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/") or "//" in path:
            raise ValueError(f"not a relative path inside the store: {path!r}")
        return f"{self.root}/{path}" if path else self.root

    def describe(self, path: str) -> str:
        return f"{self.url}/{path}" if path else self.url

    # -- retrying ------------------------------------------------------------------
    def _call(self, what: str, path: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, retrying transient errors with backoff for ``retry_seconds``; then a
        ``ConnectionError`` naming the object and how long it was tried."""
        start = time.monotonic()
        delay = 0.1
        attempts = 0
        while True:
            attempts += 1
            try:
                return fn()
            except Exception as exc:
                if not _transient(exc):
                    raise
                waited = time.monotonic() - start
                if waited + delay > self.retry_seconds:
                    raise ConnectionError(
                        f"{self.describe(path)}: {what} failed {attempts} times over {waited:.1f} s, "
                        f"the object store is unreachable or failing ({type(exc).__name__}: {exc})"
                    ) from exc
                self.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- the FileSystem protocol -----------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        full = self._abs(path)
        return bytes(self._call("GET", path, lambda: self.fs.cat_file(full)))

    def write_atomic(self, path: str, data: bytes, *, fsync: bool = True) -> None:
        """One PUT (atomic on an object store; durable when it returns: ``fsync`` is moot).
        On HDFS: write a temporary sibling, then rename it over ``path``."""
        full = self._abs(path)
        data = bytes(data)
        if not self._rename:
            self._call("PUT", path, lambda: self.fs.pipe_file(full, data))
            return

        def write_rename() -> None:
            tmp = f"{full}{TMP_MARK}{secrets.token_hex(4)}"
            self.fs.pipe_file(tmp, data)
            if self.fs.exists(full):
                self.fs.rm_file(full)
            self.fs.mv(tmp, full)

        self._call("write", path, write_rename)

    def write_new(self, path: str, data: bytes, *, fsync: bool = True) -> None:
        """One PUT that only creates: ``FileExistsError`` if ``path`` exists with other bytes.

        Conditional (``If-None-Match: *``) where the store and its fsspec
        implementation support it (S3 and S3-compatible stores via s3fs); elsewhere the
        existence is checked first, which leaves a window between check and PUT (one
        writing process per store keeps it closed)."""
        full = self._abs(path)
        data = bytes(data)

        def put() -> None:
            if self._rename:  # HDFS: the rename refuses an existing name
                tmp = f"{full}{TMP_MARK}{secrets.token_hex(4)}"
                self.fs.pipe_file(tmp, data)
                try:
                    self.fs.mv(tmp, full)
                except OSError:
                    self.fs.rm_file(tmp)
                    if self.fs.exists(full):
                        raise FileExistsError(full) from None
                    raise
                return
            try:
                self.fs.pipe_file(full, data, mode="create")
            except (TypeError, NotImplementedError):  # no conditional create here
                if self.fs.exists(full):
                    raise FileExistsError(full) from None
                self.fs.pipe_file(full, data)

        try:
            self._call("conditional PUT", path, put)
        except FileExistsError:
            # a retried PUT whose first answer was lost finds its own object: that is
            # success; anything else there is another writer's
            try:
                if self.read_bytes(path) == data:
                    return
            except FileNotFoundError:
                pass
            raise FileExistsError(f"{self.describe(path)}: exists already (written by another writer)") from None

    def _entries(self, directory: str) -> builtins.list[dict[str, Any]]:
        full = self._abs(directory)
        try:
            found = self._call("LIST", directory, lambda: self.fs.ls(full, detail=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in found:
            name = str(e["name"]).rstrip("/")
            if name == full or not name.startswith(full + "/" if full else ""):
                continue  # the prefix's own marker object, or not below it
            out.append({"name": name.rsplit("/", 1)[-1], "type": e.get("type")})
        return out

    def list(self, directory: str) -> builtins.list[str]:
        return sorted({e["name"] for e in self._entries(directory) if e["type"] == "file" and e["name"]})

    def list_dirs(self, directory: str) -> builtins.list[str]:
        return sorted({e["name"] for e in self._entries(directory) if e["type"] == "directory" and e["name"]})

    def delete(self, path: str) -> None:
        full = self._abs(path)

        def rm() -> None:
            try:
                self.fs.rm_file(full)
            except FileNotFoundError:
                pass

        self._call("DELETE", path, rm)

    def remove_dir(self, directory: str) -> None:
        """Nothing: a prefix exists exactly while names below it do."""

    def exists(self, path: str) -> bool:
        full = self._abs(path)
        return bool(self._call("HEAD", path, lambda: self.fs.isfile(full)))

    def size(self, path: str) -> int:
        full = self._abs(path)
        return int(self._call("HEAD", path, lambda: self.fs.size(full)))

    def fsync_dir(self, directory: str) -> None:
        """Nothing: a PUT or DELETE is durable when it returns."""

    def sync_all(self) -> None:
        """Nothing: every PUT was durable when it returned."""

    def check_writable(self) -> None:
        """PUT and delete a probe object below the root (``PermissionError`` when the
        credentials may not write there, ``FileNotFoundError`` without the bucket,
        ``ConnectionError`` when the store stays unreachable)."""
        probe = f".probe{TMP_MARK}{secrets.token_hex(4)}"
        self.write_atomic(probe, b"tstate")
        self.delete(probe)
