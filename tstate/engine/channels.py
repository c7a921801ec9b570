"""Channels: how batches move from an output port to the inboxes that consume it.

An edge is either *pipeline* (the batch stays on the producing worker) or *exchange*
(records are routed by key: ``key -> bin -> worker``).  Every batch delivered to an
inbox is one ``+1`` pointstamp at ``(target, time)`` — per batch, never per record —
reported through the target's :class:`~tstate.progress.shared.SharedProgress`.
Batches are shared, not copied, between consumers: operators never mutate a batch.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from tstate.errors import KeyFunctionError
from tstate.keys import KeyRouter
from tstate.migration.routing import Owners
from tstate.progress.shared import SharedProgress

__all__ = ["OutputPort", "ExchangeRouter", "BinAssignment"]


class BinAssignment:
    """A configuration: which worker owns each bin.  Default: ``bin % workers``."""

    __slots__ = ("owners",)

    def __init__(self, owners: Sequence[int]) -> None:
        self.owners = list(owners)

    @classmethod
    def round_robin(cls, bins: int, workers: int) -> "BinAssignment":
        return cls([b % workers for b in range(bins)])

    def owners_at(self, time: Any) -> list[int]:
        """The same owners at every time (:class:`~tstate.migration.routing.Owners`)."""
        return self.owners


class ExchangeRouter:
    """Routes records to workers by ``key(record) -> bin -> owner``.

    ``assignment`` gives the bin owners in force for records at a time
    (:class:`~tstate.migration.routing.Owners`); the default is a fixed
    :class:`BinAssignment` (in front of a stateful operator, migration's
    :class:`~tstate.migration.routing.ConfiguredOwners`, which change over time)."""

    def __init__(
        self,
        key: Callable[[Any], Any],
        workers: int,
        bins: int,
        operator: str,
        assignment: Optional[Owners] = None,
    ) -> None:
        self.key = key
        self.workers = workers
        self.bins = KeyRouter(bins)
        self.operator = operator
        self.assignment: Owners = assignment or BinAssignment.round_robin(bins, workers)

    def owners_at(self, time: Any) -> list[int]:
        """The bin → worker map for records at ``time``."""
        return self.assignment.owners_at(time)

    def split(self, records: list[Any], time: Any) -> list[list[Any]]:
        """Partition ``records`` into one list per worker."""
        parts: list[list[Any]] = [[] for _ in range(self.workers)]
        owners = self.owners_at(time)
        key = self.key
        bin_of = self.bins.bin_uncached
        memo = self.bins._memo
        r: Any = None
        try:
            for r in records:
                k = key(r)
                b = memo.get(k)
                if b is None:
                    b = bin_of(k)
                parts[owners[b]].append(r)
        except KeyFunctionError as exc:
            raise KeyFunctionError(f"operator {self.operator!r}: record {r!r} at time {time!r}: {exc}") from None
        except Exception as exc:
            bad = _first_failing(records, key)
            raise KeyFunctionError(
                f"operator {self.operator!r}: the key function raised {type(exc).__name__}: {exc} "
                f"on record {bad!r} at time {time!r}"
            ) from exc
        return parts


def _first_failing(records: list[Any], key: Callable[[Any], Any]) -> Any:
    for r in records:
        try:
            hash(key(r))
        except Exception:
            return r
    return None  # pragma: no cover


class OutputPort:
    """An operator instance's output: pushes batches to every connected inbox."""

    __slots__ = ("node", "port", "worker", "_dests")

    def __init__(self, node: int, port: int, worker: int) -> None:
        self.node = node
        self.port = port
        self.worker = worker
        # (inboxes per worker, the target's progress, target port, router or None)
        self._dests: list[tuple[list[Any], SharedProgress, int, Optional[ExchangeRouter]]] = []

    def connect(
        self, inboxes: list[Any], target: SharedProgress, port: int, router: Optional[ExchangeRouter]
    ) -> None:
        """Deliver to input ``port`` of the operator whose progress is ``target``
        (``inboxes``: its inbox on each worker), through ``router`` if exchanged."""
        self._dests.append((inboxes, target, port, router))

    def push(self, time: Any, records: list[Any]) -> None:
        """Send one batch at ``time`` (the caller holds a capability for it)."""
        self.push_to(self.worker, time, records)

    def push_to(self, worker: int, time: Any, records: list[Any]) -> None:
        """Send a batch as if produced on ``worker`` (inputs spread data this way)."""
        if not records:
            return
        for inboxes, target, port, router in self._dests:
            if router is None:
                inboxes[worker].append((time, records))
                target.arrived(port, time)
            elif router.workers == 1:
                inboxes[0].append((time, records))
                target.arrived(port, time)
            else:
                for w, part in enumerate(router.split(records, time)):
                    if part:
                        inboxes[w].append((time, part))
                        target.arrived(port, time)
