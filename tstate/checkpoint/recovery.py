"""Recovering from a checkpoint store (:class:`Recovery`, a base of
:class:`tstate.checkpoint.store.CheckpointStore`): the newest usable checkpoint of
either copy, the unusable ones skipped, marked and kept as evidence, and never an empty
start by surprise (see the module docstring of :mod:`tstate.checkpoint.store`).
"""

from __future__ import annotations

import time as _time
import warnings
from typing import Callable

from tstate.checkpoint.layout import unusable_name
from tstate.checkpoint.manifest import Manifest
from tstate.checkpoint.replica import Replication
from tstate.errors import CheckpointError, CheckpointSkippedWarning

__all__ = ["Recovery"]


class Recovery(Replication):
    """``latest`` and ``recover``: which checkpoint to resume from."""

    def _candidate_ids(self) -> list[int]:
        """The checkpoint ids of this store and of its replica (either may be
        unreachable, not both)."""
        if self.replica is None:
            return self._manifest_ids()
        try:
            mine = self._manifest_ids()
        except CheckpointError as exc:
            try:
                theirs = self.replica._manifest_ids()
            except CheckpointError:
                raise exc from None
            self.problems.append(f"{exc}: reading the replica's checkpoints")
            return theirs
        try:
            return sorted(set(mine) | set(self.replica._manifest_ids()))
        except CheckpointError as exc:
            self.problems.append(f"replica: {exc}")
            return mine

    def latest(self, *, verify: Callable[[Manifest], list[str]] | None = None) -> Manifest | None:
        """The newest committed checkpoint whose manifest parses and whose every file
        verifies (size and xxh64), or ``None`` if there is none.  ``verify``: what
        checks a candidate's files, saying what is wrong like :meth:`verify` (the
        default; the Spark backend has its executors read them in parallel).  Each newer
        checkpoint skipped is explained in ``problems`` (naming the file) and in
        :attr:`skipped`; a store that may write marks it unusable on disk
        (``manifests/ckpt-000042.unusable``, the reasons as text), so garbage collection
        keeps it as evidence in every later process too.  It also becomes the base the
        next :meth:`begin` builds on (what the engine restored).  Recovery uses
        :meth:`recover`, which refuses to start from empty state when checkpoints exist
        but none is usable."""
        with self._lock:
            self.problems = []
            self.skipped = {}
            found: Manifest | None = None
            for i in reversed(self._candidate_ids()):
                try:
                    m = self._load_either(i)
                except CheckpointError as exc:
                    self._skip(i, [str(exc)])
                    continue
                bad = (verify or self.verify)(m)
                if bad:
                    self._skip(i, bad)
                    continue
                found = m
                break
            if found is not None and self.replica is not None and not self.readonly:
                self._check_replica(found)
            self._head, self._head_known, self._head_pending = found, True, None
            return found

    def _skip(self, checkpoint_id: int, reasons: list[str]) -> None:
        """``latest`` found checkpoint ``checkpoint_id`` unusable: note why, and (when
        this store may write) mark it on disk so no garbage collection deletes it."""
        self.problems.extend(f"checkpoint {checkpoint_id} skipped: {p}" for p in reasons)
        self.skipped[checkpoint_id] = list(reasons)
        self._bad_ids.add(checkpoint_id)
        if self.readonly:
            return
        marker = unusable_name(checkpoint_id)
        try:
            if not self.fs.exists(marker):
                text = f"checkpoint {checkpoint_id} found unusable at {_time.strftime('%Y-%m-%d %H:%M:%S')}:\n"
                self.fs.write_atomic(marker, (text + "".join(f"  {r}\n" for r in reasons)).encode(), fsync=False)
        except OSError as exc:  # the in-memory note still protects it in this process
            self.problems.append(f"{marker}: cannot be written ({exc})")

    def recover(
        self, *, fresh_if_unusable: bool = False, verify: Callable[[Manifest], list[str]] | None = None
    ) -> Manifest | None:
        """The checkpoint to resume from: :meth:`latest`, but never an empty start by
        surprise.

        - No checkpoint at all: ``None`` (a first run).
        - A usable one, with newer ones skipped: it, after a
          :class:`CheckpointSkippedWarning` naming each skipped checkpoint and why.
        - Checkpoints, none usable: :class:`~tstate.errors.CheckpointError` listing each
          one and why it is unusable, unless ``fresh_if_unusable`` (then ``None`` after a
          :class:`CheckpointSkippedWarning`: the run starts from empty state).

        Nothing is deleted either way: unusable checkpoints stay as evidence (garbage
        collection keeps them and their files) until someone removes their manifests.
        ``verify``: as for :meth:`latest`."""
        m = self.latest(verify=verify)
        skipped = dict(self.skipped)
        if not skipped:
            return m
        where = self._where
        lines = "; ".join(f"checkpoint {i}: {', '.join(r)}" for i, r in sorted(skipped.items(), reverse=True))
        if m is None:
            what = (
                f"{where} holds "
                f"{len(skipped)} checkpoint{'s' if len(skipped) > 1 else ''} and none is usable ({lines}); "
                "nothing was deleted"
            )
            if not fresh_if_unusable:
                raise CheckpointError(
                    f"{what}. Resuming would start from empty state: repair or remove the unusable checkpoints "
                    f"(`python -m tstate checkpoints {self.directory} --verify` lists them), or pass "
                    "fresh_if_unusable=True to start from empty state and keep them"
                )
            warnings.warn(CheckpointSkippedWarning(f"{what}; starting from empty state (fresh_if_unusable=True)"), stacklevel=2)
            return None
        warnings.warn(
            CheckpointSkippedWarning(
                f"{where}: resuming from "
                f"checkpoint {m.id} (time {m.time!r}); newer checkpoints are unusable and kept as evidence: {lines}"
            ),
            stacklevel=2,
        )
        return m
