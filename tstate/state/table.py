"""The embedded engine's state read: :class:`StateTable`, a consistent snapshot of one
stateful operator's state held as an Arrow table -- the embedded engine's
:class:`~tstate.backend.StateView` (what ``engine.state(op)`` and ``flow.state(op)``
return; Spark's is :class:`tstate.spark.queries.StateFrame`).

Before both engines returned one view, the embedded engine returned the
``pyarrow.Table`` itself: the table's other attributes still read through the view,
with a :class:`DeprecationWarning` (use :meth:`StateTable.to_arrow`).

>>> from tstate.types import to_arrow
>>> view = StateTable("counts", 3, to_arrow([("a", 2), ("b", 1)], int))
>>> view.column_names, view.num_rows, view.to_pylist()
(['key', 'value'], 2, [{'key': 'a', 'value': 2}, {'key': 'b', 'value': 1}])
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from attrs import frozen

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["StateTable"]


@frozen
class StateTable:
    """Operator ``operator``'s state at time ``time`` (every record and timer before it
    applied, none at or after it), as the rows of ``table`` (see the module
    docstring; :mod:`tstate.state.query` takes the snapshot)."""

    operator: str
    time: Any
    table: "pa.Table"

    @property
    def column_names(self) -> list[str]:
        """The columns, key first."""
        return list(self.table.column_names)

    @property
    def num_rows(self) -> int:
        """How many keys have state."""
        return int(self.table.num_rows)

    def to_arrow(self) -> "pa.Table":
        """The rows as an Arrow table (the snapshot time in its schema metadata,
        ``tstate.time``)."""
        return self.table

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as dicts."""
        return list(self.table.to_pylist())

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame."""
        return self.table.to_pandas()

    def __len__(self) -> int:
        return self.num_rows

    def __getattr__(self, name: str) -> Any:
        """Deprecated: the ``pyarrow.Table`` this read returned before (module docstring)."""
        if name.startswith("__") or name == "table":
            raise AttributeError(name)
        warnings.warn(
            f"state(...).{name}: the state is a StateTable now; use state(...).to_arrow().{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self.table, name)
