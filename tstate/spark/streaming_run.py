"""A streaming run on Spark as :class:`~tstate.backend.Started`: :class:`StreamingRun`,
what :meth:`tstate.spark.Backend.start` returns -- the Structured Streaming query
(:attr:`StreamingRun.query`) with the contract both engines' runs share (``wait``,
``stop``, ``finished``, ``metrics``).

Before both engines returned one type, ``start`` returned the ``StreamingQuery``
itself: its other attributes (``awaitTermination``, ``recentProgress``, ``isActive``,
...) still read through the run, with a :class:`DeprecationWarning` (use
``run.query.<attribute>``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Optional

from attrs import frozen

if TYPE_CHECKING:  # pragma: no cover
    from tstate.metrics import Metrics

__all__ = ["StreamingRun"]


@frozen
class StreamingRun:
    """Dataflow ``name`` running as the ``StreamingQuery`` ``query`` on ``backend``
    (whose :attr:`metrics` it reports; see the module docstring)."""

    name: str
    query: Any
    backend: Any

    @property
    def finished(self) -> bool:
        """Whether the query is over (its input exhausted under an ``availableNow``
        trigger, stopped, or failed)."""
        return not self.query.isActive

    @property
    def metrics(self) -> "Metrics":
        """The backend's metrics: one entry per micro-batch so far."""
        return self.backend.metrics  # type: ignore[no-any-return]

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Until the query is over or ``timeout`` seconds passed (Spark's
        ``awaitTermination``); True if it is over.  A failed query raises its error."""
        if timeout is None:
            self.query.awaitTermination()
            return True
        return bool(self.query.awaitTermination(timeout))

    def stop(self) -> None:
        """Stop the query (Spark's ``stop``): committed batches stay; a later start on
        the same checkpoint resumes after them."""
        self.query.stop()

    def __getattr__(self, name: str) -> Any:
        """Deprecated: the ``StreamingQuery`` ``start`` returned before (module docstring)."""
        if name.startswith("__") or name in ("name", "query", "backend"):
            raise AttributeError(name)
        warnings.warn(
            f"start(...).{name}: start returns a StreamingRun now; use start(...).query.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self.query, name)
