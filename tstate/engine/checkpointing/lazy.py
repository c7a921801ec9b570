"""Lazy recovery: resume at once, decode each bin when it is first needed.

Eager recovery decodes every bin of the checkpoint before the first step, so the time
to the first output grows with the state.  A lazy restore (``ts.Checkpoints(...,
restore="lazy")``, the default) instead

1. verifies the checkpoint as eager recovery does (the store reads every file and checks
   its size and xxh64 while choosing the checkpoint: a damaged one is still skipped for
   an older one *before* anything runs);
2. gives each bin to its owner *undecoded*: the owner holds it (``owned``) and knows
   its chain of files, and indexes its pending timer times, read from the timers part
   of the chain's last file alone (every file carries the bin's full timer set; the
   states before it are skipped without being built, :func:`bin_timer_times`), so the
   operator holds a capability for every pending timer exactly as after an eager
   restore;
3. resumes processing: a bin is decoded (:func:`~tstate.checkpoint.chain_reader.read_chain`)
   the first time anything needs it -- a record or a timer of the bin, a migration
   hand-over, a state query, ``ctx.clear`` -- through
   :meth:`~tstate.operators.stateful.StatefulRuntime.bin`; and the bins nobody asked
   for are decoded between steps (:meth:`LazyRestore.step`), paced (:class:`RestorePacer`)
   so that no step absorbs the restore: a small share of the wall time while the
   dataflow is busy, whole slices while it is idle.

Each bin decoded is moved out of the cyclic garbage collector's reach at once
(:func:`gc.freeze`), as an eager restore does with the whole state.

Checkpoints need nothing decoded: a bin not decoded yet has not changed since the
checkpoint it came from, so a checkpoint taken meanwhile keeps its chain (the files stay
referenced, so garbage collection keeps them), and restoring from that checkpoint gives
the same state.  The one exception, a checkpoint that writes every bin whole (fork mode
after a lost snapshot process), decodes every bin first.  Exactly-once output is
unchanged: what a bin holds when it is first used is exactly what an eager restore
would have installed, and its timers fire at the same times.

A bin is restored lazily only when its files decode as they are: an operator whose
stored schema differs from the declared one (a compatible change) or a checkpoint of an
older format is restored eagerly, so that its bins are rewritten at the next checkpoint.

>>> p = RestorePacer(share=0.2, max_slice=0.005)
>>> round(p.budget(0.010, busy=True), 6), p.budget(0.100, busy=True), p.budget(0.0, busy=False)
(0.002, 0.005, 0.02)
"""

from __future__ import annotations

import gc
import time as _time
from collections import deque
from typing import TYPE_CHECKING, Any, Optional

import msgspec

from tstate.errors import CheckpointError, GraphError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.checkpoint.manifest import FileRef
    from tstate.checkpoint.store import CheckpointStore
    from tstate.operators.stateful import StatefulRuntime
    from tstate.state.bin import Bin

__all__ = ["LazyBins", "LazyRestore", "RestorePacer", "bin_timer_times", "RESTORES"]

#: the restore modes of ``ts.Checkpoints(restore=...)``
from tstate.checkpoint.settings import RESTORES  # noqa: E402  (re-exported)

_BinTimers = msgspec.defstruct(
    "BinTimers", [("bin", int), ("timers", list[tuple[Any, msgspec.Raw]])], gc=False
)
_timers_decoder = msgspec.msgpack.Decoder(tuple[str, str, _BinTimers])  # type: ignore[valid-type]


