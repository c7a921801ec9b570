"""Preloading the copies of pre-copy moves (embedded engine; step 2 of
:mod:`tstate.engine.precopy`): between steps, while the old owner keeps processing,
each move due within :attr:`PreCopy.window <tstate.engine.precopy.PreCopy>` epochs has
its bin read from the newest committed checkpoint its track knows the changes since --
or from a newer one written and not yet committed -- into a copy held aside (a RocksDB
bin: into the new owner's database, :mod:`tstate.engine.precopy_files`), paced like a
lazy restore; a copy is re-based (caught up by the chain's newer files) when a newer
checkpoint commits before the move.

:class:`Preloading` is the part of :class:`~tstate.engine.precopy.PreCopy` that does
it (a base class of it); planning, the coordinator's hooks and the hand-over are
:mod:`tstate.engine.precopy`'s."""

from __future__ import annotations

import gc
import time as _time
from typing import TYPE_CHECKING, Any, Optional

from tstate.checkpoint.chain_reader import decode_chain
from tstate.checkpoint.delta import catch_up
from tstate.errors import CheckpointError, TstateError
from tstate.progress.timestamp import epoch
from tstate.state.bin import Bin

if TYPE_CHECKING:  # pragma: no cover
    from tstate.checkpoint.manifest import FileRef
    from tstate.engine.checkpointing.lazy import RestorePacer
    from tstate.engine.precopy_chains import CheckpointChains
    from tstate.engine.precopy_files import FileCopies
    from tstate.engine.precopy_moves import Moving, PreCopyStats, Track
    from tstate.operators.stateful import StatefulRuntime

__all__ = ["Preloading"]


