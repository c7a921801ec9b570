"""Capabilities: the right to produce records at a time on an operator's output.

While an operator holds a capability for time ``t``, the frontier downstream of it
cannot pass ``t``: holding one is a promise "I may still send at ``t``", and **dropping
the last one is what lets time advance**.

- An :class:`InputCapability` comes with every input batch and is valid only while the
  operator is processing that batch (records may be given at its time right away).
- :meth:`InputCapability.retain` / :meth:`InputCapability.delayed` turn it into a
  :class:`Capability` that outlives the activation; :meth:`Capability.downgrade` moves
  one to a later time in place (an earlier time is a :class:`~tstate.errors.ProgressError`);
  :meth:`Capability.drop` releases it, and so does losing the last reference to it (as
  a Rust value is dropped at the end of its scope): keep capabilities you need in the
  operator's state.

>>> import tstate as ts
>>> flow = ts.Dataflow("delay")
>>> nums = flow.input("nums")
>>> @flow.unary_frontier(nums)
... def later(inp, out, ctx):
...     for cap, batch in inp:
...         out.give_many(cap.delayed(cap.time + 10), batch)   # emit 10 epochs later
>>> got = later.collect()
>>> nums.send([1, 2]); nums.close()
>>> flow.run()
>>> got.by_time()
{10: [1, 2]}
"""

from __future__ import annotations

from typing import Any, Protocol

from tstate.errors import ProgressError
from tstate.progress.timestamp import less_equal

__all__ = ["Capability", "InputCapability", "Holder"]


class Holder(Protocol):
    """The operator instance a capability belongs to (every operator runtime of
    :mod:`tstate.operators`): it counts the capabilities it holds."""

    name: str

    def _capability_acquired(self, cap: "Capability") -> None: ...

    def _capability_released(self, cap: "Capability") -> None: ...

    def _capability_moved(self, cap: "Capability", old: Any, new: Any) -> None: ...


class Capability:
    """A held capability for ``time`` on output ``port`` of an operator instance."""

    __slots__ = ("_op", "_port", "_time", "_valid")

    def __init__(self, op: Holder, port: int, time: Any) -> None:
        self._op = op
        self._port = port
        self._time = time
        self._valid = True
        op._capability_acquired(self)

    @property
    def time(self) -> Any:
        """The time this capability allows output at."""
        return self._time

    @property
    def port(self) -> int:
        return self._port

    @property
    def valid(self) -> bool:
        """False once dropped."""
        return self._valid

    def _check(self) -> None:
        if not self._valid:
            raise ProgressError(f"operator {self._op.name!r}: use of a dropped capability for time {self._time!r}")

    def delayed(self, time: Any) -> "Capability":
        """A new capability for a later (or equal) ``time``; this one is kept."""
        self._check()
        if not less_equal(self._time, time):
            raise ProgressError(
                f"operator {self._op.name!r}: cannot delay a capability for {self._time!r} to the earlier time {time!r}"
            )
        return Capability(self._op, self._port, time)

    def retain(self) -> "Capability":
        """A clone of this capability (both must be dropped for time to pass)."""
        return self.delayed(self._time)

    def downgrade(self, time: Any) -> None:
        """Move this capability to a later ``time`` in place."""
        self._check()
        if not less_equal(self._time, time):
            raise ProgressError(
                f"operator {self._op.name!r}: cannot downgrade a capability for {self._time!r} "
                f"to the earlier time {time!r}"
            )
        if time != self._time:
            self._op._capability_moved(self, self._time, time)
            self._time = time

    def drop(self) -> None:
        """Release the capability (idempotent)."""
        if self._valid:
            self._valid = False
            self._op._capability_released(self)

    def __del__(self) -> None:
        # Like Timely's Rust capabilities, one that is no longer referenced is dropped.
        if self._valid:
            try:
                self.drop()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def __repr__(self) -> str:
        state = "" if self._valid else ", dropped"
        return f"Capability(time={self._time!r}, port={self._port}{state})"


class InputCapability:
    """The capability that comes with an input batch; valid during its activation."""

    __slots__ = ("_op", "_time", "_valid")

    def __init__(self, op: Holder, time: Any) -> None:
        self._op = op
        self._time = time
        self._valid = True

    @property
    def time(self) -> Any:
        return self._time

    def _check(self) -> None:
        if not self._valid:
            raise ProgressError(
                f"operator {self._op.name!r}: the input capability for time {self._time!r} was used after its "
                "activation ended; call retain() to keep it"
            )

    def delayed(self, time: Any, port: int = 0) -> Capability:
        """A :class:`Capability` for ``time >= self.time`` on output ``port``."""
        self._check()
        if not less_equal(self._time, time):
            raise ProgressError(
                f"operator {self._op.name!r}: cannot delay a capability for {self._time!r} to the earlier time {time!r}"
            )
        return Capability(self._op, port, time)

    def retain(self, port: int = 0) -> Capability:
        """A :class:`Capability` for this batch's time that outlives the activation."""
        return self.delayed(self._time, port)

    def __repr__(self) -> str:
        return f"InputCapability(time={self._time!r})"
