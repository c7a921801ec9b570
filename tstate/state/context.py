"""``Context``: what a stateful function sees besides its state and record.

>>> import tstate as ts
>>> flow = ts.Dataflow("ctx")
>>> nums = flow.input("nums")
>>> @flow.stateful(nums, key=lambda x: x % 2, state=int)
... def running(total: int, x: int, ctx: ts.Context) -> int:
...     ctx.emit((ctx.key, total + x))       # emitted at ctx.time
...     return total + x                     # a returned value replaces the state
>>> out = running.collect()
>>> nums.send([1, 2, 3]); nums.close()
>>> flow.run()
>>> sorted(out.records())
[(0, 2), (1, 1), (1, 4)]
"""

from __future__ import annotations

from typing import Any, Protocol

from tstate.errors import ProgressError
from tstate.progress.timestamp import less_equal

__all__ = ["Context", "KeyedOperator"]


class KeyedOperator(Protocol):
    """The operator instance a :class:`Context` serves (the stateful runtime of
    :mod:`tstate.operators.stateful`), as the context needs it."""

    name: str
    worker: int

    @property
    def workers(self) -> int:
        """How many workers the operator runs on."""
        ...

    def _add_timer(self, key: Any, time: Any) -> None: ...

    def clear_key(self, key: Any) -> None: ...


class Context:
    """Per-call context of a stateful function (one object, reused; do not keep it).

    - ``ctx.time``: the time of the record (or of the timer) being processed;
    - ``ctx.key``: its key;
    - ``ctx.emit(x)``: output ``x`` at ``ctx.time``;
    - ``ctx.notify_at(t)``: a timer for this key at ``t >= ctx.time``; it fires (calling
      the ``on_notify`` handler with this key's state) once the input frontier passed
      ``t``, i.e. after every record at ``t`` and before any later one -- a tumbling
      window ``[start, start + width)`` sets it at ``start + width - 1`` (see
      :meth:`notify_at`); timers fire in time order, once per (key, time), and survive
      checkpoints and migration.  Inside ``on_notify`` the timer must be *later* than
      the one firing (``t > ctx.time``): re-arming a timer at its own time is refused
      with a :class:`~tstate.errors.ProgressError` (it would fire again and again at
      one time; set it at a later time);
    - ``ctx.clear()``: drop this key's state (a value returned by the call is discarded;
      timers stay);
    - ``ctx.worker`` / ``ctx.workers``."""

    __slots__ = ("_op", "time", "key", "_out", "_cleared", "_firing")

    def __init__(self, op: KeyedOperator) -> None:
        self._op = op
        self.time: Any = None
        self.key: Any = None
        self._out: list[Any] = []
        self._cleared = False
        self._firing = False  # inside on_notify: the timer at ``time`` is firing

    def emit(self, record: Any) -> None:
        """Send ``record`` downstream at ``ctx.time``."""
        self._out.append(record)

    def notify_at(self, time: Any) -> None:
        """Set a timer for the current key at ``time`` (``>= ctx.time``; inside
        ``on_notify``, ``> ctx.time``: a timer fires once per key and time).

        **When it fires.**  Once the input frontier has passed ``time``: *after every
        record at* ``time`` has been applied to the key, and before any record at a
        later time is.  So for a tumbling window ``[start, start + width)`` of epochs,
        put the timer at the window's **last** epoch, ``start + width - 1``: it fires
        after the window's last records and before the next window's first.  (A timer
        at ``start + width`` would fire only after the records at ``start + width`` --
        the next window's first -- were applied.)  The handler runs at that time, so
        what it emits is at ``start + width - 1``.

        >>> import tstate as ts
        >>> flow = ts.Dataflow("windows")
        >>> events = flow.input("events")
        >>> WIDTH = 3                                  # windows [0, 3), [3, 6), ...
        >>> @flow.stateful(events, key=lambda e: e, state=int)
        ... def count(n: int, e: str, ctx: ts.Context) -> int:
        ...     start = ctx.time - ctx.time % WIDTH
        ...     ctx.notify_at(start + WIDTH - 1)       # the window's last epoch
        ...     return n + 1
        >>> @count.on_notify
        ... def close(n: int, time: int, ctx: ts.Context) -> int:
        ...     ctx.emit((ctx.key, time - WIDTH + 1, n))   # (key, window start, count)
        ...     return 0                               # the next window starts from 0
        >>> out = count.collect()
        >>> for t in range(5):
        ...     events.advance_to(t); events.send(["x"] * (t + 1))
        >>> events.close(); flow.run()
        >>> out.by_time()                               # 1+2+3 in [0, 3), 4+5 in [3, 6)
        {2: [('x', 0, 6)], 5: [('x', 3, 9)]}
        """
        if not less_equal(self.time, time):
            raise ProgressError(
                f"operator {self._op.name!r}: timer at {time!r} for key {self.key!r} is before the current time {self.time!r}"
            )
        if self._firing and time == self.time:
            raise ProgressError(
                f"operator {self._op.name!r}: on_notify for key {self.key!r} at time {time!r} set a timer at that same "
                "time; a timer fires once per key and time, so it would fire again and again: set it at a later time"
            )
        self._op._add_timer(self.key, time)

    def clear(self) -> None:
        """Drop the current key's state: a value the call returns is discarded, and the
        key's next record starts from a fresh state.  Its timers stay."""
        if not self._cleared:
            self._cleared = True
            self._op.clear_key(self.key)

    @property
    def worker(self) -> int:
        return self._op.worker

    @property
    def workers(self) -> int:
        return self._op.workers
