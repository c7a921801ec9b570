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

__all__ = ["Runner", "Runs"]


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
            given = [
                n for n, v in (("max_workers", max_workers), ("checkpoint", checkpoint), ("state", state)) if v is not None
            ]
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

    def state(self, op: Any, at: Any = None, format: Optional[StateFormat] = None) -> Any:
        """Stateful operator ``op``'s state (see ``Dataflow.state``)."""
        ex = self.execution
        if ex is not None:
            return snapshot(ex, op, at=at, format=format)
        if self.backend is None:
            raise GraphError(f"dataflow {self.flow.name!r} has not started: there is no state yet")
        if at is not None or format == "dict":
            raise ConfigurationError(
                f"dataflow {self.flow.name!r}: state(at=..., format='dict') reads the embedded engine's state; "
                f"{self.backend!r} gives its committed state: flow.state(op) (format None, 'arrow' or 'pandas')"
            )
        view = self.backend.state(op)
        return view if format is None else view.to_arrow() if format == "arrow" else view.to_pandas()

    def read(self, op: Any, key: Any) -> Any:
        """A copy of ``key``'s current state in stateful operator ``op`` (see
        ``Dataflow.read``)."""
        ex = self.execution
        if ex is None:
            raise GraphError(f"dataflow {self.flow.name!r} has not run on the embedded engine: there is no state to read")
        return point_read(ex, op, key)


class Runs:
    """The running half of :class:`~tstate.dataflow.Dataflow`'s API (a base class of
    it): each method hands over to the dataflow's :class:`Runner` (``_runner``); the
    building half never runs anything."""

    _runner: Runner

    def start(
        self,
        workers: int = 1,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        checkpoint: Any = None,
        state: Any = None,
    ) -> "Execution":
        """Build and start an execution on the embedded engine with ``workers`` logical
        workers; drive it with :meth:`Execution.step` / :meth:`Execution.run`.

        ``max_workers`` sizes the worker pool live rescaling can use (default: enough
        for ``reconfigure``).  ``reconfigure`` lists ``(time, command)`` pairs
        (:class:`~tstate.migration.commands.Rescale`, ``MoveBins``, ``Assign``).
        ``checkpoint`` is a directory or a :class:`~tstate.checkpoint.settings.Checkpoints`:
        the execution resumes from its latest committed checkpoint (if any, onto any
        number of workers; ``execution.restored`` says from where) and writes new ones.
        ``state`` is where workers keep keyed state: the heap (None, the default) or
        :class:`tstate.RocksDB` ``(path, cache_bytes=...)``, an embedded RocksDB per worker
        under ``path`` with a bounded cache of decoded states (everything the state API
        offers works the same; checkpoints and restores are the databases' SST files,
        migrations move a bin as an SST file; the databases are removed when the next run
        starts)."""
        return self._runner.start(workers, max_workers, reconfigure, checkpoint, state)

    def run(
        self,
        workers: "int | Backend" = 1,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        checkpoint: Any = None,
        state: Any = None,
    ) -> None:
        """Run the dataflow to completion on ``workers`` logical workers of the embedded
        engine (see :meth:`start` for ``max_workers``, ``reconfigure`` and
        ``checkpoint``), or on a :class:`~tstate.backend.Backend` given instead of a
        worker count -- e.g. :class:`tstate.spark.Backend`, whose ``sources`` bind
        DataFrames to the inputs (give it its own ``checkpoint``; ``max_workers`` and
        ``checkpoint`` here are for the embedded engine only; so is ``state``, a
        :class:`~tstate.errors.ConfigurationError` with a backend).  The backend stays
        available as :attr:`backend`, with its :attr:`metrics` (and the embedded
        engine's execution as :attr:`execution`).

        Every input must be closed by the end (an input still open when nothing else
        can happen is an error, never a hang)."""
        self._runner.run(workers, max_workers, reconfigure, checkpoint, state)

    @property
    def backend(self) -> "Optional[Backend]":
        """The backend of the current (or last) run."""
        return self._runner.backend

    @property
    def execution(self) -> Optional["Execution"]:
        """The current (or last) execution on the embedded engine."""
        return self._runner.execution

    @property
    def metrics(self) -> Metrics:
        """The current (or last) run's metrics, whichever backend ran it (empty before)."""
        return self._runner.metrics

    def state(self, op: Any, at: Any = None, format: Optional[StateFormat] = None) -> Any:
        """The state of stateful operator ``op`` after (or during) a run, by default as
        the :class:`~tstate.backend.StateView` its backend gives (on the embedded engine
        a consistent snapshot: see :func:`tstate.state.query.snapshot` for ``at`` and
        ``format``; on Spark the committed state, ``format`` ``"arrow"`` or
        ``"pandas"`` too).  Before the view, the default was ``"arrow"``: the table's
        attributes still read through the view, deprecated."""
        return self._runner.state(op, at=at, format=format)

    def read(self, op: Any, key: Any) -> Any:
        """A point read: a copy of ``key``'s current state in stateful operator ``op``
        (``None`` if the key has no state), between steps or after an embedded run."""
        return self._runner.read(op, key)
