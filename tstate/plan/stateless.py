"""Stateless operator nodes: ``map``, ``filter``, ``flat_map``, ``inspect``,
``exchange`` and ``concat``.

Each is a pure function of one batch at one time, written once here as
:meth:`Stateless.apply` and called by both engines (the embedded engine's runtimes,
the Spark backend's fused chains).  Outputs keep the input's time.

>>> from tstate.plan.scope import Scope
>>> root = Scope("f")
>>> Map(name="double", scope=root, fn=lambda x: 2 * x).apply(0, [1, 2])
[2, 4]
>>> FlatMap(name="split", scope=root, fn=str.split).apply(0, ["a b", "c"])
['a', 'b', 'c']
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable, Optional

from attrs import field, frozen

from tstate.plan.node import DEFAULT_BINS, KeyFn, Node, Pact, _bins

__all__ = ["Stateless", "Map", "Filter", "FlatMap", "Inspect", "Exchange", "Concat"]


@frozen(kw_only=True, eq=False)
class Stateless(Node):
    """A node whose output batch is a function of its input batch alone."""

    def apply(self, time: Any, records: list[Any]) -> list[Any]:
        """The output batch for ``records`` at ``time`` (at the same time).  The input
        list is never mutated; it may be returned as it is."""
        return records

    def failing_record(self, time: Any, records: list[Any]) -> Any:
        """The first record whose batch of one makes :meth:`apply` raise (for error
        messages after a batch failed), or None."""
        for r in records:
            try:
                self.apply(time, [r])
            except Exception:
                return r
        return None


@frozen(kw_only=True, eq=False)
class Map(Stateless):
    """``fn(record)`` for every record."""

    kind: ClassVar[str] = "map"
    fn: Callable[[Any], Any]

    def apply(self, time: Any, records: list[Any]) -> list[Any]:
        fn = self.fn
        return [fn(r) for r in records]

    def functions(self) -> list[Callable[..., Any]]:
        return [self.fn]


@frozen(kw_only=True, eq=False)
class Filter(Stateless):
    """The records for which ``predicate(record)`` is true."""

    kind: ClassVar[str] = "filter"
    predicate: Callable[[Any], bool]

    def apply(self, time: Any, records: list[Any]) -> list[Any]:
        fn = self.predicate
        return [r for r in records if fn(r)]

    def functions(self) -> list[Callable[..., Any]]:
        return [self.predicate]


@frozen(kw_only=True, eq=False)
class FlatMap(Stateless):
    """The records of the iterable ``fn(record)``, for every record."""

    kind: ClassVar[str] = "flat_map"
    fn: Callable[[Any], Iterable[Any]]

    def apply(self, time: Any, records: list[Any]) -> list[Any]:
        fn = self.fn
        return [x for r in records for x in fn(r)]

    def functions(self) -> list[Callable[..., Any]]:
        return [self.fn]


@frozen(kw_only=True, eq=False)
class Inspect(Stateless):
    """Calls ``fn(time, record)`` for every record; the batch passes unchanged."""

    kind: ClassVar[str] = "inspect"
    fn: Callable[[Any, Any], Any]

    def apply(self, time: Any, records: list[Any]) -> list[Any]:
        fn = self.fn
        for r in records:
            fn(time, r)
        return records

    def functions(self) -> list[Callable[..., Any]]:
        return [self.fn]


@frozen(kw_only=True, eq=False)
class Exchange(Stateless):
    """Routes every record to the owner of ``key(record)``'s bin; the batch passes
    unchanged (the routing is its input's :class:`Pact`)."""

    kind: ClassVar[str] = "exchange"
    key: KeyFn
    bins: int = field(default=DEFAULT_BINS, validator=_bins)

    def pacts(self) -> tuple[Optional[Pact], ...]:
        return (Pact(self.key, self.bins),)

    def functions(self) -> list[Callable[..., Any]]:
        return [self.key]


@frozen(kw_only=True, eq=False)
class Concat(Stateless):
    """Merges ``inputs`` streams of one scope into one."""

    kind: ClassVar[str] = "concat"
    inputs: int = 2

    @property
    def arity(self) -> int:
        return self.inputs
