"""The rows Spark tasks and the driver exchange: their kinds, schema and payloads.

Every task of a micro-batch speaks one Arrow schema (:data:`SCHEMA`:
``kind, dest, node, bin, time, payload``); a row is one of

- ``RECORDS``: a group of records for boundary ``node``, bin ``bin``, time ``time``,
  shuffled to the partition labelled ``dest`` (``payload``: :mod:`~tstate.spark.records`;
  inside an iterate scope the cell's first element is its full time and ``time`` holds
  the epoch, :func:`~tstate.spark.cells.encode_cell`); with ``bin`` = :data:`GROUPED`,
  the records of all the bins one task sends to one partition for ``(node, time)``, in
  one cell (:func:`~tstate.spark.records.encode_groups`); with ``bin`` = :data:`BINNED`,
  the input rows of several bins one task sends to one partition for ``(node, time)``,
  as Arrow with each row's bin in a column (:func:`~tstate.spark.records.encode_binned_rows`);
- ``SINK``: a part file the task wrote with the records that reached sink ``node``
  (``payload``: its :class:`~tstate.spark.output.Part`; the records never reach the driver);
- ``FILE``: a state file a task wrote for operator ``node``, bin ``bin``
  (:class:`FileReport`: path, size, checksum, kind, pending timers);
- ``STATS``: per-task counters (cache hits and misses, records, bytes written);
- ``TICK``: one per partition and boundary, so that every partition runs (timers fire
  even where no record arrived);
- ``HELD``: event-time records of input ``node`` ahead of the batch's frontier (allowed
  lateness): kept by the driver for a later batch (``payload``: ``[[time, record], ...]``);
- ``TIMES``: the times of the cells a task emitted for boundary ``node`` inside a loop
  (``payload``: ``[[epoch, inner], ...]``; :mod:`tstate.spark.rounds`);
- ``ROUNDS``: how many rounds a task that ran loops by itself took (``payload``: the count).

The driver tells every task of a batch what it needs in a :class:`BatchInfo`, shipped
with the task.

>>> FileReport.of_row(FileReport("data/x", 10, "ab", "delta", 7).row(3, 5)[5])
FileReport(path='data/x', size=10, checksum='ab', kind='delta', timers=7)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional

import msgpack
from attrs import field, frozen

from tstate.checkpoint.commit import BinFile, adopt
from tstate.checkpoint.manifest import FileRef

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "RECORDS", "SINK", "FILE", "STATS", "TICK", "HELD", "TIMES", "ROUNDS", "GROUPED", "BINNED", "SCHEMA", "ORDER", "row_type", "Row", "BatchInfo",
    "FileReport", "arrow", "stats_row", "read_stats", "times_row", "read_times", "rounds_row", "read_rounds",
    "held_row",
]

RECORDS, SINK, FILE, STATS, TICK, HELD, TIMES, ROUNDS = 0, 1, 2, 3, 4, 5, 6, 7
#: the ``bin`` of a ``RECORDS`` row whose cell holds several bins' records
GROUPED = -1
#: the ``bin`` of a ``RECORDS`` row whose cell holds several bins' input rows as Arrow
#: columns plus a bin column
BINNED = -2
#: the Spark DDL schema of every task's output
SCHEMA = "kind int, dest int, node int, bin int, time long, payload binary"
#: the column a boundary stage's shuffle adds to the rows it moves: a row's place before
#: the shuffle (its partition, then its position there: ``monotonically_increasing_id``),
#: so that the receiving task takes cells in that order whatever order the shuffle's
#: blocks arrive in (:func:`tstate.spark.task.boundary_task`)
ORDER = "__tstate_order"

_ROW_TYPE: Any = None


def row_type() -> Any:
    """:data:`SCHEMA` as a ``StructType`` built in Python: a ``mapInArrow`` given it
    has no DDL string to send to the JVM to parse, once per stage, loop round and
    micro-batch."""
    global _ROW_TYPE
    if _ROW_TYPE is None:
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

        types = {"int": IntegerType(), "long": LongType(), "binary": BinaryType()}
        fields = [f.strip().split() for f in SCHEMA.split(",")]
        _ROW_TYPE = StructType([StructField(name, types[tp], True) for name, tp in fields])
    return _ROW_TYPE


#: one row: ``(kind, dest, node, bin, time, payload)``
Row = tuple[int, int, int, int, int, bytes]


@frozen
class BatchInfo:
    """What the driver tells every task of one micro-batch (shipped with the task)."""

    batch: int
    #: the frontier before the batch (records before it are late) and after it (None:
    #: the input is closed, every timer fires)
    lo: int
    hi: Optional[int]
    directory: str
    #: the committed manifest bins are read from (None: no checkpoint yet)
    head: Optional[int]
    #: the checkpoint the batch's files belong to, and its writer's token
    checkpoint: int
    token: str
    #: partition labels: rows with ``dest == labels[p]`` land on partition p
    labels: tuple[int, ...]
    #: per boundary node: the partition owning each bin
    owners: dict[int, tuple[int, ...]]
    #: per stateful node: bins with a timer due before ``hi``
    due: dict[int, frozenset[int]]
    compact_after: int = 8
    #: pre-copy (tstate.spark.binstore.prefetch): per stateful node, the ``(bin, next
    #: owner)`` pairs every task of the node loads in the background for the hand-over at
    #: batch ``handover`` (their old owners do not compact them in this batch)
    prefetch: dict[int, tuple[tuple[int, int], ...]] = field(factory=dict)
    handover: int = -1
    #: per boundary node: the bins whose owner changed at this batch
    moved: dict[int, frozenset[int]] = field(factory=dict)
    #: where tasks keep keyed state: None (the heap, :mod:`tstate.spark.binstore`) or
    #: a :class:`~tstate.state.rocksdb.settings.RocksDB` setting (a database per
    #: executor process, :mod:`tstate.spark.rocks_bins`)
    state: Any = None
    #: a folded batch (:class:`tstate.spark.folded.Fold`): its task checks that its input
    #: is one micro-batch and finds its first time; None: a batch of a cut run
    fold: Any = None


def arrow(rows: list[Row]) -> "pa.RecordBatch":
    """A task's output rows as one Arrow batch of :data:`SCHEMA`."""
    import pyarrow as pa

    from tstate.spark.arrays import binaries, ints

    cols: list[Any] = list(zip(*rows)) if rows else [(), (), (), (), (), ()]
    arrays = [*(ints(c, "int32") for c in cols[:4]), ints(cols[4]), binaries(cols[5])]
    return pa.RecordBatch.from_arrays(arrays, names=["kind", "dest", "node", "bin", "time", "payload"])


