"""The embedded engine as a :class:`~tstate.backend.Backend`: :class:`Embedded`.

``flow.run(workers=4)`` is ``flow.run(Embedded(4))``: N logical workers in this
process, deterministic (:mod:`tstate.engine.execution`).  ``checkpoint`` is a directory
(or object-store URL) or a :class:`~tstate.checkpoint.settings.Checkpoints`, the same
argument the Spark backend takes.  ``state`` is where workers keep keyed state: the heap
(None, the default) or ``tstate.RocksDB(path, cache_bytes=...)``, an embedded RocksDB
per worker under ``path`` (checkpoints of it go through the same encoded path as the
heap's).

>>> import tstate as ts
>>> flow = ts.Dataflow("sums")
>>> nums = flow.input("nums")
>>> @flow.stateful(nums, key=lambda x: x % 2, state=int)
... def total(n: int, x: int, ctx: ts.Context) -> int:
...     return n + x
>>> nums.send([1, 2, 3, 4]); nums.close()
>>> engine = Embedded(workers=2)
>>> engine.run(flow)
>>> sorted(engine.state(total, format="dict").items()), engine.metrics.moves
([(0, 6), (1, 4)], [])
>>> sorted(engine.state(total).to_pylist(), key=str)   # the StateView both engines return
[{'key': 0, 'value': 6}, {'key': 1, 'value': 4}]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, overload

from tstate.backend import DEFAULT_STRATEGY, Rescaled, Strategy, check_strategy
from tstate.engine.execution import Execution
from tstate.errors import ConfigurationError, GraphError
from tstate.metrics import Metrics
from tstate.migration.commands import Assign, MoveBins, Rescale
from tstate.plan.graph import Planned
from tstate.state.query import StateFormat, point_read, snapshot
from tstate.state.table import StateTable

__all__ = ["Embedded"]


class Embedded:
    """The embedded engine on ``workers`` logical workers (see the module docstring).

    ``max_workers`` sizes the worker pool live rescaling can use (default: enough for
    the ``reconfigure`` commands a run is given); ``checkpoint`` resumes from the
    latest committed checkpoint there (if any, onto any number of workers) and writes
    new ones.  One engine runs one execution at a time: :attr:`execution` is the
    current (or last) one."""

    def __init__(
        self, workers: int = 1, max_workers: Optional[int] = None, *, checkpoint: Any = None, state: Any = None
    ) -> None:
        for n, v in (("workers", workers), ("max_workers", max_workers if max_workers is not None else workers)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigurationError(f"{n} must be an integer >= 1, got {v!r}")
        self.workers = workers
        self.max_workers = max_workers
        self.checkpoint = checkpoint
        #: where workers keep keyed state (None: the heap; see ``tstate.RocksDB``)
        self.state_backend = state
        #: the current (or last) execution
        self.execution: Optional[Execution] = None

    def __repr__(self) -> str:
        return f"Embedded(workers={self.workers})"

    # -- running --------------------------------------------------------------------
    def start(self, flow: Planned, /, *, reconfigure: Sequence[tuple[int, Any]] = ()) -> Execution:
        """Build and start an execution of ``flow``: the :class:`~tstate.backend.Started`
        run of this engine (drive it with :meth:`Execution.step` / :meth:`Execution.run`,
        or :meth:`Execution.wait`).  ``reconfigure`` lists
        ``(time, command)`` pairs (:class:`~tstate.migration.commands.Rescale`,
        ``MoveBins``, ``Assign``)."""
        if self.execution is not None and not self.execution.finished:
            raise GraphError(f"dataflow {self.execution.name!r} is already running")
        max_workers = self.max_workers
        pool = max_workers or self.workers
        for _, cmd in reconfigure:
            if isinstance(cmd, Rescale):
                pool = max(pool, cmd.workers) if max_workers is None else pool
            elif isinstance(cmd, MoveBins) and cmd.moves and max_workers is None:
                pool = max(pool, max(cmd.moves.values()) + 1)
            elif isinstance(cmd, Assign) and cmd.owners and max_workers is None:
                pool = max(pool, max(cmd.owners) + 1)
        if self.execution is not None:
            self.execution.close()  # its RocksDB stores, if any: a finished run's state is not read any more
        ex = Execution(flow.graph, self.workers, pool, checkpoint=self.checkpoint, state=self.state_backend)
        self.execution = ex
        for t, cmd in sorted(reconfigure, key=lambda p: p[0]):
            ex.reconfigure(cmd, at=t)
        return ex

    def run(self, flow: Planned, /, *, reconfigure: Sequence[tuple[int, Any]] = ()) -> None:
        """Run ``flow`` to completion (see :meth:`start`)."""
        self.start(flow, reconfigure=reconfigure).run()

    def _running(self, what: str) -> Execution:
        if self.execution is None:
            raise GraphError(f"{what}: the engine has not run a dataflow: there is no state yet")
        return self.execution

    def rescale(
        self,
        workers: int,
        /,
        strategy: Strategy = DEFAULT_STRATEGY,
        *,
        at: Optional[int] = None,
        operator: Optional[str] = None,
    ) -> Rescaled:
        """Spread the bins of stateful operators over ``workers`` workers from time
        ``at`` (default: the earliest possible), in steps per ``strategy`` (see
        :meth:`Execution.rescale`); the result's ``schedule`` has the step times per
        operator."""
        times = self._running("rescale").rescale(workers, at=at, strategy=check_strategy(strategy), operator=operator)
        schedule = {op: tuple(ts) for op, ts in times.items() if ts}
        return Rescaled(workers, strategy, max(map(len, schedule.values()), default=0), schedule)

    # -- reading ----------------------------------------------------------------------
    @overload
    def state(self, op: Any, /, at: Any = None, format: None = None) -> StateTable: ...

    @overload
    def state(self, op: Any, /, at: Any = None, *, format: StateFormat) -> Any: ...

    def state(self, op: Any, /, at: Any = None, format: Optional[StateFormat] = None) -> Any:
        """A consistent snapshot of stateful operator ``op``'s state: by default a
        :class:`~tstate.state.table.StateTable` (the :class:`~tstate.backend.StateView`
        both engines return), else in ``format`` (see :func:`tstate.state.query.snapshot`;
        before the view, the default was ``"arrow"``, the table itself)."""
        return snapshot(self._running("state"), op, at=at, format=format)

    def read(self, op: Any, key: Any) -> Any:
        """A copy of ``key``'s current state in stateful operator ``op`` (None: none)."""
        return point_read(self._running("read"), op, key)

    @property
    def metrics(self) -> Metrics:
        """The current (or last) execution's metrics (empty before one starts)."""
        return self.execution.metrics if self.execution is not None else Metrics()

    @property
    def checkpoints(self) -> Any:
        """The checkpoint store the execution writes
        (:class:`~tstate.checkpoint.store.CheckpointStore`; None: no checkpoints, or not
        started)."""
        coordinator = self.execution.coordinator if self.execution is not None else None
        return coordinator.store if coordinator is not None else None


if TYPE_CHECKING:  # pragma: no cover - mypy checks that this engine implements tstate.backend.Backend
    import tstate.backend

    def _is_a_backend(engine: Embedded) -> tstate.backend.Backend:
        return engine
