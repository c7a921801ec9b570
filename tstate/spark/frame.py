"""State as a Spark DataFrame: an operator's bins at a committed batch, read by the
executors straight from the checkpoint store (like Spark's ``statestore`` reader, but
from tstate's bins, so any number of partitions can read any bins).

The columns are those of :func:`tstate.types.arrow.to_arrow`: the key (``key``, or
``key_0``, ``key_1``... for tuple keys), then one column per field of a struct state
(``value`` for any other state type).

:meth:`tstate.spark.Backend.state` returns it as a :class:`StateFrame`, the Spark
backend's :class:`~tstate.backend.StateView` (the embedded engine's is
:class:`tstate.state.table.StateTable`): ``frame`` is the DataFrame; the other
attributes of the DataFrame this read returned before still read through the view, with
a :class:`DeprecationWarning`."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from attrs import frozen

from tstate.errors import SparkError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["state_frame", "StateFrame"]


@frozen
class StateFrame:
    """Operator ``operator``'s committed state as the Spark DataFrame ``frame`` (read
    from the bins by the executors each time it is evaluated; see the module
    docstring)."""

    operator: str
    frame: Any

    @property
    def column_names(self) -> list[str]:
        """The columns, key first."""
        return list(self.frame.columns)

    @property
    def num_rows(self) -> int:
        """How many keys have state (one Spark job)."""
        return int(self.frame.count())

    def to_arrow(self) -> "pa.Table":
        """The rows as an Arrow table, collected to the driver."""
        return self.frame.toArrow()

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as dicts, collected to the driver."""
        return list(self.to_arrow().to_pylist())

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame, collected to the driver."""
        return self.frame.toPandas()

    def __getattr__(self, name: str) -> Any:
        """Deprecated: the DataFrame this read returned before (module docstring)."""
        if name.startswith("__") or name == "frame":
            raise AttributeError(name)
        warnings.warn(
            f"state(...).{name}: the state is a StateFrame now; use state(...).frame.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self.frame, name)


def _rows(directory: str, refs: Any, codec: Any, fingerprint: str) -> list[tuple[Any, Any]]:
    from tstate.spark import binstore

    return list(binstore.read(directory, refs, codec, fingerprint).states.items())


def _reader(
    directory: str, checkpoint: int, operator: str, state_type: Any, fingerprint: str, schema: "pa.Schema"
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from tstate.spark import binstore
        from tstate.types import StateCodec, to_arrow

        codec = StateCodec(state_type)
        m = binstore.manifest(directory, checkpoint)
        assert m is not None
        for batch in batches:
            for b in batch.column("bin").to_pylist():
                rows = _rows(directory, m.chain(operator, b), codec, fingerprint)
                if rows:
                    yield from to_arrow(rows, state_type).cast(schema).to_batches()

    return run


def state_frame(spark: Any, store: Any, directory: str, partitions: int, operator: str, state_type: Any) -> Any:
    """The state of stateful operator ``operator`` (its state declared as ``state_type``)
    at the head of ``store`` (in ``directory``), read by at most ``partitions`` Spark
    tasks (module docstring)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from tstate.types import StateCodec, to_arrow
    from tstate.types.schema import Schema

    m = store.head
    entry = m.operators.get(operator) if m is not None else None
    if m is None or entry is None:
        raise SparkError(f"operator {operator!r} has no committed state in {directory}")
    fingerprint = Schema.from_builtins(entry.schema).fingerprint
    bins = sorted(entry.chains)
    # the key columns' types, from one bin read here
    codec = StateCodec(state_type)
    sample: list[tuple[Any, Any]] = []
    for b in bins:
        sample = _rows(directory, entry.chains[b], codec, fingerprint)[:1]
        if sample:
            break
    if not sample:
        schema = to_arrow([], state_type, key_type=str).schema
        return spark.createDataFrame([], from_arrow_schema(schema))
    schema = to_arrow(sample, state_type).schema
    ids = spark.createDataFrame([(b,) for b in bins], "bin int").repartition(max(1, min(partitions, len(bins))))
    return ids.mapInArrow(_reader(directory, m.id, operator, state_type, fingerprint, schema), from_arrow_schema(schema))
