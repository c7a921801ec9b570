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

**Whose bin.**  A cached bin is tagged with the partition whose task gave it back, and a
task of partition ``p`` takes only bins given by ``p`` (or tagged for ``p`` by a
prefetch): on a cluster a bin that changes owner runs on another executor, which does
not hold it, and a local session (where every partition's tasks share a few Python
workers) must not look cheaper than that.  A bin that did not move is always given and
taken by the same partition.

**Pre-copy** (``Backend.rescale(..., strategy="precopy")``): in the batches before a
bin changes owner, :func:`prefetch` loads its committed chain on a background thread of
the executor process into a separate table, tagged with the bin's next owner; at the
hand-over the new owner's task takes it and applies only the files committed since
(:func:`take` says ``"prefetched"``).  Spark decides where a partition's task runs, so a
task may land on a process that did not prefetch: it then reads the chain as usual
(counted as a fallback in the batch's metrics).  A prefetch still loading when the
hand-over needs it is waited for.  Prefetched bins the hand-over did not take are
dropped after the hand-over batch (:func:`expire`).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable, Optional

from attrs import frozen

from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.checkpoint.store import CheckpointStore
from tstate.state.bin import Bin

__all__ = ["take", "give", "read", "manifest", "remember", "store", "clear", "prefetch", "expire", "Taken", "ANY"]

#: ``partition`` of a task that takes any partition's cached bins (loop rounds)
ANY = -1

_lock = threading.Lock()
_stores: dict[str, CheckpointStore] = {}
_manifests: dict[tuple[str, int], Manifest] = {}
_Key = tuple[str, str, int]
#: (directory, operator, bin) -> (version, bin, partition that gave it or ANY)
_bins: dict[_Key, tuple[str, Bin, int]] = {}
#: prefetched bins: (directory, operator, bin) -> (version, bin, next owner, hand-over batch)
_prefetched: dict[_Key, tuple[str, Bin, int, int]] = {}
#: prefetches under way in this process, with the owner they load for: the event is set
#: when the bin is in _prefetched (or the load failed)
_loading: dict[_Key, tuple[threading.Event, int]] = {}
#: how long a hand-over waits for a prefetch still loading its bin
WAIT_SECONDS = 120.0


@frozen
class Taken:
    """How :func:`take` found a bin: ``how`` is ``"hit"`` (cached at the committed
    version), ``"catch-up"`` (cached at an older version: the files since applied),
    ``"prefetched"`` (loaded ahead of a hand-over: the files since applied) or
    ``"miss"`` (read from the store); ``read``: the bytes of state files read."""

    how: str
    read: int = 0


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
        _keep(key, m)
    return m


def remember(directory: str, m: Manifest) -> None:
    """Cache manifest ``m``, which this process just committed in ``directory``, so
    that :func:`manifest` serves it without reading and decoding it again (the driver
    reads the committed head's before the next batch: the stored state's size that
    decides the one-task path, :mod:`tstate.spark.local_batch`)."""
    _keep((directory, m.id), m)


def _keep(key: tuple[str, int], m: Manifest) -> None:
    """Cache manifest ``m`` under ``key`` (at most 17 kept: the cache is emptied when full)."""
    with _lock:
        if len(_manifests) > 16:
            _manifests.clear()
        _manifests[key] = m


def chain(m: Optional[Manifest], operator: str, bin: int) -> tuple[FileRef, ...]:
    if m is None or operator not in m.operators:
        return ()
    return m.chain(operator, bin)


def take(
    directory: str, m: Optional[Manifest], operator: str, bin: int, codec: Any, fingerprint: str,
    partition: int = ANY,
) -> tuple[Bin, Taken]:
    """The bin as of manifest ``m`` for a task of ``partition`` (:data:`ANY`: any
    partition's cached copy will do), and how it was found (:class:`Taken`): cached at
    that version, cached or prefetched at an older version still in the bin's chain
    (only the files written since are read and applied), or read from the store."""
    from tstate.checkpoint.chain_reader import is_sst
    from tstate.checkpoint.delta import catch_up

    refs = chain(m, operator, bin)
    version = refs[-1].path if refs else ""
    key = (directory, operator, bin)
    with _lock:
        loading = _loading.get(key)
    if loading is not None and partition in (loading[1], ANY):
        loading[0].wait(WAIT_SECONDS)  # a prefetch for this task is under way: nearer done than a new read
    with _lock:
        cached = _bins.pop(key, None)
        pre = _prefetched.get(key)
        if pre is not None and (partition == ANY or pre[2] == partition):
            del _prefetched[key]
        else:  # (loaded for another partition: the old owner's task in this process leaves it)
            pre = None
    found: list[tuple[str, Bin, str]] = []
    if cached is not None and (partition == ANY or cached[2] in (partition, ANY)):
        found.append((cached[0], cached[1], "hit"))
    if pre is not None:
        found.append((pre[0], pre[1], "prefetched"))
    paths = [r.path for r in refs]
    for v, b, how in found:
        if v == version:
            return b, Taken(how)
        if v in paths and not is_sst(refs):  # (SST exports are read whole: read() below)
            s = store(directory)
            later = refs[paths.index(v) + 1 :]
            b = catch_up(b, [s.read(r) for r in later], codec, fingerprint)
            return b, Taken("catch-up" if how == "hit" else how, sum(r.size for r in later))
    if not refs:
        return Bin(bin), Taken("miss")
    b = read(directory, refs, codec, fingerprint, bin)
    b.full = b.full or fingerprint != codec.fingerprint  # an older compatible schema: rewrite whole
    return b, Taken("miss", sum(r.size for r in refs))


def prefetch(
    directory: str, m: Optional[Manifest], operator: str, codec: Any, fingerprint: str,
    bins: Iterable[tuple[int, int]], handover: int,
) -> int:
    """Pre-copy: load each ``(bin, next owner)`` of ``bins`` as of manifest ``m`` (its
    committed chain) into this process, on a background thread, for the hand-over at
    batch ``handover`` (module docstring).  Bins this process already holds for that
    owner, or is loading, are skipped.  Returns how many loads were started.  A load
    that fails (a file collected meanwhile) leaves nothing: the hand-over reads the
    chain itself."""
    todo: list[tuple[_Key, tuple[FileRef, ...], int]] = []
    with _lock:
        for b, owner in bins:
            key = (directory, operator, b)
            refs = chain(m, operator, b)
            if not refs or key in _loading:
                continue
            pre, cached = _prefetched.get(key), _bins.get(key)
            if (pre is not None and pre[2] == owner) or (cached is not None and cached[2] == owner):
                continue
            _loading[key] = (threading.Event(), owner)
            todo.append((key, refs, owner))
    if not todo:
        return 0

    def load() -> None:
        try:  # (Linux: this thread alone at the lowest CPU priority, behind the tasks)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        for key, refs, owner in todo:
            try:
                b = read(directory, refs, codec, fingerprint, key[2])
                b.full = b.full or fingerprint != codec.fingerprint
                with _lock:
                    _prefetched[key] = (refs[-1].path, b, owner, handover)
            except Exception:  # noqa: BLE001 -- the hand-over falls back to reading the chain
                pass
            finally:
                with _lock:
                    ev = _loading.pop(key, None)
                if ev is not None:
                    ev[0].set()

    threading.Thread(target=load, name=f"tstate-prefetch-{operator}", daemon=True).start()
    return len(todo)


def expire(batch: int) -> None:
    """Forget prefetched bins whose hand-over batch is before ``batch`` (their owner's
    task ran elsewhere, or the move was given up)."""
    with _lock:
        for key in [k for k, e in _prefetched.items() if e[3] < batch]:
            del _prefetched[key]


def read(directory: str, refs: Any, codec: Any, fingerprint: str, index: Optional[int] = None) -> Bin:
    """A bin decoded from its chain in the store (checksums checked), bypassing the
    cache: snapshot and deltas, or a RocksDB run's SST export
    (:func:`tstate.checkpoint.chain_reader.read_chain`)."""
    from tstate.checkpoint.chain_reader import read_chain

    return read_chain(store(directory), refs, codec, fingerprint, index)


def give(directory: str, operator: str, b: Bin, version: str, partition: int = ANY) -> None:
    """Keep ``b`` for the next batch, as of ``version`` (the last file written for it),
    given by a task of ``partition``."""
    b.reset_changes()
    with _lock:
        _bins[directory, operator, b.index] = (version, b, partition)


def clear() -> None:
    """Forget every cached, prefetched bin and manifest (tests)."""
    with _lock:
        _bins.clear()
        _prefetched.clear()
        _manifests.clear()
        _stores.clear()
