"""Where checkpoints live: a local path or an object-store URL, and the
:class:`~tstate.checkpoint.fs.FileSystem` that reaches it.

Everything that opens a checkpoint store by name goes through here: the embedded engine's
``Checkpoints(location)``, the Spark backend's ``Backend(spark, checkpoint=location)`` on
the driver and, with the same string, the Spark executors.  A *location* is either

- a local path (``/data/ckpt``, ``ckpt``, ``file:///data/ckpt``): :class:`LocalFS`; made
  absolute by :func:`resolve`, so every process reads the same directory;
- a URL ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``abfs://container@account.dfs.core.windows.net/prefix``
  or ``hdfs://namenode:8020/path``: :class:`~tstate.checkpoint.objectfs.ObjectFS`
  (credentials and endpoints from the usual environment variables, see there).

>>> resolve("s3://bucket/ckpt/"), is_url("s3://bucket/ckpt"), is_url("/tmp/ckpt")
('s3://bucket/ckpt', True, False)
>>> resolve("file:///tmp/ckpt")
'/tmp/ckpt'
>>> import tempfile
>>> open_filesystem(tempfile.mkdtemp())   # doctest: +ELLIPSIS
LocalFS('...')
"""

from __future__ import annotations

import os
import re
from typing import Optional

from tstate.checkpoint.fs import FileSystem, LocalFS
from tstate.errors import CheckpointError

__all__ = ["resolve", "is_url", "open_filesystem", "spark_uri"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a remote store (a URL other than ``file://``)."""
    m = _URL.match(os.fspath(location))
    return m is not None and m.group(1).lower() != "file"


def resolve(location: str | os.PathLike[str]) -> str:
    """The canonical form of a location: a URL without trailing ``/``, or an absolute
    local path (``file://`` stripped)."""
    text = os.fspath(location)
    if is_url(text):
        from tstate.checkpoint.objectfs import SCHEMES

        scheme = text.split("://", 1)[0].lower()
        rest = text.split("://", 1)[1].strip("/")
        if scheme not in SCHEMES:
            raise CheckpointError(
                f"checkpoint location {text}: unsupported scheme {scheme}:// "
                f"(use a local path or one of {', '.join(s + '://' for s in sorted(SCHEMES))})"
            )
        return f"{scheme}://{rest}"
    if text.lower().startswith("file://"):
        text = text[len("file://") :]
    return os.path.abspath(text)


def open_filesystem(location: str | os.PathLike[str], *, retry_seconds: Optional[float] = None) -> FileSystem:
    """The :class:`FileSystem` of ``location`` (see the module docstring).  A local
    directory must exist (:class:`~tstate.checkpoint.store.CheckpointStore` creates it);
    a missing client library raises :class:`~tstate.errors.CheckpointError` naming the
    package to install."""
    where = resolve(location)
    if not is_url(where):
        return LocalFS(where)
    from tstate.checkpoint.objectfs import ObjectFS

    try:
        return ObjectFS(where, retry_seconds=retry_seconds)
    except ImportError as exc:
        raise CheckpointError(f"checkpoint location {where}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint location {where}: cannot be opened ({exc})") from None


def spark_uri(location: str) -> str:
    """The location as Spark's Hadoop filesystems name it (``s3://`` is ``s3a://`` there;
    needs the hadoop-aws jars), for the streaming query's own checkpoint."""
    where = resolve(location)
    if where.startswith("s3://"):
        return "s3a://" + where[len("s3://") :]
    return where
