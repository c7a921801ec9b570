"""One Python stage per keyed hop: an input whose stateful operators are keyed by
columns (``ts.col``) is shuffled by the JVM and runs its fused chain and the operators
in one task.

The general path takes two Python stages per keyed hop: the input task routes each
record by its key in Python and encodes the records as shuffle cells, Spark shuffles
the cells, and the boundary task decodes them for the operator
(:mod:`tstate.spark.task`).  When every stateful operator an input reaches (without
crossing another boundary) is keyed by the same :class:`~tstate.column_key.Col`, and
those columns are columns of the input's DataFrame, the bin of each row is a Spark SQL
expression (:func:`dest_column`: ``xxhash64`` of the columns, its top bits, the owning
partition's label), equal to the bin both engines give the key
(:func:`tstate.column_key.column_hash`).  The batch's rows are repartitioned on it, and
one task per partition (:func:`colocated_task`) turns its rows into records, pushes
them through the fused chain and hosts the operators over them -- no records cross a
Python-to-Python shuffle.

The operators before the stateful one may change records (``map``, ``filter``,
``flat_map``): the key is read from the record that reaches the operator, and the task
checks that its bin is one of the partition's; a record whose key field is not the
input column's value raises :class:`~tstate.errors.SparkError` naming the operator, the
key and the record (use a key function, or keep the field).

:func:`colocated_inputs` says which inputs of a batch take this path; the others, and
batches with records held back or frontier operators, take the general one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional

from tstate.column_key import Col
from tstate.errors import SparkError
from tstate.plan import Stateful
from tstate.spark.binned import BIN, Groups, chain_carries_bins, check_bins, push_binned, rows_by_time
from tstate.spark.cells import emit
from tstate.spark.profiling import profiled
from tstate.spark.task import _stateful, to_records
from tstate.spark.wire import BatchInfo, Row, arrow, held_row, stats_row

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import Plan

__all__ = [
    "DEST", "colocated_boundaries", "colocated_inputs", "bin_column", "dest_column", "partition_columns", "colocated_task",
]

#: the column holding a row's partition label on the colocated path
DEST = "__tstate_dest"
#: Spark types a column key hashes as its value (integral and boolean as ``bigint``)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint", "boolean")
_BYTES = ("string", "binary")


def colocated_boundaries(plan: "Plan", name: str) -> Optional[list[int]]:
    """The stateful operators input ``name`` reaches directly, if they can run in its
    task: all at the root scope, keyed by the same column key with the same bin count,
    fed by this input only; the input feeds no loop and the plan has no frontier
    operator.  None otherwise."""
    if plan.delays or any(name in lp.feeders for lp in plan.loops.values()):
        return None
    reached, _sinks = plan._reach(plan.inputs[name])
    if not reached:
        return None
    first = plan.nodes[reached[0]].op
    if not isinstance(first, Stateful) or not isinstance(first.key, Col):
        return None
    for b in reached:
        n = plan.nodes[b]
        op = n.op
        if not isinstance(op, Stateful) or n.loop is not None or op.key != first.key or op.bins != first.bins:
            return None
        if plan.feeders.get(b, []) != [name]:
            return None
    return reached


def colocated_inputs(
    plan: "Plan", dfs: Mapping[str, Any], lateness: Mapping[str, int], owners: Mapping[int, list[int]], held: bool
) -> dict[str, list[int]]:
    """Per input of the batch that takes the colocated path: its stateful operators
    (:func:`colocated_boundaries`), where its DataFrame has the key's columns as
    strings, binaries, integers or booleans, the operators' bins have the same owners,
    no records are held back (``lateness`` 0, no ``held`` file)."""
    found: dict[str, list[int]] = {}
    if held:
        return found
    for name, df in dfs.items():
        bs = colocated_boundaries(plan, name)
        if bs is None or lateness.get(name, 0):
            continue
        if any(list(owners[b]) != list(owners[bs[0]]) for b in bs):
            continue
        key = plan.nodes[bs[0]].key
        assert isinstance(key, Col)
        types = dict(df.dtypes)
        if all(types.get(c) in _INTEGRAL + _BYTES for c in key.names):
            found[name] = bs
    return found


def bin_column(key: Col, types: Mapping[str, str], bins: int) -> str:
    """The Spark SQL expression of a row's bin: ``xxhash64`` of the key's columns
    (integral and boolean columns as ``bigint``, as :func:`~tstate.column_key.column_hash`
    hashes Python ints), its top ``log2(bins)`` bits."""
    cols = []
    for c in key.names:
        q = "`" + c.replace("`", "``") + "`"
        cols.append(f"cast({q} as bigint)" if types[c] in _INTEGRAL else q)
    k = bins.bit_length() - 1
    hashed = f"xxhash64({', '.join(cols)})"
    return f"cast(shiftrightunsigned({hashed}, {64 - k}) as int)" if k else "0"


def dest_column(key: Col, types: Mapping[str, str], bins: int, owners: list[int], labels: tuple[int, ...]) -> str:
    """The Spark SQL expression of a row's partition label: the label of the owner of
    its bin (:func:`bin_column`)."""
    table = ", ".join(str(labels[owners[b]]) for b in range(bins))
    return f"element_at(array({table}), {bin_column(key, types, bins)} + 1)"


def partition_columns(
    key: Col, types: Mapping[str, str], bins: int, owners: list[int], labels: tuple[int, ...]
) -> dict[str, str]:
    """The columns a colocated input's rows get before the JVM shuffle: their bin
    (:data:`~tstate.spark.binned.BIN`, used by the task) and their partition label
    (:data:`DEST`, repartitioned on)."""
    return {BIN: bin_column(key, types, bins), DEST: dest_column(key, types, bins, owners, labels)}


def colocated_task(
    plan: "Plan",
    info: BatchInfo,
    name: str,
    boundaries: list[int],
    shape: Any,
    time_column: Optional[str],
    at: int = 0,
    late: Any = None,
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """The task of a colocated input (module docstring) on one partition: its rows (the
    :data:`DEST` and :data:`~tstate.spark.binned.BIN` columns dropped) become records
    as in :func:`~tstate.spark.task.input_task`, go through the fused chain -- carrying
    the bins Spark computed (:mod:`tstate.spark.binned`) when the chain allows it, else
    keyed again -- and ``boundaries`` run over them here; emits what a boundary task
    emits (state files, counters, sink parts, cells for the boundaries after them)."""
    node = plan.inputs[name]
    binned = chain_carries_bins(plan, node, boundaries)

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        feed = _binned_feed if binned else _keyed_feed
        groups, sinks, changers, held, dropped = feed(plan, info, node, boundaries, batches, shape, time_column, at, partition)
        if dropped and late is not None:
            late.add(dropped)
        rows: list[Row] = []
        emit(plan, info, {}, sinks, rows)
        for b in boundaries:
            stats = _stateful(plan, info, b, partition, groups[b], rows, _checker(plan, b, groups[b], partition, b in changers))
            stats["records"] = sum(len(recs) for at_t in groups[b].values() for recs in at_t.values())
            rows.append(stats_row(b, partition, stats))
        if held:
            from tstate.spark.records import encode_records

            rows.append(held_row(node, encode_records(held, plan.nodes[node].name, plan.records)))
        yield arrow(rows)

    return profiled(run, "colocated")


Fed = tuple[dict[int, Groups], dict[tuple[int, int], list[Any]], set[int], list[tuple[int, Any]], int]


def _binned_feed(
    plan: "Plan", info: BatchInfo, node: int, boundaries: list[int], batches: Iterable["pa.RecordBatch"],
    shape: Any, time_column: Optional[str], at: int, partition: int,
) -> Fed:
    """The partition's records by boundary, time and bin, carrying the bins Spark
    computed (:mod:`tstate.spark.binned`); the sink records; the boundaries reached
    through a ``map`` or ``flat_map``; the records held back; how many were late."""
    import numpy as np
    import pyarrow.compute as pc

    by_time: dict[int, tuple[list[Any], Any]] = {}
    held: list[tuple[int, Any]] = []
    dropped = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        bins = batch.column(BIN).to_numpy().astype(np.int64)
        batch = batch.drop_columns([c for c in (BIN, DEST) if c in batch.schema.names])  # (no DEST when placed)
        times = None
        if time_column is not None:
            times = pc.fill_null(batch.column(time_column), np.iinfo(np.int64).min).to_numpy().astype(np.int64)
        dropped += rows_by_time(to_records(batch, shape), bins, times, at, info.lo, info.hi, by_time, held)
    groups: dict[int, Groups] = {b: {} for b in boundaries}
    sinks: dict[tuple[int, int], list[Any]] = {}
    changers: set[int] = set()
    for t in sorted(by_time):
        recs, bins = by_time[t]
        push_binned(plan, node, t, recs, bins, False, groups, changers, sinks)
    return groups, sinks, changers, held, dropped


def _keyed_feed(
    plan: "Plan", info: BatchInfo, node: int, boundaries: list[int], batches: Iterable["pa.RecordBatch"],
    shape: Any, time_column: Optional[str], at: int, partition: int,
) -> Fed:
    """As :func:`_binned_feed`, the records keyed again through the fused chain
    (:meth:`~tstate.spark.plan.Plan.push`); a record whose bin is not this
    partition's raises the error of :func:`_misplaced`."""
    by_time, held, dropped = _records_by_time(batches, info, shape, time_column, at)
    routed: dict[tuple[int, int, int], list[Any]] = {}
    sinks: dict[tuple[int, int], list[Any]] = {}
    for t in sorted(by_time):
        plan.push(node, t, by_time[t], routed, sinks)
    groups: dict[int, Groups] = {b: {} for b in boundaries}
    for (b, bin_, t), recs in routed.items():
        if info.owners[b][bin_] != partition:
            _misplaced(plan, b, bin_, t, recs, partition)
        groups[b].setdefault(t, {})[bin_] = recs
    return groups, sinks, set(), held, dropped


