"""Pre-copy migration on the embedded engine (``strategy="precopy"``, Rhino-style).

A move of bin ``b`` from worker ``a`` to worker ``c`` at time ``t`` planned with
``strategy="precopy"`` (the planner gives it the steps of ``batched``,
:mod:`tstate.migration.planner`) is a :class:`Track` from the moment it is planned:

1. **Tracking** (old owner ``a``).  The bin's changes since each checkpoint captured
   while it is tracked are kept (:class:`~tstate.migration.handover.Changes`): at every
   capture the keys the checkpoint takes from the bin's change sets (``dirty``,
   ``removed``) become one segment (the coordinator calls :meth:`PreCopy.before_capture`
   and :meth:`PreCopy.captured`).  Tracking starts from the last checkpoint captured (or
   restored from) if the bin's change sets started there, else from the next capture.
2. **Preloading** (new owner ``c``), between steps while ``a`` keeps processing: once
   ``t`` is at most :attr:`PreCopy.window` epochs ahead, the bin is read from the newest
   *committed* checkpoint the track knows the changes since (its chain: a snapshot and
   deltas, or a RocksDB run's SST export,
   :func:`~tstate.checkpoint.chain_reader.decode_chain`) -- or from a newer one whose
   files are all written but whose commit lags behind (its chain built as the commit
   will build it; every file checked by size and xxh64 when read) -- into a copy held aside, paced
   like a lazy restore (:class:`~tstate.engine.checkpointing.lazy.RestorePacer`: a share
   of the wall time, whole slices while idle; a bin due at the next epoch is loaded
   whatever the budget).  When a newer checkpoint commits before ``t``, the copy is
   *re-based*: brought forward by the chain's files written since (the deltas only,
   :func:`~tstate.checkpoint.delta.catch_up`; a new snapshot is read whole), so that
   the hand-over carries the changes since the newest checkpoint only.
3. **Hand-over** at ``t`` (when ``a`` has processed everything before ``t``, as for
   every move): ``a`` encodes the keys changed since the copy's checkpoint -- the
   segments from it on plus the live change sets -- as a delta in the incremental
   checkpoint format (:func:`~tstate.migration.handover.encode_handover`: upserts,
   deletes, the full timer set), ``c`` applies it to the copy and installs it with the
   bin's change sets since the last capture (so the next checkpoint writes a delta for
   it, not a snapshot), and records at ``>= t`` are processed by ``c``.  A bin that a
   lazy restore left undecoded at ``a`` has not changed since that checkpoint: it is
   handed over without being decoded there.

The delta covers every change since the copy's checkpoint was *captured*, including
those made while a newer checkpoint was being taken or committed (a segment per
capture, whatever commits when), cleared keys (deletes) and timers (the full set), so
the bin after the hand-over is exactly the old owner's: the output is identical to a
run without migration.

**RocksDB state** (``state=ts.RocksDB(...)``): the copy is the bin's files -- its key
range exported from the checkpoint's database and ingested by the new owner's -- and the
hand-over the changed keys' stored records (:mod:`tstate.engine.precopy_files`); only
committed checkpoints are read (their files are in the store once committed).

**Fallbacks**: the whole bin is shipped (as by the other strategies) and counted in
:attr:`PreCopyStats.fallbacks` (with the reason in ``fallback_reasons``) when the run
has no checkpoints, the operator is a ``fold_bins`` one (its function changes a whole
bin's dict, so its deletions are not tracked), its state is in RocksDB on one side only, no committed checkpoint has the bin's
state at a capture the track knows the changes since (e.g. the move was planned before
the first checkpoint committed, or the bin had just arrived whole and no checkpoint
captured it since), or its files cannot be read.  A bin that had no state in that
checkpoint (no chain) is preloaded as an empty bin: its hand-over delta then holds all
its keys.  Tracking starts when the move is planned, so the checkpoint a bin is loaded
from was captured at or after that (the one captured last then, or a later one): a
move due before any such checkpoint is written falls back.

:attr:`Execution.precopy <tstate.engine.execution.Execution>` is the engine's
:class:`PreCopy`; its :attr:`~PreCopy.stats` count what was preloaded and handed over.
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Optional

from tstate.engine.checkpointing.lazy import RestorePacer
from tstate.engine.precopy_chains import CheckpointChains
from tstate.engine.precopy_files import FileCopies
from tstate.engine.precopy_moves import Moving, PreCopyStats, Track
from tstate.engine.precopy_preload import Preloading
from tstate.migration.handover import Changes, apply_handover, encode_handover
from tstate.state.bin import NO_STATE, Bin

if TYPE_CHECKING:  # pragma: no cover
    from tstate.operators.stateful import StatefulRuntime

__all__ = ["PreCopy", "PreCopyStats", "Track"]


class PreCopy(Preloading):
    """The pre-copy moves of one execution (see the module docstring); preloading
    their copies is the base class :class:`~tstate.engine.precopy_preload.Preloading`."""

    def __init__(self, exe: Moving) -> None:
        self.exe = exe
        self.tracks: dict[tuple[int, int, int], Track] = {}  # (node, time, bin) -> track
        self._order: list[Track] = []  # by (time, node, bin)
        self._nodes: set[int] = set()  # the nodes of the tracks
        self.stats = PreCopyStats()
        self.pacer = RestorePacer(share=0.1, max_slice=0.003, idle_slice=0.02)
        self._started = _time.perf_counter()
        self._activations: Optional[int] = None
        self._captured: list[tuple[Track, set[Any], bool]] = []
        #: where a bin's chain stands in the checkpoints a copy may be loaded from
        self.chains = CheckpointChains(exe)
        #: RocksDB operators: the copies are the bins' files (tstate.engine.precopy_files)
        self.files = FileCopies(exe)

    @property
    def pending(self) -> bool:
        """Whether any pre-copy move is still to be handed over."""
        return bool(self.tracks)

    # -- planning ---------------------------------------------------------------------
    def plan(self, node: int, moves: list[tuple[int, int, int, int]]) -> None:
        """Track the moves ``(time, bin, from, to)`` of stateful node ``node`` (just
        scheduled with ``strategy="precopy"``)."""
        for t, b, src, dst in moves:
            tr = Track(node, b, src, dst, t, Changes(self._open_for(node, b, src)))
            self.tracks[node, t, b] = tr
        self._order = sorted(self.tracks.values(), key=lambda tr: (tr.time, tr.node, tr.bin))
        self._nodes = {tr.node for tr in self._order}
        self.stats.planned += len(moves)
        if self.tracks:
            self._started = _time.perf_counter()

    def forget(self, node: int, since: int) -> None:
        """A new command for ``node`` from ``since`` on supersedes its moves from then."""
        for key in [k for k in self.tracks if k[0] == node and k[1] >= since]:
            del self.tracks[key]
        self._order = [tr for tr in self._order if (tr.node, tr.time, tr.bin) in self.tracks]
        self._nodes = {tr.node for tr in self._order}
        if not self._order:
            self.files.close()

    def _open_for(self, node: int, index: int, src: int) -> Optional[int]:
        """The checkpoint from whose capture the changes of bin ``index`` on ``src`` are
        known now: the last one captured or restored, if ``src`` holds the bin and its
        change sets started there (None: from the next capture)."""
        coord = self.exe.coordinator
        if coord is None or coord.last_captured is None:
            return None
        rt = self._runtime(src, node)
        if not rt.track_dirty or rt.fold or index not in rt.owned:
            return None
        b = rt.bins.get(index)
        if b is not None and b.full:  # arrived whole (or to be rewritten): not since a capture
            return None
        last: Optional[int] = coord.last_captured
        return last

    def _runtime(self, worker: int, node: int) -> "StatefulRuntime":
        rt: Any = self.exe.operators[worker][node]
        return rt  # (a stateful node's runtime)

    # -- the coordinator's hooks ---------------------------------------------------------
    def before_capture(self) -> None:
        """A checkpoint is being captured: note each tracked bin's change sets, which the
        capture is about to take (and reset)."""
        captured = self._captured = []
        for tr in self._order:
            rt = self._runtime(tr.src, tr.node)
            held = tr.bin in rt.owned
            b = rt.bins.get(tr.bin) if held else None
            keys: set[Any] = set(b.dirty) | set(b.removed) if b is not None else set()
            captured.append((tr, keys, held))

    def captured(self, checkpoint_id: int) -> None:
        """The checkpoint noted by :meth:`before_capture` is ``checkpoint_id``."""
        for tr, keys, held in self._captured:
            tr.changes.capture(checkpoint_id, keys, valid=held)
        self._captured = []

    # -- the hand-over -------------------------------------------------------------------
    def hand_over(self, src: "StatefulRuntime", index: int, t: Any, dst: int) -> bool:
        """``src`` hands bin ``index`` over to worker ``dst`` at ``t``: as a delta on the
        preloaded copy if the move is a pre-copy one with a usable copy, else whole
        (counted as a fallback).  False: not a pre-copy move (the caller ships it)."""
        tr = self.tracks.pop((src.index, t, index), None)
        if tr is None:
            return False
        self._order.remove(tr)
        if not self._order:
            self._nodes = set()
        reason = self._unusable(src, tr)
        if reason is not None:
            self.stats.fallbacks += 1
            self.stats.fallback_reasons[reason] = self.stats.fallback_reasons.get(reason, 0) + 1
            self.stats.whole_bytes += src.ship_whole(index, t, dst)
            if not self.tracks:
                self.files.close()
            return True
        assert tr.copy is not None and tr.base is not None
        start = _time.perf_counter()
        if src.store is not None:  # RocksDB: the changed keys' records over the preloaded files
            held = src.bins.get(index)
            keys = tr.changes.since(tr.base, [*held.dirty, *held.removed] if held is not None else [])
            assert keys is not None
            _moved, size = self.files.hand_over(src, index, t, dst, keys)
            self._handed_over(src, index, t, dst, size, len(keys), start)
            return True
        target = self._runtime(dst, src.index)
        lazy = src.held.lazy
        if lazy is not None and index in lazy:
            # restored lazily and never decoded here: unchanged since that checkpoint
            keys = tr.changes.since(tr.base, ())
            old = Bin(index)
            old.timers = tr.copy.timers
            lazy.forget(index)
            src.release_bin(index, list(tr.copy.timers))
            data = encode_handover(old, keys or (), src.codec, src.name)
            self.stats.undecoded += 1
        else:
            held = src.bins.get(index)
            old = held if held is not None else Bin(index)
            keys = tr.changes.since(tr.base, [*old.dirty, *old.removed])
            data = encode_handover(old, keys or (), src.codec, src.name)
            src.remove_bin(index)
        assert keys is not None
        copy = apply_handover(tr.copy, data, target.codec)
        # the bin's changes since the last capture come along: the next checkpoint writes
        # a delta of them (on the chain it had), not a snapshot
        states = copy.states
        copy.dirty = {k: states.get(k, NO_STATE) for k in old.dirty}
        copy.removed = dict(old.removed)
        copy.added = dict(old.added)
        copy.timers_changed = old.timers_changed
        target.receive_bin(copy, t, tracked=not old.full)
        self._handed_over(src, index, t, dst, len(data), len(keys), start)
        return True

    def _handed_over(self, src: "StatefulRuntime", index: int, t: Any, dst: int, size: int, keys: int, start: float) -> None:
        seconds = _time.perf_counter() - start
        self.exe.metrics.record_move(src.name, index, src.worker, dst, t, size, seconds)
        st = self.stats
        st.handovers += 1
        st.delta_bytes += size
        st.delta_keys += keys
        st.handover_seconds += seconds
        if not self.tracks:
            self.files.close()

    def _unusable(self, src: "StatefulRuntime", tr: Track) -> Optional[str]:
        """Why ``tr`` cannot be handed over as a delta (None: it can; its copy is ready,
        read now if it was not preloaded)."""
        if self.exe.coordinator is None:
            return "no checkpoints"
        if src.fold:
            return "fold_bins operator"
        if (src.store is None) != (self._runtime(tr.dst, tr.node).store is None):
            return "RocksDB state on one side only"
        held = src.bins.get(tr.bin)
        if held is not None and held.full:
            # it left and came back whole since the capture the track started from (no
            # capture in between marked the gap): its change sets start at its arrival,
            # not at that capture, so a delta from them would drop what changed before
            return "the bin arrived whole since its tracked checkpoint"
        if tr.copy is None or not tr.changes.tracks(tr.base if tr.base is not None else -1):
            tr.copy, tr.base, tr.chain = None, None, ()
            if self._load(tr):
                self.stats.late += 1
        if tr.copy is None or tr.base is None:
            return "no committed checkpoint with the bin's state at a tracked capture"
        return None
