"""An input fed from Python: the :class:`InputHandle` behind ``flow.input(...)``.

The handle is the input's state, shared by the builder (``InputStream.send``,
``advance_to``, ``close``) and the engine running it: the current epoch, whether it is
closed, and the batches sent but not yet taken.  What it checks, naming the input
(:class:`~tstate.errors.InputError`): times are ``int`` epochs (numpy integers are
taken as ints; ``2.5``, ``"7"`` or a tuple are refused), and ``send`` takes a batch --
an iterable of records -- so a ``str``, ``bytes`` or ``dict`` is refused rather than
split into characters or keys.

>>> h = InputHandle("nums", batch_size=100)
>>> h.send([1, 2]); h.advance_to(3); h.send([4])
>>> h.queue, h.time
([(0, [1, 2]), (3, [4])], 3)
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Optional, Protocol

from tstate.errors import InputClosedError, InputError, ProgressError
from tstate.progress.timestamp import TIME_MAX, less_equal

__all__ = ["InputHandle", "Activation"]


class Activation(Protocol):
    """What a handle wakes when something is sent: the running input operator."""

    def request_activation(self) -> None: ...


class InputHandle:
    """The state of one input (see the module docstring)."""

    def __init__(self, name: str, batch_size: int) -> None:
        self.name = name
        self.batch_size = batch_size
        self.time: Any = 0
        self.closed = False
        self.queue: list[tuple[Any, list[Any]]] = []
        self.runtime: Optional[Activation] = None  # the live input operator, when running

    def _epoch(self, time: Any, what: str) -> int:
        """``time`` as an input's time: an ``int`` epoch (numpy integers too), else
        :class:`~tstate.errors.InputError` naming the input."""
        if type(time) is int:
            t = time
        elif isinstance(time, numbers.Integral) and not isinstance(time, bool):
            t = int(time)
        else:
            raise InputError(
                f"input {self.name!r}: {what}({time!r}): an input's times are int epochs, "
                f"not {type(time).__name__} (round or convert it: e.g. int(t))"
            )
        if t > TIME_MAX:
            raise InputError(f"input {self.name!r}: {what}({time!r}): a time is at most {TIME_MAX}")
        return t

    def send(self, records: Iterable[Any], time: Any = None) -> None:
        """Queue ``records`` at the current epoch (or at ``time >=`` it)."""
        if self.closed:
            raise InputClosedError(f"input {self.name!r}: send after close")
        if isinstance(records, (str, bytes, bytearray, memoryview, Mapping)):
            raise InputError(
                f"input {self.name!r}: send({_short(records)}): a {type(records).__name__} is not a batch of "
                f"records; send a list of records (send([x]) for one record)"
            )
        if time is not None:
            time = self._epoch(time, "send at time")
        t = self.time if time is None else time
        if time is not None and not less_equal(self.time, time):
            raise ProgressError(f"input {self.name!r}: cannot send at time {time!r}, the input is at {self.time!r}")
        try:
            recs = records if isinstance(records, list) else list(records)
        except TypeError:
            raise InputError(
                f"input {self.name!r}: send({_short(records)}): a {type(records).__name__} is not a batch of "
                "records (an iterable of records)"
            ) from None
        if recs:
            self.queue.append((t, recs))
            if self.runtime is not None:
                self.runtime.request_activation()

    def advance_to(self, time: Any) -> None:
        """Promise no more records before ``time`` (backwards: :class:`ProgressError`)."""
        if self.closed:
            raise InputClosedError(f"input {self.name!r}: advance_to({time!r}) after close")
        time = self._epoch(time, "advance_to")
        if not less_equal(self.time, time):
            raise ProgressError(f"input {self.name!r}: cannot advance backwards from {self.time!r} to {time!r}")
        self.time = time
        if self.runtime is not None:
            self.runtime.request_activation()

    def close(self) -> None:
        """Promise no more records at all (idempotent)."""
        if not self.closed:
            self.closed = True
            if self.runtime is not None:
                self.runtime.request_activation()


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."
