"""The engine side of checkpoints: choosing consistent times, capturing bins,
committing after the sinks, and restoring.

**Consistent cut through frontiers.**  A checkpoint at time ``T`` records every bin's
state after exactly the records and timers at times ``< T``.  The coordinator sets a
*barrier* at ``T`` on every stateful operator — records and timers at ``>= T`` wait —
and captures once every stateful operator is complete before ``T`` (its input frontier
passed every earlier time and nothing earlier is buffered).  No records are blocked
before ``T`` and nothing flows backwards: this is a Chandy-Lamport snapshot whose
markers are the frontiers.  Source positions at ``T`` (where to replay batches at times
``>= T``) and the worker count go into the checkpoint's metadata.

**Incremental.**  A bin's changed keys (inserted, updated, cleared, timers) since the
previous checkpoint are written as a *delta*; a bin that moved here, or whose chain of
deltas grew long (``compact_after``), is written whole (a *snapshot*); untouched bins
keep their files.

**Asynchronous.**  On the processing path the coordinator only *freezes* what changed:
the states of dirty keys are copied into plain builtins (``StateCodec.to_builtins``
returns fresh containers) and the dirty sets are reset.  Packing, compressing, writing
and fsyncing happen on a background thread (``mode="async"``, the default); with
``mode="sync"`` all of it happens on the processing path (the baseline).

**Committed after the sinks.**  The manifest of ``T`` is committed only once every sink
has committed every epoch before ``T`` and the data files are durable, so recovery from
``T`` never loses output and re-computes only epochs ``>= T``, which exactly-once sinks
overwrite.
"""

from __future__ import annotations

import time as _time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Optional, Union

from attrs import field, frozen

from tstate.errors import CheckpointError, ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.execution import Execution

__all__ = ["Checkpoints", "Coordinator", "Restored"]


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, (int, float)) or value <= 0):
        raise ConfigurationError(f"{attribute.name} must be positive, got {value!r}")


def _mode(instance: Any, attribute: Any, value: str) -> None:
    if value not in ("async", "sync"):
        raise ConfigurationError(f"checkpoint mode must be 'async' or 'sync', got {value!r}")


@frozen
class Checkpoints:
    """Checkpoint settings for :meth:`tstate.Dataflow.run` / ``start``.

    ``directory``: where checkpoints live (created if missing); ``every_epochs`` /
    ``every_seconds``: how often (either or both; default every 10 epochs);
    ``mode``: ``"async"`` or ``"sync"``; ``retain``: how many committed checkpoints to
    keep; ``compact_after``: deltas per bin before a full snapshot is written;
    ``resume``: start from the latest committed checkpoint if there is one."""

    directory: str = field(converter=str)
    every_epochs: Optional[int] = field(default=10, validator=_positive)
    every_seconds: Optional[float] = field(default=None, validator=_positive)
    mode: str = field(default="async", validator=_mode)
    retain: int = 3
    compact_after: int = 8
    resume: bool = True


@frozen
class Restored:
    """What an execution resumed from: checkpoint ``id`` at ``time``."""

    id: int
    time: Any
    positions: dict[str, Any]
    seconds: float
    workers_before: int