def bin_timer_times(data: bytes, codec: Any, fingerprint: str) -> tuple[int, list[Any]]:
    """``(bin, its pending timer times)`` of one chain file (a snapshot or a delta: both
    carry the bin's full timer set), decoding only the bin index and the timer times:
    the states and the timers' keys are skipped, not built.  A file this cannot read so
    (another format, another fingerprint, not a bin payload) is decoded whole by
    :func:`~tstate.state.payload.decode_payload`, which raises what is wrong.

    >>> from tstate.types import StateCodec
    >>> from tstate.state.bin import Bin
    >>> from tstate.state.payload import encode_bin
    >>> codec = StateCodec(int)
    >>> b = Bin(5); b.states = {"a": 1}; b.timers = {7: {"a": None}, 3: {"a": None}}
    >>> bin_timer_times(encode_bin(b, codec), codec, codec.fingerprint)
    (5, [7, 3])
    """
    from tstate.state.payload import decode_payload, decode_time
    from tstate.types.codec import MAGIC, MAGIC_FORMAT_1

    try:
        magic, fp, p = _timers_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        p = None
    if p is None or magic not in (MAGIC, MAGIC_FORMAT_1) or fp != fingerprint:
        full = decode_payload(data, codec, fingerprint)
        return full.bin, list(full.timers)
    return p.bin, [decode_time(t) for t, _keys in p.timers]


class RestorePacer:
    """How long the next background restore slice may be.

    While the dataflow is busy (the last step activated operators), restoring may take
    ``share`` of the wall time since the restore began, at most ``max_slice`` seconds
    at a time; while it is idle (a step with nothing to do), a whole ``idle_slice``.
    A slice decodes whole bins and at least one, so it overruns by up to one bin."""

    def __init__(self, share: float = 0.2, max_slice: float = 0.005, idle_slice: float = 0.02) -> None:
        self.share = share
        self.max_slice = max_slice
        self.idle_slice = idle_slice
        self.spent = 0.0  # seconds of background slices so far

    def budget(self, since_start: float, busy: bool) -> float:
        """The next slice's length (0: not now)."""
        if not busy:
            return self.idle_slice
        allowed = self.share * since_start - self.spent
        return min(allowed, self.max_slice) if allowed > 0 else 0.0


class LazyBins:
    """The bins of one stateful runtime (one operator on one worker) that a lazy restore
    left undecoded: ``chains`` maps each to its files.  Decoding one
    (:meth:`materialise`) installs it in the runtime and forgets it here."""

    __slots__ = ("restore", "runtime", "codec", "fingerprint", "chains", "timers_indexed")

    def __init__(self, restore: "LazyRestore", runtime: "StatefulRuntime", codec: Any, fingerprint: str) -> None:
        self.restore = restore
        self.runtime = runtime
        self.codec = codec
        self.fingerprint = fingerprint
        self.chains: dict[int, tuple["FileRef", ...]] = {}
        #: False: the operator has no timer handler, so timers were not read ahead
        #: (none can be pending: one found when a bin is decoded is an error)
        self.timers_indexed = True

    def __contains__(self, index: object) -> bool:
        return index in self.chains

    def __len__(self) -> int:
        return len(self.chains)

    def materialise(self, index: int, *, background: bool = False) -> "Bin":
        """Decode bin ``index`` from its chain and install it in the runtime (its timer
        times are indexed already); returns it."""
        from tstate.checkpoint.chain_reader import read_chain

        chain = self.chains.pop(index)
        rt = self.runtime
        start = _time.perf_counter()
        store = self.restore.store
        enabled = gc.isenabled()
        gc.disable()
        try:
            b = read_chain(store, chain, self.codec, self.fingerprint)
        except CheckpointError as exc:
            raise CheckpointError(
                f"checkpoint {self.restore.checkpoint_id}: operator {rt.name!r} bin {index} (restored lazily): {exc}"
            ) from None
        finally:
            # as an eager restore does (Coordinator.restore): the decoded state is
            # long-lived and acyclic, so it goes out of the cyclic collector's reach at
            # once -- else every full collection while the restore goes on walks all of
            # it again (twice the decoding time in benchmarks.recovery)
            gc.freeze()
            if enabled:
                gc.enable()
        if b.index != index:
            raise CheckpointError(
                f"checkpoint {self.restore.checkpoint_id}: operator {rt.name!r} bin {index} holds bin {b.index}"
            )
        if not self.timers_indexed and b.timers:
            # (an eager restore would fail when the first of them fires)
            raise GraphError(
                f"operator {rt.name!r}: bin {index} of checkpoint {self.restore.checkpoint_id} holds pending timers, "
                f"but the operator has no @{rt.name}.on_notify handler"
            )
        b = rt.held.keep(b)  # (a store-backed table keeps its own kind of bin)
        if not self.chains:
            rt.held.lazy = None
        self.restore._note(background, _time.perf_counter() - start)
        return b

    def forget(self, index: int) -> None:
        """Bin ``index`` leaves the runtime undecoded (a pre-copy hand-over: its new
        owner has it from a checkpoint): it is no longer restored here."""
        del self.chains[index]
        if not self.chains:
            self.runtime.held.lazy = None
        self.restore._forget()

    def materialise_all(self) -> None:
        """Decode every bin left here."""
        for index in sorted(self.chains):
            self.materialise(index)