@frozen
class FileReport:
    """A ``FILE`` row's payload: the state file a task wrote for one bin (``kind``
    ``"snap"`` or ``"delta"``), or ``"drop"`` (the bin became empty: its chain goes);
    ``timers``: what the driver keeps of the bin's pending timers (the earliest time, or
    in a loop the minimal ``[[epoch, inner], ...]``; None: none)."""

    path: Optional[str]
    size: int
    checksum: Optional[str]
    kind: str
    timers: Any

    @classmethod
    def dropped(cls) -> "FileReport":
        return cls(None, 0, None, "drop", None)

    def row(self, node: int, b: int) -> Row:
        return (FILE, 0, node, b, 0, msgpack.packb([self.path, self.size, self.checksum, self.kind, self.timers]))

    @classmethod
    def of_row(cls, payload: bytes) -> "FileReport":
        path, size, checksum, kind, timers = msgpack.unpackb(payload)
        return cls(path, size, checksum, kind, timers)

    def bin_file(self, operator: str, b: int) -> BinFile:
        """The bin's change as the shared commit path takes it (:mod:`tstate.checkpoint.commit`)."""
        if self.kind == "drop":
            return BinFile(operator, b, None)
        assert self.path is not None and self.checksum is not None
        return BinFile(operator, b, FileRef(self.path, self.size, self.checksum), snapshot=self.kind == "snap")

    def adopt(self, writer: Any, operator: str, b: int, timers: dict[int, Any]) -> Any:
        """On the driver: the file into the checkpoint ``writer`` is writing (or the
        bin's chain dropped: :func:`tstate.checkpoint.commit.adopt`), and the bin's
        pending timers into ``timers`` (bin -> timers of ``operator``).  Returns the
        file's reference (None: dropped)."""
        f = self.bin_file(operator, b)
        adopt(writer, f, reported=True)  # (the task sent the size after its write: no stat per file)
        if f.ref is None:
            timers.pop(b, None)
            return None
        ref = f.ref
        if self.timers is None:
            timers.pop(b, None)
        else:
            timers[b] = self.timers
        return ref


def stats_row(node: int, partition: int, stats: dict[str, Any]) -> Row:
    """A task's counters for ``node`` (``records``, ``hits``, ``catchups``, ``misses``, ``bytes``)."""
    return (STATS, 0, node, partition, 0, msgpack.packb(stats))


def read_stats(payload: bytes) -> dict[str, Any]:
    return msgpack.unpackb(payload)  # type: ignore[no-any-return]


def times_row(node: int, times: Iterable[Any]) -> Row:
    """The ``Product`` times of the cells a task emitted for loop boundary ``node``."""
    return (TIMES, 0, node, 0, 0, msgpack.packb([[t.outer, t.inner] for t in times]))


def read_times(payload: bytes) -> list[Any]:
    """The times of a ``TIMES`` row, as ``Product``s."""
    from tstate.progress.timestamp import Product

    return [Product(*v) for v in msgpack.unpackb(payload)]


def rounds_row(rounds: int) -> Row:
    return (ROUNDS, 0, 0, 0, 0, msgpack.packb(rounds))


def read_rounds(payload: bytes) -> int:
    return int(msgpack.unpackb(payload))


def held_row(node: int, cell: bytes) -> Row:
    """Input ``node``'s records held back for a later batch (``cell``: encoded
    ``[[time, record], ...]``)."""
    return (HELD, 0, node, 0, 0, cell)
