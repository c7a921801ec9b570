"""The engine contract: :class:`Backend`, what both engines implement, its result types
(:class:`Started`, :class:`StateView`, :class:`Rescaled`) and the migration
:data:`Strategy` -- a module that imports no engine
(``import tstate.dataflow`` loads none; ``flow.run`` imports the embedded engine when
it runs it).

A dataflow is built once (:mod:`tstate.dataflow` makes a :class:`tstate.plan.Graph`)
and run by a backend, which lowers the plan its own way:

- the **embedded engine** (:class:`tstate.engine.embedded.Embedded`): N logical workers
  in this process, deterministic -- what ``flow.run(workers=4)`` uses;
- the **Spark backend** (:class:`tstate.spark.Backend`): PySpark micro-batches.

Both take a checkpoint the same way -- ``checkpoint="dir"`` (or an object-store URL), or
a :class:`~tstate.checkpoint.settings.Checkpoints` with its settings -- and report
their metrics as one type, :class:`~tstate.metrics.Metrics`.  ``flow.run(backend)``
runs the dataflow on any of them; so does ``backend.run(flow)``.

>>> import tstate as ts
>>> flow = ts.Dataflow("doubling")
>>> nums = flow.input("nums")
>>> out = nums.map(lambda x: 2 * x).collect()
>>> nums.send([1, 2]); nums.close()
>>> engine = ts.Embedded(workers=2)
>>> isinstance(engine, Backend)
True
>>> flow.run(engine)
>>> sorted(out.records()), engine.checkpoints is None, engine.metrics.late
([2, 4], True, 0)
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Protocol, Sequence, get_args, runtime_checkable

from attrs import frozen

from tstate.errors import ConfigurationError
from tstate.plan.graph import Planned

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.checkpoint.store import CheckpointStore
    from tstate.metrics import Metrics

__all__ = [
    "Backend", "Started", "StateView", "Rescaled", "Strategy", "STRATEGIES", "DEFAULT_STRATEGY", "check_strategy"
]

#: How bins move when an engine rescales (:mod:`tstate.migration.commands` says what
#: each does): one step, one bin a step, Megaphone's batched steps, or Rhino-style
#: pre-copy.  Both engines take every one.
Strategy = Literal["all-at-once", "fluid", "batched", "precopy"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
#: the strategy both engines' ``rescale`` (and :class:`~tstate.migration.commands.Rescale`) use by default
DEFAULT_STRATEGY: Strategy = "batched"


def check_strategy(value: object) -> Strategy:
    """``value`` as a :data:`Strategy`, or a :class:`~tstate.errors.ConfigurationError`
    naming the choices."""
    if value not in STRATEGIES:
        raise ConfigurationError(f"unknown migration strategy {value!r}: use one of {', '.join(STRATEGIES)}")
    return value  # type: ignore[return-value]


@frozen
class Rescaled:
    """What :meth:`Backend.rescale` set under way, the same on both engines.

    ``steps`` is how many steps the move takes (0: no bin moves); ``schedule`` says,
    per stateful operator whose bins move, when each of its steps takes effect -- a
    logical time on the embedded engine; on Spark, the micro-batch counted from the
    next one (0: the next batch).

    >>> r = Rescaled(4, "batched", 2, {"counts": (3, 4)})
    >>> r.steps, r.schedule["counts"]
    (2, (3, 4))
    """

    workers: int
    strategy: Strategy
    steps: int
    schedule: Mapping[str, tuple[int, ...]]

    # -- the former results, deprecated ---------------------------------------------
    def __getitem__(self, operator: str) -> list[int]:
        """Deprecated: the embedded engine's former ``dict`` result (operator -> step
        times); use :attr:`schedule`."""
        warnings.warn("rescale(...)[operator] is rescale(...).schedule[operator]", DeprecationWarning, stacklevel=2)
        return list(self.schedule[operator])

    def __index__(self) -> int:
        """Deprecated: Spark's former ``int`` result (the batches the move takes); use
        :attr:`steps`."""
        warnings.warn("int(rescale(...)) is rescale(...).steps", DeprecationWarning, stacklevel=2)
        return self.steps

    __int__ = __index__


@runtime_checkable
class Started(Protocol):
    """What :meth:`Backend.start` returns on both engines: a run under way, to watch,
    wait for or stop.  The embedded engine's is its
    :class:`~tstate.engine.execution.Execution` (driven by its caller: ``step()``,
    ``run()``); Spark's wraps the ``StreamingQuery`` (:attr:`query`), which runs by
    itself."""

    @property
    def name(self) -> str:
        """The dataflow's name."""
        ...

    @property
    def finished(self) -> bool:
        """Whether the run is over: every input closed and processed, or stopped."""
        ...

    @property
    def metrics(self) -> "Metrics":
        """What the run measured so far (:class:`~tstate.metrics.Metrics`)."""
        ...

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Until the run is over or ``timeout`` seconds passed; True if it is over.  A
        run that failed raises its error here.  (The embedded engine runs in the
        caller's thread: waiting steps it, and an input still open when nothing else can
        happen is a :class:`~tstate.errors.CapabilityLeakError`, never a hang.)"""
        ...

    def stop(self) -> None:
        """Stop the run: nothing more is processed; what was committed stays (a later
        run on the same checkpoint resumes from it)."""
        ...


@runtime_checkable
class StateView(Protocol):
    """What :meth:`Backend.state` returns on both engines: one stateful operator's
    state, as rows with the same columns on both -- the key (``key``, or ``key_0``,
    ``key_1``... for a tuple key), then one column per field of a struct state
    (``value`` for any other state type), as :func:`tstate.types.arrow.to_arrow` makes
    them.  The embedded engine's is a consistent snapshot held in memory; Spark's reads
    the committed bins when asked (its ``frame`` is the DataFrame)."""

    @property
    def operator(self) -> str:
        """The stateful operator's name."""
        ...

    @property
    def column_names(self) -> list[str]:
        """The columns, key first."""
        ...

    @property
    def num_rows(self) -> int:
        """How many keys have state."""
        ...

    def to_arrow(self) -> "pa.Table":
        """The rows as an Arrow table."""
        ...

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as dicts (a struct column's value is a dict)."""
        ...

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame."""
        ...


@runtime_checkable
class Backend(Protocol):
    """An engine that runs a dataflow's plan (see the module docstring)."""

    def run(self, flow: Planned, /, *, reconfigure: Sequence[tuple[int, Any]] = ()) -> None:
        """Run ``flow`` to completion.  ``reconfigure``: ``(time, command)`` pairs
        (:mod:`tstate.migration.commands`), applied from ``time`` on."""
        ...

    def start(self, flow: Planned, /) -> Started:
        """Start ``flow`` and return the run under way (:class:`Started`)."""
        ...

    def rescale(self, workers: int, /, strategy: Strategy = DEFAULT_STRATEGY) -> Rescaled:
        """Spread the keyed state over ``workers`` workers (Spark: partitions), moving
        bins per ``strategy``; says what it set under way."""
        ...

    def state(self, op: Any, /) -> StateView:
        """The state of stateful operator ``op`` (:class:`StateView`; the embedded
        engine: a consistent snapshot; Spark: the state of the last committed batch)."""
        ...

    @property
    def metrics(self) -> "Metrics":
        """What the engine measured (:class:`~tstate.metrics.Metrics`)."""
        ...

    @property
    def checkpoints(self) -> "Optional[CheckpointStore]":
        """The checkpoint store the engine writes (None: no checkpoints)."""
        ...
