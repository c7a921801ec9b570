"""Running a built dataflow: :class:`Runner`, the part of a
:class:`~tstate.dataflow.Dataflow` that runs it, apart from the part that builds it.

A dataflow runs on a :class:`~tstate.backend.Backend`: the embedded engine (given a
worker count, it is made here: :class:`tstate.engine.embedded.Embedded`, imported only
now -- building a dataflow loads no engine) or one given (e.g.
:class:`tstate.spark.Backend`).  The runner keeps the backend of the current (or last)
run: what the dataflow's ``backend``, ``execution``, ``metrics`` and ``state`` read, and
what tells the builder that the dataflow has started (no operator may be added then).

>>> import tstate as ts
>>> flow = ts.Dataflow("r")
>>> nums = flow.input("nums")
>>> out = nums.map(lambda x: x + 1).collect()
>>> nums.send([1]); nums.close()
>>> runner = Runner(flow)
>>> runner.started, runner.run(2), runner.started, out.records()
(False, None, True, [2])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from tstate.backend import Backend
from tstate.errors import ConfigurationError, GraphError
from tstate.metrics import Metrics
from tstate.plan.graph import Planned
from tstate.state.query import StateFormat, point_read, snapshot

if TYPE_CHECKING:  # pragma: no cover
    from tstate.engine.execution import Execution

__all__ = ["Runner"]


class Runner:
    """Runs ``flow`` (see the module docstring; :class:`~tstate.dataflow.Dataflow`'s
    ``start``, ``run``, ``state`` and ``read`` say what each does)."""

    def __init__(self, flow: Planned) -> None:
        self.flow = flow
        #: the backend of the current (or last) run (None: not started)
        self.backend: Optional[Backend] = None

    @property
    def started(self) -> bool:
        """Whether the dataflow has started (on any backend)."""
        return self.backend is not None

    def start(
        self,
        workers: int,
        max_workers: Optional[int],
        reconfigure: Sequence[tuple[int, Any]],
        checkpoint: Any,
        state: Any = None,
    ) -> "Execution":
        """An execution on the embedded engine, started (see ``Dataflow.start``)."""
        from tstate.engine.embedded import Embedded  # the engine is loaded to run, not to build

        self.check_not_running()
        engine = Embedded(workers, max_workers, checkpoint=checkpoint, state=state)
        if isinstance(self.backend, Embedded) and self.backend.execution is not None:
            self.backend.execution.close()  # the last run's RocksDB stores, if any
        self.backend = engine
        return engine.start(self.flow, reconfigure=reconfigure)

    def run(
        self,
        workers: "int | Backend" = 1,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        checkpoint: Any = None,
        state: Any = None,
    ) -> None:
        """Run to completion on ``workers`` embedded workers or on a backend (see
        ``Dataflow.run``)."""
        if isinstance(workers, Backend):
            if state is not None:
                raise ConfigurationError(
                    f"flow.run({workers!r}, state={state!r}): keyed state in RocksDB is not supported on Spark yet "
                    "(nor on any backend given here): run on the embedded engine, flow.run(workers, state=...) "
                    "or Embedded(workers, state=...)"
                )
            given = [n for n, v in (("max_workers", max_workers), ("checkpoint", checkpoint)) if v is not None]
            if given:
                raise ConfigurationError(
                    f"flow.run({workers!r}, {'=..., '.join(given)}=...): a backend takes its own settings; "
                    "give them when making it"
                )
            self.check_not_running()
            self.backend = workers
            workers.run(self.flow, reconfigure=reconfigure)
            return
        if not isinstance(workers, int) or isinstance(workers, bool):
            raise ConfigurationError(f"workers must be an integer >= 1 or a Backend, got {workers!r}")
        self.start(workers, max_workers, reconfigure, checkpoint, state).run()

    def check_not_running(self) -> None:
        """A :class:`~tstate.errors.GraphError` if an execution is under way."""
        ex = self.execution
        if ex is not None and not ex.finished:
            raise GraphError(f"dataflow {self.flow.name!r} is already running")

    @property
    def execution(self) -> Optional["Execution"]:
        """The current (or last) execution on the embedded engine."""
        if self.backend is None:
            return None
        from tstate.engine.embedded import Embedded  # loaded already if it ran this dataflow

        return self.backend.execution if isinstance(self.backend, Embedded) else None

    @property
    def metrics(self) -> Metrics:
        """The current (or last) run's metrics, whichever backend ran it (empty before)."""
        return self.backend.metrics if self.backend is not None else Metrics()

    def state(self, op: Any, at: Any = None, format: StateFormat = "arrow") -> Any:
        """Stateful operator ``op``'s state (see ``Dataflow.state``)."""
        ex = self.execution
        if ex is not None:
            return snapshot(ex, op, at=at, format=format)
        if self.backend is None:
            raise GraphError(f"dataflow {self.flow.name!r} has not started: there is no state yet")
        if at is not None or format != "arrow":
            raise ConfigurationError(
                f"dataflow {self.flow.name!r}: state(at=..., format=...) reads the embedded engine's state; "
                f"{self.backend!r} gives its state as it is: flow.state(op)"
            )
        return self.backend.state(op)

    def read(self, op: Any, key: Any) -> Any:
        """A copy of ``key``'s current state in stateful operator ``op`` (see
        ``Dataflow.read``)."""
        ex = self.execution
        if ex is None:
            raise GraphError(f"dataflow {self.flow.name!r} has not run on the embedded engine: there is no state to read")
        return point_read(ex, op, key)
