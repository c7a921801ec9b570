"""A batch run's column-keyed inputs, partitioned once per run (:func:`place`).

An input whose stateful operators run in its own task (:mod:`tstate.spark.colocated`)
needs its rows on the partitions owning their bins: each micro-batch used to add the
bin and destination columns to the batch's rows (a plan Spark analysed again every
batch) and shuffle them.  A batch run reads its static inputs once anyway (persisted
while its epochs are counted, :func:`tstate.spark.cuts.cut_run`), so the columns are
added and the rows repartitioned on them there, once: every micro-batch then filters
its epochs out of a frame whose partition ``p`` already holds exactly the rows of the
bins partition ``p`` owns, and runs its task over it with no shuffle.  It is the same
repartition the batches did, done once; each partition is then sorted back into the
frame's order (:func:`_in_order`), so the rows of one key reach its operator in the
order the frame gives them, wherever the frame's partitions were (a frame as read, in
file splits, needs no repartition of its own by key first).  In a session whose tasks
run in one executor inside the driver (``local[N]``) the shuffle already keeps that
order and the sort is left out (:func:`one_executor`: measured on CEP, 1M flights on
``local[2]``, the sort and the row number it sorts on were ~10% of the executor
threads' JVM samples).

The placed frame carries only what the task reads (:func:`_carried`): the
destination column is dropped once the rows are on their partitions (a partition's
rows all have its label), and an input built as a record class keeps only the
columns its fields name, the time column and the bin -- every column less is one
less through the shuffle, the sort, the in-memory cache and each micro-batch's
rows-to-Arrow hand-over to the task.

The frame is placed for one bin→partition map (:class:`Placement`); a batch whose map
differs (after a rescale) computes the columns and shuffles again, as before
(:meth:`Placement.fits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from attrs import evolve, frozen

from tstate.column_key import Col
from tstate.spark.binned import BIN
from tstate.spark.record_types import is_record_class
from tstate.spark.records import record_fields
from tstate.spark.colocated import DEST, colocated_inputs, partition_columns

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan
    from tstate.spark.source import Source

__all__ = ["Placement", "place", "unplaced", "carried", "one_executor"]


@frozen
class Placement:
    """An input frame partitioned (on :data:`~tstate.spark.colocated.DEST`) over
    ``partitions`` partitions with labels ``labels``, for the bin owners ``owners`` of
    its first stateful operator; it carries the :data:`~tstate.spark.binned.BIN` column
    (not ``DEST``: :func:`carried`)."""

    owners: tuple[int, ...]
    partitions: int
    labels: tuple[int, ...]

    def fits(self, owners: "list[int] | tuple[int, ...]", partitions: int, labels: tuple[int, ...]) -> bool:
        """The frame's rows are where a batch with these owners, partitions and labels
        needs them."""
        return self.partitions == partitions and self.labels == labels and self.owners == tuple(owners)


def place(
    plan: "Plan",
    bound: Mapping[str, "Source"],
    owners: Mapping[int, list[int]],
    partitions: int,
    labels: tuple[int, ...],
    held: bool,
) -> tuple[dict[str, "Source"], dict[str, Placement]]:
    """``bound`` with each timed input that takes the colocated path
    (:func:`~tstate.spark.colocated.colocated_inputs`; ``held``: records are held back,
    so none does) bound to its frame with the bin column, repartitioned on the
    destination (lazily: the run persists it while it counts the epochs), with only the
    columns its task reads (:func:`carried`); and those inputs' :class:`Placement`."""
    from pyspark.sql import functions as F

    frames = {n: s.df for n, s in bound.items() if s.time is not None}
    found = colocated_inputs(plan, frames, {n: s.lateness for n, s in bound.items()}, owners, held)
    out, placed = dict(bound), {}
    for name, boundaries in found.items():
        src, first = bound[name], plan.nodes[boundaries[0]]
        assert isinstance(first.key, Col)
        columns = partition_columns(first.key, dict(src.df.dtypes), first.bins, owners[boundaries[0]], labels)
        df = src.df.withColumns({c: F.expr(e) for c, e in columns.items()})
        keep = carried(df.columns, src.record, src.time, first.key.names)
        out[name] = evolve(src, df=_in_order(df, partitions, one_executor(df)).select(*keep))
        placed[name] = Placement(tuple(owners[boundaries[0]]), partitions, labels)
    return out, placed


