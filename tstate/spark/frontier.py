"""Frontier operators fused into a Spark task's stateless chain.

On Spark a ``unary_frontier`` / ``binary_frontier`` operator runs where its input
records are, inside the task that produced them (like ``map``), one activation per
``(time, batch)`` that reaches it.  That is exact for the operators that keep nothing
between activations -- the common "re-time records" kind: give a record at its own time,
or at a later time through ``cap.delayed(t)`` (a sliding window's expiry, a loop
entrance's round) -- because such an operator's output depends only on the batch and
its time.  Records given at a time the micro-batch has not reached are *held* by the
driver until a later batch reaches it (see :mod:`tstate.spark.backend`).

What cannot be lowered is refused with :class:`~tstate.errors.SparkError` naming the
operator: per-worker ``state=``, an ``exchange=`` key (when the plan is built),
notifications, reading an input's frontier, and a capability kept beyond the activation
(the operator would be holding back time across micro-batches, which needs state that
survives a task: keep such state in ``@flow.stateful``, whose bins Spark checkpoints).

>>> def shift(inp, out, ctx):
...     for cap, batch in inp:
...         out.give_many(cap.delayed(cap.time + 10), batch)
>>> FusedFrontier("shift", shift, 1).run(0, 5, ["a", "b"])
{15: ['a', 'b']}
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

from tstate.errors import ProgressError, SparkError
from tstate.progress.timestamp import less_equal

__all__ = ["FusedFrontier"]


class _Cap:
    """A capability for the duration of one activation."""

    __slots__ = ("time", "_op", "_held")

    def __init__(self, op: "FusedFrontier", time: Any) -> None:
        self.time = time
        self._op = op
        self._held = False

    def delayed(self, time: Any) -> "_Cap":
        if not less_equal(self.time, time):
            raise ProgressError(f"operator {self._op.name!r}: cannot delay a capability at {self.time!r} to {time!r}")
        return _Cap(self._op, time)

    def retain(self) -> "_Cap":
        c = _Cap(self._op, self.time)
        c._held = True
        self._op._retained.append(c)
        return c

    def downgrade(self, time: Any) -> None:
        if not less_equal(self.time, time):
            raise ProgressError(f"operator {self._op.name!r}: cannot downgrade a capability at {self.time!r} to {time!r}")
        self.time = time

    def drop(self) -> None:
        self._held = False

    def __repr__(self) -> str:
        return f"Capability({self.time!r})"


class _Input:
    def __init__(self, op: "FusedFrontier", items: list[tuple[Any, list[Any]]]) -> None:
        self._op = op
        self._items = items

    def __iter__(self) -> Iterator[tuple[_Cap, list[Any]]]:
        items, self._items = self._items, []
        for t, batch in items:
            yield _Cap(self._op, t), batch

    @property
    def frontier(self) -> Any:
        raise SparkError(
            f"operator {self._op.name!r} reads its input frontier, which a fused frontier operator on Spark does not "
            "have; keep state that waits for time in @flow.stateful (timers)"
        )


class _Output:
    def __init__(self, op: "FusedFrontier") -> None:
        self._op = op
        self.given: dict[Any, list[Any]] = {}

    def _time(self, cap: Any) -> Any:
        if not isinstance(cap, _Cap):
            raise SparkError(f"operator {self._op.name!r}: records must be given at a capability, got {cap!r}")
        return cap.time

    def give(self, cap: Any, record: Any) -> None:
        self.given.setdefault(self._time(cap), []).append(record)

    def give_many(self, cap: Any, records: Iterable[Any]) -> None:
        lst = self.given.setdefault(self._time(cap), [])
        lst.extend(records)


class _Context:
    def __init__(self, op: "FusedFrontier") -> None:
        self._op = op
        self.state = None

    @property
    def worker(self) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.partitionId() if ctx is not None else 0

    @property
    def workers(self) -> int:
        return self._op.workers

    @property
    def name(self) -> str:
        return self._op.name

    def notify_at(self, at: Any) -> None:
        raise SparkError(
            f"operator {self._op.name!r} asks for a notification at {at!r}: on Spark a frontier operator runs fused, "
            "without notifications; use a @flow.stateful operator's timers (ctx.notify_at)"
        )

    def notifications(self) -> Iterator[Any]:
        return iter(())

    def activate(self) -> None:
        pass


class FusedFrontier:
    """One frontier operator's logic, called per ``(port, time, batch)``."""

    def __init__(self, name: str, logic: Callable[..., Any], inputs: int, workers: int = 1) -> None:
        self.name = name
        self.logic = logic
        self.inputs = inputs
        self.workers = workers
        self._retained: list[_Cap] = []

    def run(self, port: int, time: Any, records: list[Any]) -> dict[Any, list[Any]]:
        """One activation with ``records`` at ``time`` on input ``port``; returns the
        records given, by time.  A user error becomes an
        :class:`~tstate.errors.OperatorError` naming the operator and time."""
        from tstate.errors import OperatorError, TstateError

        ports = [_Input(self, [(time, records)] if p == port else []) for p in range(self.inputs)]
        out = _Output(self)
        self._retained = []
        try:
            self.logic(*ports, out, _Context(self))
        except TstateError:
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {self.name!r} (frontier operator) at time {time!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        kept: Optional[_Cap] = next((c for c in self._retained if c._held), None)
        if kept is not None:
            raise SparkError(
                f"operator {self.name!r} keeps a capability at {kept.time!r} beyond its activation: on Spark a "
                "frontier operator cannot hold time back across micro-batches; keep such state in @flow.stateful"
            )
        return out.given
