"""Shared helpers for the checkpoint tests: a tiny state type and bin bytes."""

from __future__ import annotations

import os
from typing import Any, Iterable

from tstate.checkpoint.delta import encode_delta
from tstate.checkpoint.location import is_url, open_filesystem
from tstate.checkpoint.store import CheckpointStore
from tstate.state.bin import Bin
from tstate.state.payload import encode_bin
from tstate.types.codec import StateCodec
from tstate.types.schema import analyse

STATE = list[int]
CODEC = StateCodec(STATE)
FP = CODEC.fingerprint
SCHEMA = analyse(STATE).to_builtins()


def snap(index: int, states: dict[Any, list[int]], timers: dict[Any, Iterable[Any]] | None = None) -> bytes:
    """Snapshot bytes of a bin holding ``states`` (and ``timers``)."""
    b = Bin(index)
    b.states = dict(states)
    b.timers = {t: {k: None for k in ks} for t, ks in (timers or {}).items()}
    return encode_bin(b, CODEC)


def delta(index: int, upserts: dict[Any, list[int]], deletes: Iterable[Any] = (), timers: Any = ()) -> bytes:
    return encode_delta(index, [(k, CODEC.to_builtins(v)) for k, v in upserts.items()], list(deletes), timers, FP)


def files_on_disk(root: str | os.PathLike[str]) -> set[str]:
    """Every file below ``root/data`` as a store-relative path (``root``: a local
    directory, or an object-store URL, walked through the store's FileSystem)."""
    if is_url(root):
        fs = open_filesystem(root)
        return {
            f"data/{op}/{b}/{n}"
            for op in fs.list_dirs("data")
            for b in fs.list_dirs(f"data/{op}")
            for n in fs.list(f"data/{op}/{b}")
        }
    out = set()
    base = os.path.join(os.fspath(root), "data")
    for d, _, names in os.walk(base):
        for n in names:
            out.add(os.path.relpath(os.path.join(d, n), os.fspath(root)).replace(os.sep, "/"))
    return out


def new_store(path: Any, **kw: Any) -> CheckpointStore:
    kw.setdefault("fsync", False)
    return CheckpointStore(path, **kw)


def exists(root: Any, path: str) -> bool:
    """Whether the store at ``root`` (directory or URL) holds the file ``path``."""
    return open_filesystem(os.fspath(root)).exists(path)


def listing(root: Any, directory: str) -> list[str]:
    """The names of the files directly in ``directory`` of the store at ``root``."""
    return open_filesystem(os.fspath(root)).list(directory)


def write_raw(root: Any, path: str, data: bytes) -> None:
    """Put a file into the store at ``root`` behind the store's back (strays, damage)."""
    open_filesystem(os.fspath(root)).write_atomic(path, data)


def dirs(root: Any, directory: str) -> list[str]:
    """The sub-directories (prefixes) directly in ``directory`` of the store at ``root``."""
    return open_filesystem(os.fspath(root)).list_dirs(directory)


def damaged(data: bytes, how: str) -> bytes:
    """``data`` with one bit flipped in the middle (``"flip"``) or its last 3 bytes cut
    (``"truncate"``)."""
    out = bytearray(data)
    if how == "flip":
        out[len(out) // 2] ^= 0x40
        return bytes(out)
    assert how == "truncate", how
    return bytes(out[: len(out) - 3])


def damage(path: str, how: str) -> None:
    """Flip, truncate or delete (``"delete"``) the local file ``path``."""
    if how == "delete":
        os.unlink(path)
        return
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damaged(data, how))
