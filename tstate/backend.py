"""The engine interface: :class:`Backend`, what both engines implement.

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
>>> engine = embedded(workers=2)
>>> isinstance(engine, Backend)
True
>>> flow.run(engine)
>>> sorted(out.records()), engine.checkpoints is None, engine.metrics.late
([2, 4], True, 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence, runtime_checkable

from tstate.engine.embedded import Embedded
from tstate.plan.graph import Planned

if TYPE_CHECKING:  # pragma: no cover
    from tstate.checkpoint.store import CheckpointStore
    from tstate.metrics import Metrics

__all__ = ["Backend", "Embedded", "embedded"]


@runtime_checkable
class Backend(Protocol):
    """An engine that runs a dataflow's plan (see the module docstring)."""

    def run(self, flow: Planned, /, *, reconfigure: Sequence[tuple[int, Any]] = ()) -> None:
        """Run ``flow`` to completion.  ``reconfigure``: ``(time, command)`` pairs
        (:mod:`tstate.migration.commands`), applied from ``time`` on."""
        ...

    def start(self, flow: Planned, /) -> Any:
        """Start ``flow`` and return a handle to drive or watch it (the embedded
        engine's :class:`~tstate.engine.execution.Execution`, Spark's
        ``StreamingQuery``)."""
        ...

    def rescale(self, workers: int, /) -> Any:
        """Spread the keyed state over ``workers`` workers (Spark: partitions)."""
        ...

    def state(self, op: Any, /) -> Any:
        """The state of stateful operator ``op`` (the embedded engine: a consistent
        snapshot as an Arrow table; Spark: a DataFrame of the committed state)."""
        ...

    @property
    def metrics(self) -> "Metrics":
        """What the engine measured (:class:`~tstate.metrics.Metrics`)."""
        ...

    @property
    def checkpoints(self) -> "Optional[CheckpointStore]":
        """The checkpoint store the engine writes (None: no checkpoints)."""
        ...


def embedded(workers: int = 1, max_workers: Optional[int] = None, checkpoint: Any = None) -> Embedded:
    """The embedded engine on ``workers`` logical workers
    (:class:`tstate.engine.embedded.Embedded`)."""
    return Embedded(workers, max_workers, checkpoint=checkpoint)


if TYPE_CHECKING:  # pragma: no cover - mypy checks that both engines implement the protocol

    def _embedded_is_a_backend(engine: Embedded) -> Backend:
        return engine
