"""Executor side of the Spark state store: bins cached across micro-batches, validated
against the committed manifest.

Bins live durably in the checkpoint store (:mod:`tstate.checkpoint.store`: the same
snapshot and delta files as the embedded engine's checkpoints).  A Spark task *takes*
the bins it needs: from this process's cache if the cached copy is exactly the version
the committed manifest names (the path of the last file of the bin's chain), else from
the store (reading and checking the chain) — or, if the cached copy is an older version
still in the chain (another process ran the bin's partition meanwhile: Spark does not
keep partitions on the same Python worker), by applying just the files written since.
A task that fails leaves nothing behind:
taking removes the bin from the cache, and only a task that finished *gives* it back,
tagged with the file it wrote — which is the committed version only if the driver then
commits the batch; otherwise the next task sees a different version and re-reads the
store.  So a task retry, a lost executor or a restarted driver never sees a half-applied
bin.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.checkpoint.store import CheckpointStore
from tstate.state.bin import Bin

__all__ = ["take", "give", "read", "manifest", "store", "clear"]

_lock = threading.Lock()
_stores: dict[str, CheckpointStore] = {}
_manifests: dict[tuple[str, int], Manifest] = {}
#: (directory, operator, bin) -> (version, bin)
_bins: dict[tuple[str, str, int], tuple[str, Bin]] = {}


def store(directory: str) -> CheckpointStore:
    """A read-only store on ``directory`` -- a path or an object-store URL, as the driver
    resolved it (one per process)."""
    with _lock:
        s = _stores.get(directory)
        if s is None:
            s = _stores[directory] = CheckpointStore(directory, readonly=True)
        return s


def manifest(directory: str, checkpoint_id: Optional[int]) -> Optional[Manifest]:
    """The committed manifest ``checkpoint_id`` (cached; manifests never change)."""
    if checkpoint_id is None:
        return None
    key = (directory, checkpoint_id)
    with _lock:
        m = _manifests.get(key)
    if m is None:
        m = store(directory).manifest(checkpoint_id)
        with _lock:
            if len(_manifests) > 16:
                _manifests.clear()
            _manifests[key] = m
    return m


def chain(m: Optional[Manifest], operator: str, bin: int) -> tuple[FileRef, ...]:
    if m is None or operator not in m.operators:
        return ()
    return m.chain(operator, bin)


def take(
    directory: str, m: Optional[Manifest], operator: str, bin: int, codec: Any, fingerprint: str
) -> tuple[Bin, str]:
    """The bin as of manifest ``m``, and how it was found: ``"hit"`` (cached at that
    version), ``"catch-up"`` (cached at an older version still in the bin's chain: only
    the files written since are read and applied) or ``"miss"`` (read from the store)."""
    from tstate.checkpoint.delta import catch_up

    refs = chain(m, operator, bin)
    version = refs[-1].path if refs else ""
    with _lock:
        cached = _bins.pop((directory, operator, bin), None)
    if cached is not None:
        if cached[0] == version:
            return cached[1], "hit"
        paths = [r.path for r in refs]
        if cached[0] in paths:
            s = store(directory)
            later = refs[paths.index(cached[0]) + 1 :]
            return catch_up(cached[1], [s.read(r) for r in later], codec, fingerprint), "catch-up"
    if not refs:
        return Bin(bin), "miss"
    b = read(directory, refs, codec, fingerprint)
    b.full = fingerprint != codec.fingerprint  # an older compatible schema: rewrite whole
    return b, "miss"


def read(directory: str, refs: Any, codec: Any, fingerprint: str) -> Bin:
    """A bin decoded from its chain in the store (checksums checked), bypassing the cache."""
    from tstate.checkpoint.delta import restore_bin

    s = store(directory)
    return restore_bin([s.read(r) for r in refs], codec, fingerprint=fingerprint)


def give(directory: str, operator: str, b: Bin, version: str) -> None:
    """Keep ``b`` for the next batch, as of ``version`` (the last file written for it)."""
    b.reset_changes()
    with _lock:
        _bins[directory, operator, b.index] = (version, b)


def clear() -> None:
    """Forget every cached bin and manifest (tests)."""
    with _lock:
        _bins.clear()
        _manifests.clear()
        _stores.clear()