class Coordinator:
    """Drives checkpoints for one execution (see the module docstring)."""

    def __init__(self, exe: "Execution", cfg: Union[Checkpoints, str]) -> None:
        from tstate.checkpoint.store import CheckpointStore

        self.exe = exe
        self.cfg = cfg if isinstance(cfg, Checkpoints) else Checkpoints(cfg)
        self.store = CheckpointStore(self.cfg.directory, retain=self.cfg.retain, compact_after=self.cfg.compact_after)
        self.barrier: Optional[int] = None
        self.last_time: Optional[int] = None
        self._last_wall = _time.perf_counter()
        self._pool: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(1, thread_name_prefix="tstate-checkpoint") if self.cfg.mode == "async" else None
        )
        # (time, writer, write job, commit job once the sinks are past the time)
        self._uncommitted: list[tuple[int, Any, Future[Any], Optional[Future[Any]]]] = []
        self._fresh = True  # the next checkpoint carries nothing over (unless restored)
        # Each checkpoint builds on the previous one: once one is not committed (a write
        # or commit failed, or the execution was abandoned), none after it may be.
        self._broken = False
        self.committed: list[int] = []  # times of checkpoints committed by this execution
        self.capture_seconds: list[float] = []  # time on the processing path, per checkpoint
        self.written_bytes: list[int] = []  # bytes of data files written, per committed checkpoint

    # -- which operators ------------------------------------------------------------
    def _stateful(self) -> list[Any]:
        return [op for ops in self.exe.operators for op in ops if op.spec.kind == "stateful"]

    def _sources(self) -> list[Any]:
        return [op for op in self.exe.operators[0] if op.spec.kind == "source"]

    def _sinks(self) -> list[Any]:
        return [op for ops in self.exe.operators for op in ops if op.spec.kind == "sink"]

    # -- recovery -------------------------------------------------------------------
    def restore(self) -> Optional[Restored]:
        """Install the latest committed checkpoint's bins (before the first step)."""
        from tstate.checkpoint.delta import restore_bin
        from tstate.checkpoint.schema_check import check_compatible
        from tstate.types.schema import Schema

        if not self.cfg.resume:
            return None
        start = _time.perf_counter()
        manifest = self.store.latest()
        if manifest is None:
            return None
        self._fresh = False
        exe = self.exe
        for spec in exe.flow._nodes:
            if spec.kind != "stateful":
                continue
            entry = manifest.operators.get(spec.name)
            if entry is None:
                continue  # an operator added since: starts empty
            schema = spec.options["schema"]
            check_compatible(spec.name, entry.schema, schema)
            if entry.bins != spec.options["bins"]:
                raise ConfigurationError(
                    f"operator {spec.name!r}: checkpoint {manifest.id} has {entry.bins} bins, the dataflow {spec.options['bins']}"
                )
            owners = exe.configs[spec.index].initial
            codec = exe.operators[0][spec.index].codec  # type: ignore[attr-defined]
            # a compatible older schema (e.g. a field added with a default) decodes too
            stored = Schema.from_builtins(entry.schema).fingerprint
            for bin_index, chain in sorted(entry.chains.items()):
                b = restore_bin([self.store.read(ref) for ref in chain], codec, fingerprint=stored)
                b.full = stored != codec.fingerprint  # rewrite it under the new schema
                if b.index != bin_index:
                    raise CheckpointError(f"checkpoint {manifest.id}: operator {spec.name!r} bin {bin_index} holds bin {b.index}")
                exe.operators[owners[bin_index]][spec.index].install_bin(b)  # type: ignore[attr-defined]
        meta = manifest.meta
        return Restored(
            manifest.id, manifest.time, dict(meta.get("sources", {})), _time.perf_counter() - start,
            int(meta.get("workers", 0)),
        )

    # -- the checkpoint cycle ---------------------------------------------------------
    def after_step(self) -> None:
        """Called by the execution after every step."""
        if self.barrier is None:
            self._maybe_set_barrier()
        if self.barrier is not None and all(op.complete_before(self.barrier) for op in self._stateful()):
            if self._sources_past(self.barrier):
                self._capture(self.barrier)
        if self._uncommitted:
            self._maybe_commit()

    def _applied_max(self) -> Optional[int]:
        ts = [op.max_applied for op in self._stateful() if op.max_applied is not None]
        return max(ts) if ts else None

    def _maybe_set_barrier(self) -> None:
        ops = self._stateful()
        if not ops or all(op.frontier(0).is_empty() for op in ops):
            return  # nothing more will change: no checkpoint needed
        applied = self._applied_max()
        floor = max(x for x in (applied, self.last_time, -1) if x is not None) + 1
        cfg = self.cfg
        t: Optional[int] = None
        if cfg.every_epochs is not None:
            n = cfg.every_epochs
            t = max(floor, ((self.last_time or 0) // n + 1) * n)
            t = -(-t // n) * n  # a multiple of n
        if cfg.every_seconds is not None and _time.perf_counter() - self._last_wall >= cfg.every_seconds:
            t = floor if t is None else min(t, floor)
        if t is None:
            return
        self.barrier = t
        for op in self._stateful():
            op.barrier = t

    def _sources_past(self, t: int) -> bool:
        for op in self._sources():
            if op.cap is not None and op.cap.time < t:
                return False
        return True

    def _capture(self, t: int) -> None:
        """Freeze every changed bin at ``t`` (copy-on-write, see
        :mod:`tstate.checkpoint.freeze`) and hand the checkpoint to the writer."""
        from tstate.checkpoint.freeze import Frozen
        from tstate.keys import encode_key
        from tstate.state.payload import encode_time

        start = _time.perf_counter()
        exe = self.exe
        items: list[tuple[str, Any, int, str, list[Any], list[Any], list[Any], str]] = []
        schemas: dict[str, tuple[Any, int]] = {}
        for op in self._stateful():
            name = op.name
            codec = op.codec
            schemas.setdefault(name, (op.spec.options["schema"].to_builtins(), op.spec.options["bins"]))
            if op.cow is not None:  # the previous checkpoint is still being read: finish it here
                op.cow.drain()
            frozen = Frozen(codec, name)
            for b in op.bins.values():
                if not (b.full or b.dirty or b.removed):
                    continue
                timers = [[encode_time(tt), [encode_key(k) for k in keys]] for tt, keys in b.timers.items()]
                if b.full or self.store.needs_snapshot(name, b.index):
                    keys = list(b.states)
                    items.append((name, frozen, b.index, "snapshot", keys, [], timers, codec.fingerprint))
                else:
                    keys = [k for k in b.dirty if k in b.states]
                    deletes = [encode_key(k) for k in b.removed if k not in b.states]
                    items.append((name, frozen, b.index, "delta", keys, deletes, timers, codec.fingerprint))
                frozen.freeze(b, keys)
                b.dirty = {}
                b.removed = {}
                b.full = False
            op.cow = frozen if frozen.pending else None
        positions = {op.name: op.position_at(t) for op in self._sources()}
        for op in self._sources():
            op.forget_before(t)
        meta = {"sources": positions, "workers": exe.workers, "time": t}
        writer = self.store.begin(t, full=self._fresh)  # a fresh run ignores older checkpoints
        self._fresh = False
        job = (writer, items, schemas, meta)
        # the barrier is down: processing continues while the writer reads and writes
        self.last_time = t
        self._last_wall = _time.perf_counter()
        self.barrier = None
        for op in self._stateful():
            op.release_barrier()
        if self._pool is not None:
            self._uncommitted.append((t, writer, self._pool.submit(_write, job), None))
        else:
            done: Future[Any] = Future()
            done.set_result(_write(job))
            self._uncommitted.append((t, writer, done, None))
        self.capture_seconds.append(_time.perf_counter() - start)

    def _sinks_past(self, t: int) -> bool:
        """Every sink has *acted on* a frontier past every time before ``t`` (it has
        committed those epochs), not merely been told the frontier moved."""
        return all(not op.committed.less_than(t) for op in self._sinks())

    def _maybe_commit(self, wait: bool = False) -> None:
        """Commit, in order, the checkpoints whose time every sink has passed.  In async
        mode the commit (a sync and the manifest) runs on the writer thread too; this
        only notices when it is done."""
        for i, (t, writer, fut, commit) in enumerate(self._uncommitted):
            if commit is None and (self._sinks_past(t) or wait):
                if self._pool is not None:
                    # after its write job: one thread, in order
                    commit = self._pool.submit(self._commit_in_order, writer, fut)
                else:
                    fut.result()
                    done: Future[Any] = Future()
                    done.set_result(writer.commit())
                    commit = done
                self._uncommitted[i] = (t, writer, fut, commit)
        while self._uncommitted:
            t, writer, fut, commit = self._uncommitted[0]
            if commit is None or (not commit.done() and not wait):
                return
            self.written_bytes.append(fut.result())  # re-raises a writer error here
            commit.result()
            self.committed.append(t)
            self._uncommitted.pop(0)
            for op in self._stateful():  # everything was read: no more copy-on-write
                if op.cow is not None and not op.cow.pending and not self._uncommitted:
                    op.cow = None

    def finish(self) -> None:
        """The execution completed: commit what is pending, stop the writer."""
        self._maybe_commit(wait=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _commit_in_order(self, writer: Any, written: "Future[Any]") -> Any:
        """Writer thread: commit ``writer`` unless its data or an earlier checkpoint
        failed (then a later checkpoint, built incrementally on it, would be wrong)."""
        if self._broken or written.cancelled() or written.exception() is not None:
            self._broken = True
            writer.abort()
            raise CheckpointError(f"checkpoint at {writer.time!r} abandoned: an earlier write or commit failed")
        try:
            return writer.commit()
        except BaseException:
            self._broken = True
            raise

    def abort(self) -> None:
        """The execution failed: uncommitted checkpoints are abandoned."""
        self._broken = True  # a commit starting from now on abandons itself
        for _, writer, fut, commit in self._uncommitted:
            for f in (fut, commit):
                if f is not None:
                    f.cancel()
                    try:
                        f.result()
                    except Exception:
                        pass
            ok = commit is not None and commit.done() and not commit.cancelled() and commit.exception() is None
            if not ok:
                writer.abort()
        self._uncommitted.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _write(job: tuple[Any, list[Any], dict[str, tuple[Any, int]], dict[str, Any]]) -> int:
    """Read the frozen states, encode and write one checkpoint's files (the background
    part); returns the bytes written."""
    from tstate.checkpoint.delta import encode_delta
    from tstate.checkpoint.freeze import MISSING
    from tstate.keys import encode_key
    from tstate.types.codec import encode_envelope

    writer, items, schemas, meta = job
    for name, (schema, bins) in schemas.items():
        writer.put_operator_schema(name, schema, bins)
    total = 0
    chunk = 256
    for name, fz, bin_index, kind, keys, deletes, timers, fp in items:
        pairs: list[tuple[Any, Any]] = []
        for i in range(0, len(keys), chunk):
            part = keys[i : i + chunk]
            for k, v in zip(part, fz.read(part)):
                if v is not MISSING:
                    pairs.append((encode_key(k), v))
        if kind == "snapshot":
            blob = encode_envelope(fp, {"bin": bin_index, "states": pairs, "timers": timers})
            writer.put_snapshot(name, bin_index, blob)
        else:
            blob = encode_delta(bin_index, pairs, deletes, timers, fp)
            writer.put_delta(name, bin_index, blob)
        total += len(blob)
    for k, v in meta.items():
        writer.put_meta(k, v)
    return total


def _fingerprint(schema_builtins: Any, cache: dict[str, Any], name: str) -> str:
    if cache.get(name) is None:
        from tstate.types.schema import Schema

        cache[name] = Schema.from_builtins(schema_builtins).fingerprint
    return cache[name]  # type: ignore[no-any-return]