class LazyRestore:
    """Every bin an execution restored lazily from checkpoint ``checkpoint_id`` and has
    not decoded yet, over all its stateful runtimes; decodes them in the background
    (:meth:`step`, between steps).  Counters: ``on_demand`` / ``background`` bins
    decoded each way, ``seconds`` spent decoding, ``finished`` (``perf_counter`` when the
    last bin was decoded), ``started`` (when processing resumed)."""

    def __init__(self, store: "CheckpointStore", checkpoint_id: int, pacer: Optional[RestorePacer] = None) -> None:
        self.store = store
        self.checkpoint_id = checkpoint_id
        self.pacer = pacer or RestorePacer()
        self.parts: list[LazyBins] = []
        self._queue: deque[tuple[LazyBins, int]] = deque()
        self.left = 0  # bins not decoded yet
        self.total = 0
        self.on_demand = 0
        self.background = 0
        self.seconds = 0.0
        self.started = _time.perf_counter()
        self.finished: Optional[float] = None
        self._activations: Optional[int] = None

    @property
    def done(self) -> bool:
        """Whether every bin is decoded."""
        return self.left == 0

    def add(self, runtime: "StatefulRuntime", codec: Any, fingerprint: str, chains: dict[int, tuple["FileRef", ...]]) -> None:
        """Give ``runtime`` (the owner) the bins ``chains`` undecoded, indexing the pending
        timer times of each (read from its chain's last file) when the operator has a
        timer handler."""
        if not chains:
            return
        lazy = LazyBins(self, runtime, codec, fingerprint)
        lazy.timers_indexed = runtime.on_notify is not None
        for index, chain in sorted(chains.items()):
            if lazy.timers_indexed:
                b, times = bin_timer_times(self.store.read(chain[-1]), codec, fingerprint)
                if b != index:
                    raise CheckpointError(
                        f"checkpoint {self.checkpoint_id}: operator {runtime.name!r} bin {index} holds bin {b}"
                    )
                for t in times:
                    runtime._index_timer(t, index)
            lazy.chains[index] = chain
            runtime.owned.add(index)
            self._queue.append((lazy, index))
        runtime.held.lazy = lazy
        self.parts.append(lazy)
        self.left += len(chains)
        self.total += len(chains)

    def resumed(self) -> None:
        """Processing resumes now (the pacer's clock starts)."""
        self.started = _time.perf_counter()

    def _note(self, background: bool, seconds: float) -> None:
        self.left -= 1
        self.seconds += seconds
        if background:
            self.background += 1
        else:
            self.on_demand += 1
        if self.left == 0:
            self.finished = _time.perf_counter()

    def _forget(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.finished = _time.perf_counter()

    def step(self, activations: int) -> None:
        """Between steps: decode bins for as long as the pacer allows (``activations``:
        the execution's activation count, which tells whether the last step was busy)."""
        if self.done:
            return
        busy = self._activations is None or activations != self._activations
        self._activations = activations
        now = _time.perf_counter()
        budget = self.pacer.budget(now - self.started, busy)
        if budget <= 0:
            return
        queue = self._queue
        try:
            while queue:
                lazy, index = queue.popleft()
                if index not in lazy.chains:
                    continue  # decoded on demand already
                lazy.materialise(index, background=True)
                if _time.perf_counter() - now >= budget:
                    break
        finally:
            self.pacer.spent += _time.perf_counter() - now

    def materialise_all(self) -> None:
        """Decode every bin left (a checkpoint that writes every bin whole needs them)."""
        for lazy in self.parts:
            lazy.materialise_all()
        self._queue.clear()
