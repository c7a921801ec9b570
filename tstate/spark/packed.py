"""A placed input's rows kept as Arrow end to end: per partition, a few rows of Arrow IPC
*blobs* (runs of epochs) instead of one Spark row per input row.

A batch run places a column-keyed input once (:mod:`tstate.spark.placed`): its rows are
repartitioned on the partition owning their bin and cached, and every micro-batch filters
its epochs out of the cache for its colocated task (:mod:`tstate.spark.colocated`).  Kept
as Spark rows, every input row is converted three times in the JVM -- into the cache's
rows, and out of them into Arrow for each micro-batch's task -- beside the read and the
shuffle.  Packed (:func:`pack`), one ``mapInArrow`` task per partition, right after the
placement's shuffle, sorts the partition's rows by time (stably: within a time they keep
the frame's order, or the order of the frame's row ids ``seq`` when the shuffle mixed
them) and writes them as Arrow IPC streams of at most :data:`BLOB_ROWS` rows each, one
output row per stream (:data:`PACKED_SCHEMA`: its first and last time, its rows per time,
the stream).  The cache holds those few rows; the epoch count reads the rows per time
(:func:`epoch_counts`); a micro-batch keeps the blobs overlapping its epochs
(:func:`window`: they carry the batch's range) and its task decodes them without a copy
and slices them to the range (:func:`unpacking`).

The blob column carries the rows' Spark schema in its metadata (:func:`row_schema`), so
a packed frame can be turned back into rows anywhere (:func:`unpacked`: the general path,
a batch after a rescale).  Only an input with an integral time column is packed
(:func:`packable`); the bin and destination columns stay in the blobs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "BLOB", "BLOB_ROWS", "PACKED_SCHEMA", "epoch_counts", "is_packed", "packable", "pack", "row_schema",
    "unpacked", "unpacking", "window",
]

#: the most rows one blob holds
BLOB_ROWS = 65_536

T_MIN, T_MAX, EPOCHS, BLOB = "__tstate_t_min", "__tstate_t_max", "__tstate_epochs", "__tstate_blob"
#: the epoch range ``[lo, hi)`` a micro-batch's blobs are sliced to (:func:`window`)
LO, HI = "__tstate_lo", "__tstate_hi"
#: a packed frame's rows: the first and last time of a blob, its rows per time, the blob
PACKED_SCHEMA = f"{T_MIN} bigint, {T_MAX} bigint, {EPOCHS} array<struct<t: bigint, n: bigint>>, {BLOB} binary"
#: the metadata key of the blob column holding the rows' Spark schema (JSON)
_ROWS = "tstate_rows"
#: the metadata key of the blob column holding the time column's name
_TIME = "tstate_time"
_TIMES = ("tinyint", "smallint", "int", "bigint")

Task = Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]


def packable(df: Any, time_column: str) -> bool:
    """Whether ``df``'s rows can be packed: its time column is integral."""
    return dict(df.dtypes).get(time_column) in _TIMES


def is_packed(df: Any) -> bool:
    """Whether ``df`` is a packed frame (:func:`pack`), or a window of one."""
    return BLOB in df.columns


def row_schema(df: Any) -> tuple[Any, str]:
    """The Spark schema of the rows packed in ``df`` (a ``StructType``) and their time
    column."""
    from pyspark.sql.types import StructType

    meta = df.schema[BLOB].metadata
    return StructType.fromJson(json.loads(meta[_ROWS])), meta[_TIME]


def pack(df: Any, time_column: str, seq: Optional[str]) -> Any:
    """``df`` (partitioned as it will be used) packed partition by partition (module
    docstring); ``seq``: a column of the rows' places in the frame (dropped), ordering
    the rows of one time, else they keep the order they come in."""
    from pyspark.sql import functions as F

    rows = df.drop(seq) if seq is not None else df
    packed = df.mapInArrow(_packer(time_column, seq, BLOB_ROWS), PACKED_SCHEMA)  # (read here: a test may set it)
    meta = {_ROWS: rows.schema.json(), _TIME: time_column}
    return packed.select(T_MIN, T_MAX, EPOCHS, F.col(BLOB).alias(BLOB, metadata=meta))