def _in_order(df: Any, partitions: int, map_order: bool = False) -> Any:
    """``df`` repartitioned on :data:`~tstate.spark.colocated.DEST`, each partition's
    rows in ``df``'s order (partition by partition, row by row): a shuffle hands a
    partition the blocks of the frame's partitions in no promised order (a remote
    executor's come when they come), and the rows of one key must reach its operator in
    the order the frame gives them, as the embedded engine reads them -- so each
    partition is sorted back on the rows' place in the frame.  No sort where the shuffle
    keeps that order: a frame in one partition (one block per reader), or ``map_order``
    (:func:`one_executor`: every block is the reader's own executor's, read in map
    order, each block in its map task's order).  Onto one partition (every bin's owner)
    there is nothing to shuffle: ``coalesce(1)`` reads the frame's partitions one after
    the other, in order, in the one task (no shuffle written and read, no sort)."""
    from pyspark.sql import functions as F

    if partitions == 1:
        return df.coalesce(1)
    if map_order or df.rdd.getNumPartitions() == 1:
        return df.repartition(partitions, DEST)
    return (
        df.withColumn(_SEQ, F.monotonically_increasing_id())
        .repartition(partitions, DEST)
        .sortWithinPartitions(_SEQ)
        .drop(_SEQ)
    )


def one_executor(df: Any) -> bool:
    """Whether ``df``'s session runs its tasks in one executor inside the driver's JVM
    (``SparkContext.isLocal``: ``local``, ``local[N]``; not ``local-cluster``): a
    shuffle's reader then reads every block from its own block manager, in the order of
    the map tasks (Spark's ``ShuffleBlockFetcherIterator`` queues local blocks in map
    order; only remote fetches complete in any order), and a map task writes a
    partition's rows in the order it read them (no map-side sort or combine in a
    repartition) -- so a shuffle keeps the frame's order, partition by partition, and
    :func:`_in_order` needs no sort.  False when it cannot say (Spark Connect)."""
    try:
        return bool(df.sparkSession.sparkContext._jsc.sc().isLocal())
    except Exception:  # noqa: BLE001  (no JVM: Spark Connect)
        return False


def carried(columns: list[str], record: Any, time: "str | None", key: "tuple[str, ...]" = ()) -> list[str]:
    """The columns of a placed frame (``columns``: the frame's, with the bin and
    destination columns) its task reads, in the frame's order: without the destination
    (the rows are on their partitions); for a record class (``record``) only the columns
    its fields name, the time column, the key's columns (``key``: to place the rows
    again after a rescale) and the bin; for dict, tuple or value records every column
    (the records are made of them all).

    >>> carried(["a", "b", "t", "__tstate_bin", "__tstate_dest"], "dict", "t")
    ['a', 'b', 't', '__tstate_bin']
    >>> import collections
    >>> carried(["a", "b", "c", "t", "__tstate_bin", "__tstate_dest"], collections.namedtuple("R", "b"), "t", ("c",))
    ['b', 'c', 't', '__tstate_bin']
    """
    drop = {DEST}
    if isinstance(record, type) and is_record_class(record):
        read = {*record_fields(record), *key, BIN, *([time] if time is not None else [])}
        drop |= {c for c in columns if c not in read}
    return [c for c in columns if c not in drop]


#: the place of a row in the frame before the placement's shuffle (:func:`_in_order`)
_SEQ = "__tstate_seq"


def unplaced(df: Any) -> Any:
    """A placed frame without the columns :func:`place` added (for the general path)."""
    return df.drop(BIN, DEST)
