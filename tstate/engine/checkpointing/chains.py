"""Which bins a checkpoint writes whole, and what it builds on (:class:`Chains`).

Each checkpoint builds on the one captured before it: a changed bin is written as a
*delta* on its chain of files, or whole (a *snapshot*) when it must be (it moved here,
its schema changed), has no chain yet, or its chain reached ``compact_after`` files.
:class:`Chains` keeps what that choice reads, for every checkpoint mode alike: the
chain lengths after every checkpoint captured so far (committed or not), the manifest
the run resumed from, the id of the last checkpoint captured, and whether the next one
is *fresh* (carries nothing over: the first of a run not resumed, or the one after a
lost checkpoint).

>>> c = Chains({}, compact_after=3)
>>> [c.wants_snapshot("op", 0, False) for _ in range(4)]
[True, False, False, True]
"""

from __future__ import annotations

from typing import Any, Optional

from tstate.checkpoint.manifest import Manifest
from tstate.hash_kind import HashKind

__all__ = ["Chains"]


class Chains:
    """The chains the next checkpoint's bins extend (see the module docstring);
    ``schemas``: operator -> (schema builtins, bins, hash kind), from the plan."""

    def __init__(self, schemas: dict[str, tuple[Any, int, HashKind]], compact_after: int) -> None:
        self.schemas = schemas
        self.compact_after = compact_after
        self.fresh = True  # the next checkpoint carries nothing over (unless restored)
        #: the manifest this execution's checkpoints build on (restored from): the
        #: chains of bins no checkpoint of this execution has captured yet
        self.base_manifest: Optional[Manifest] = None
        self.last_id: Optional[int] = None  # the id of the last checkpoint captured (or restored)
        self.lengths: dict[tuple[str, int], int] = {}  # (operator, bin) -> chain length once captured

    def schema_of(self, op: Any) -> tuple[Any, int, HashKind]:
        """What the commit records for operator runtime ``op``."""
        return self.schemas[op.name]

    def restored(self, manifest: Manifest) -> None:
        """The run resumed from ``manifest``: its chains are the base."""
        self.fresh = False
        self.base_manifest, self.last_id = manifest, manifest.id

    def begin(self, store: Any, t: int) -> Any:
        """Start the checkpoint at ``t`` in ``store`` (a fresh one ignores older
        checkpoints) and return its writer."""
        writer = store.begin(t, full=self.fresh)
        if self.fresh:
            self.base_manifest = None
        self.fresh = False
        self.last_id = writer.id
        return writer

    def dropped(self, name: str, index: int) -> None:
        """Bin ``index`` of ``name`` was emptied: the checkpoint drops its chain."""
        self.lengths[name, index] = 0

    def reset(self) -> None:
        """A checkpoint was lost: the next one carries nothing over."""
        self.fresh = True
        self.lengths.clear()

    def wants_snapshot(self, name: str, index: int, full: bool) -> bool:
        """Whether the checkpoint being captured writes bin ``index`` of ``name`` whole:
        it must (``full``: it moved here, or the schema changed), it has no chain, or
        its chain reached ``compact_after`` files.  The chain is counted after every
        checkpoint captured so far, committed or not (the store's head may still lag
        behind checkpoints being written), so the choice does not depend on how fast
        earlier checkpoints commit.  A fresh checkpoint (carrying nothing over) starts
        every chain afresh."""
        key = (name, index)
        n = self.lengths.get(key)
        if n is None:
            head = None if self.fresh else self.base_manifest
            n = len(head.chain(name, index)) if head is not None else 0
        snapshot = full or n == 0 or n >= self.compact_after
        self.lengths[key] = 1 if snapshot else n + 1
        return snapshot