def _packer(time_column: str, seq: Optional[str], size: int) -> Task:
    """The packing task (:func:`pack`), blobs of at most ``size`` rows."""

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa
        import pyarrow.compute as pc

        got = [b for b in batches if b.num_rows]
        if not got:
            return
        table = pa.Table.from_batches(got)
        table = table.filter(pc.is_valid(table.column(time_column)))  # (no batch reads a row without a time)
        keys = [(time_column, "ascending")] + ([(seq, "ascending")] if seq is not None else [])
        table = table.take(pc.sort_indices(table, sort_keys=keys))  # (stable)
        if seq is not None:
            table = table.drop_columns([seq])
        for start in range(0, table.num_rows, size):
            yield _blob(table.slice(start, size), time_column)

    return run


def _blob(part: "pa.Table", time_column: str) -> "pa.RecordBatch":
    """One packed row: ``part`` (sorted by time) as an Arrow IPC stream."""
    import numpy as np
    import pyarrow as pa

    times = part.column(time_column).to_numpy().astype(np.int64)
    starts = np.flatnonzero(np.r_[True, times[1:] != times[:-1]])
    counts = np.diff(np.r_[starts, len(times)])
    epochs = pa.StructArray.from_arrays([pa.array(times[starts]), pa.array(counts.astype(np.int64))], names=["t", "n"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, part.schema) as w:
        w.write_table(part.combine_chunks())
    return pa.RecordBatch.from_arrays(
        [
            pa.array([int(times[0])], pa.int64()), pa.array([int(times[-1])], pa.int64()),
            pa.ListArray.from_arrays(pa.array([0, len(starts)], pa.int32()), epochs),
            _one_binary(sink.getvalue()),
        ],
        names=[T_MIN, T_MAX, EPOCHS, BLOB],
    )


def _one_binary(buf: "pa.Buffer") -> "pa.Array":
    """A binary array of one value, ``buf`` (not copied)."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.py_buffer(np.array([0, buf.size], dtype=np.int32))
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, buf])


def epoch_counts(df: Any) -> Any:
    """A packed frame's rows per time: a frame of ``(t, n)``, a time once per blob."""
    from pyspark.sql import functions as F

    return df.select(F.inline(EPOCHS))


def window(df: Any, time_column: str, lo: int, hi: int) -> Any:
    """The rows of ``df`` at times ``[lo, hi)``: a packed frame's blobs overlapping them,
    carrying the range (:func:`unpacking` slices them to it), else the rows."""
    from pyspark.sql import functions as F

    if not is_packed(df):
        return df.where((F.col(time_column) >= lo) & (F.col(time_column) < hi))
    kept = df.where((F.col(T_MAX) >= lo) & (F.col(T_MIN) < hi))
    return kept.withColumns({LO: F.lit(lo).cast("bigint"), HI: F.lit(hi).cast("bigint")})


def _rows(batches: Iterable["pa.RecordBatch"], time_column: str) -> Iterator["pa.RecordBatch"]:
    """The rows of a window's blobs (:func:`window`), each blob decoded without a copy
    and sliced to the window's range."""
    import numpy as np
    import pyarrow as pa

    for batch in batches:
        blobs, los, his = batch.column(BLOB), batch.column(LO), batch.column(HI)
        for i in range(batch.num_rows):
            lo, hi = los[i].as_py(), his[i].as_py()
            for rb in pa.ipc.open_stream(blobs[i].as_buffer()):
                times = rb.column(time_column).to_numpy()
                a, b = np.searchsorted(times, [lo, hi], side="left")
                if b > a:
                    yield rb.slice(int(a), int(b - a))


def unpacking(df: Any, task: Task) -> Task:
    """``task`` over the rows of window ``df``'s blobs (:func:`window`) instead of the
    blobs."""
    _schema, time_column = row_schema(df)

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        return task(_rows(batches, time_column))

    return run


def unpacked(df: Any, drop: tuple[str, ...] = ()) -> Any:
    """The rows of window ``df`` (:func:`window`) as a frame, without columns ``drop``."""
    from pyspark.sql.types import StructType

    schema, time_column = row_schema(df)
    kept = StructType([f for f in schema.fields if f.name not in drop])
    names = [f.name for f in kept.fields]

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        for rb in _rows(batches, time_column):
            yield rb.select(names)

    return df.mapInArrow(run, kept)