class Preloading:
    """:meth:`step` of :class:`~tstate.engine.precopy.PreCopy` (a base class of it) and
    the loading of one track's copy (see the module docstring).  What it uses of the
    pre-copy is declared here and set up by :class:`~tstate.engine.precopy.PreCopy`."""

    #: a bin is preloaded once its move is at most this many epochs ahead
    window = 4

    if TYPE_CHECKING:  # pragma: no cover - PreCopy's (tstate.engine.precopy)
        exe: Moving
        stats: PreCopyStats
        pacer: RestorePacer
        chains: CheckpointChains
        files: FileCopies
        _order: list[Track]
        _nodes: set[int]
        _started: float
        _activations: Optional[int]

        def _runtime(self, worker: int, node: int) -> "StatefulRuntime": ...

    # -- preloading --------------------------------------------------------------------
    def step(self) -> None:
        """Between steps: preload (or re-base) the copies of the moves due within
        :attr:`window` epochs, paced (a move due by the next epoch whatever the budget)."""
        if not self._order:
            return
        coord = self.exe.coordinator
        if coord is None or not coord.committed_ids:
            return
        activations = self.exe.activations
        busy = self._activations is None or activations != self._activations
        self._activations = activations
        start = _time.perf_counter()
        budget = self.pacer.budget(start - self._started, busy)
        now_epoch = self._epoch()
        written = coord.written_uncommitted()
        newest = written[-1][0] if written else coord.committed_ids[-1]
        newest_committed = coord.committed_ids[-1]  # (files: only committed checkpoints are read)
        try:
            for tr in self._order:
                if now_epoch is not None and tr.time > now_epoch + self.window:
                    break
                if tr.base is not None and tr.base >= (newest_committed if self._in_files(tr) else newest):
                    continue  # up to date
                due = now_epoch is None or tr.time <= now_epoch + 1
                if not due and _time.perf_counter() - start >= budget:
                    break
                self._load(tr)
        finally:
            self.pacer.spent += _time.perf_counter() - start

    def _epoch(self) -> Optional[int]:
        """The least epoch a tracked operator may still receive records at (None: none)."""
        least: Optional[int] = None
        for node in self._nodes:
            for t in self.exe.frontier(node, 0).elements:
                e = epoch(t)
                if least is None or e < least:
                    least = e
        return least

    def _load(self, tr: Track) -> bool:
        """Bring ``tr``'s copy to the newest committed checkpoint the track knows the
        changes since (read whole, or caught up by the files added to its chain);
        whether it has a copy now."""
        rt = self._runtime(tr.dst, tr.node)
        codec, name = rt.codec, rt.name
        if self._in_files(tr):
            return self._load_files(tr, name, codec)
        chains = self.chains
        chains.written = None  # (the checkpoints written and not committed, as of now)
        for cid in reversed(tr.changes.bases()):
            if tr.base is not None and cid <= tr.base:
                break  # nothing newer than the copy
            chain = chains.chain(cid, name, tr.bin, codec.fingerprint)
            if chain is None or not self._read(tr, chain, codec):
                continue
            if tr.copy is not None and tr.copy.index != tr.bin:
                raise CheckpointError(f"checkpoint {cid}: operator {name!r} bin {tr.bin} holds bin {tr.copy.index}")
            tr.base, tr.chain = cid, tuple(chain)
            tr.changes.forget_before(cid)
            return True
        return tr.copy is not None

    def _in_files(self, tr: Track) -> bool:
        """Whether ``tr``'s bin is in RocksDB (its copy: files in the new owner's database)."""
        return self._runtime(tr.src, tr.node).store is not None

    def _load_files(self, tr: Track, name: str, codec: Any) -> bool:
        """:meth:`_load` of a RocksDB bin: the newest committed checkpoint the track
        knows the changes since preloads it into the new owner's database
        (:meth:`FileCopies.load <tstate.engine.precopy_files.FileCopies.load>`)."""
        committed = self.exe.coordinator.committed_set
        for cid in reversed(tr.changes.bases()):
            if tr.base is not None and cid <= tr.base:
                break  # nothing newer than the copy
            m = self.chains.manifest(cid) if cid in committed else None
            if m is None:
                continue
            start = _time.perf_counter()
            size = self.files.load(tr.bin, tr.dst, name, codec, m)
            self.stats.preload_seconds += _time.perf_counter() - start
            if size is None:
                continue
            if tr.copy is None:
                self.stats.preloaded += 1
                self.stats.preload_bytes += size
            else:
                self.stats.rebased += 1
                self.stats.rebase_bytes += size
            tr.copy, tr.base, tr.chain = Bin(tr.bin), cid, ()  # (the copy is in the new owner's database)
            tr.changes.forget_before(cid)
            return True
        return tr.copy is not None

    def _read(self, tr: Track, chain: tuple["FileRef", ...], codec: Any) -> bool:
        """Make ``tr``'s copy the bin ``chain`` holds: caught up by the files added to
        the chain it was read from, else read whole; False (the copy as it was, or
        none if a catch-up failed half way) if a file cannot be read or decoded."""
        start = _time.perf_counter()
        enabled = gc.isenabled()
        gc.disable()
        old, copy = tr.chain, tr.copy
        extend = copy is not None and len(chain) >= len(old) and chain[: len(old)] == old
        try:
            data = [self.chains.store.read(ref) for ref in (chain[len(old):] if extend else chain)]
        except CheckpointError:  # (e.g. collected meanwhile): the copy is as it was
            gc.freeze()
            if enabled:
                gc.enable()
            return False
        try:
            if copy is not None and extend:
                if data:
                    catch_up(copy, data, codec)
                    self.stats.rebased += 1
                    self.stats.rebase_bytes += sum(len(d) for d in data)
            else:
                tr.copy = decode_chain(chain, data, codec, codec.fingerprint, tr.bin)
                self.stats.preloaded += 1
                self.stats.preload_bytes += sum(len(d) for d in data)
        except (CheckpointError, TstateError):
            tr.copy, tr.base, tr.chain = None, None, ()  # (a catch-up may have applied part)
            return False
        finally:
            gc.freeze()  # long-lived and acyclic, as a lazy restore's bins
            if enabled:
                gc.enable()
            self.stats.preload_seconds += _time.perf_counter() - start
        return True