def _checker(plan: "Plan", b: int, groups: Groups, partition: int, changed: bool) -> Optional[Callable[[Any, Any], None]]:
    """The check of boundary ``b``'s bins (:func:`~tstate.spark.binned.check_bins`) when
    a ``map`` or ``flat_map`` before it may have changed the key field: a fold's
    records now (it trusts its bins), another operator's after it ran, if it had to
    make a bin it was not given."""
    if not changed:
        return None

    def fail(bin_: int, t: int, r: Any) -> None:
        _misplaced(plan, b, bin_, t, [r], partition)

    if plan.nodes[b].stateful.fold:
        check_bins(plan, b, groups, fail)
        return None

    def after(host: Any, loaded: dict[int, Any]) -> None:
        if set(host.op.bins) - set(loaded):
            check_bins(plan, b, groups, fail)

    return after


def _records_by_time(
    batches: Iterable["pa.RecordBatch"], info: BatchInfo, shape: Any, time_column: Optional[str], at: int
) -> tuple[dict[int, list[Any]], list[tuple[int, Any]], int]:
    """A partition's rows as records by time (in row order), the records ahead of the
    batch's frontier (held back), and how many were late (before it)."""
    by_time: dict[int, list[Any]] = {}
    held: list[tuple[int, Any]] = []
    dropped = 0
    hi = info.hi
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch = batch.drop_columns([c for c in (BIN, DEST) if c in batch.schema.names])
        recs = to_records(batch, shape)
        if time_column is None:
            if hi is not None and at >= hi:
                held.extend((at, r) for r in recs)
            else:
                by_time.setdefault(at, []).extend(recs)
            continue
        for t, r in zip(batch.column(time_column).to_pylist(), recs):
            if t is None or t < info.lo:
                dropped += 1
            elif hi is not None and t >= hi:
                held.append((t, r))
            else:
                lst = by_time.get(t)
                if lst is None:
                    by_time[t] = [r]
                else:
                    lst.append(r)
    return by_time, held, dropped


def _misplaced(plan: "Plan", b: int, bin_: int, t: int, recs: list[Any], partition: int) -> None:
    n = plan.nodes[b]
    key = n.key
    raise SparkError(
        f"operator {n.name!r}: record {recs[0]!r} at time {t} has key {key(recs[0])!r} (bin {bin_}), which is not "
        f"the value of the input's column(s) {', '.join(map(repr, getattr(key, 'names', ())))} it came with "
        f"(partition {partition}): a {key!r} key on Spark reads input columns the operators before it leave "
        "unchanged; keep the field, or key by a function"
    )
