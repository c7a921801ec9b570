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
from tstate.spark.cells import emit
from tstate.spark.profiling import profiled
from tstate.spark.task import _stateful, to_records
from tstate.spark.wire import BatchInfo, Row, arrow, held_row, stats_row

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import Plan

__all__ = ["DEST", "colocated_boundaries", "colocated_inputs", "dest_column", "colocated_task"]

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


def dest_column(key: Col, types: Mapping[str, str], bins: int, owners: list[int], labels: tuple[int, ...]) -> str:
    """The Spark SQL expression of a row's partition label: ``xxhash64`` of the key's
    columns (integral and boolean columns as ``bigint``, as
    :func:`~tstate.column_key.column_hash` hashes Python ints), its top ``log2(bins)``
    bits (the bin), the label of the bin's owner."""
    cols = []
    for c in key.names:
        q = "`" + c.replace("`", "``") + "`"
        cols.append(f"cast({q} as bigint)" if types[c] in _INTEGRAL else q)
    k = bins.bit_length() - 1
    hashed = f"xxhash64({', '.join(cols)})"
    bin_ = f"shiftrightunsigned({hashed}, {64 - k})" if k else "0"
    table = ", ".join(str(labels[owners[b]]) for b in range(bins))
    return f"element_at(array({table}), cast({bin_} as int) + 1)"


def colocated_task(
    plan: "Plan",
    info: BatchInfo,
    name: str,
    boundaries: list[int],
    shape: str,
    time_column: Optional[str],
    at: int = 0,
    late: Any = None,
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """The task of a colocated input (module docstring) on one partition: its rows (the
    :data:`DEST` column dropped) become records as in
    :func:`~tstate.spark.task.input_task`, go through the fused chain, and
    ``boundaries`` run over them here; emits what a boundary task emits (state files,
    counters, sink parts, cells for the boundaries after them)."""
    node = plan.inputs[name]

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        by_time, held, dropped = _records_by_time(batches, info, shape, time_column, at)
        if dropped and late is not None:
            late.add(dropped)
        routed: dict[tuple[int, int, int], list[Any]] = {}
        sinks: dict[tuple[int, int], list[Any]] = {}
        for t in sorted(by_time):
            plan.push(node, t, by_time[t], routed, sinks)
        groups: dict[int, dict[int, dict[int, list[Any]]]] = {b: {} for b in boundaries}
        counts = dict.fromkeys(boundaries, 0)
        for (b, bin_, t), recs in routed.items():
            if info.owners[b][bin_] != partition:
                _misplaced(plan, b, bin_, t, recs, partition)
            groups[b].setdefault(t, {})[bin_] = recs
            counts[b] += len(recs)
        rows: list[Row] = []
        emit(plan, info, {}, sinks, rows)
        for b in boundaries:
            stats = _stateful(plan, info, b, partition, groups[b], rows)
            stats["records"] = counts[b]
            rows.append(stats_row(b, partition, stats))
        if held:
            from tstate.spark.records import encode_records

            rows.append(held_row(node, encode_records(held, plan.nodes[node].name, plan.records)))
        yield arrow(rows)

    return profiled(run, "colocated")


def _records_by_time(
    batches: Iterable["pa.RecordBatch"], info: BatchInfo, shape: str, time_column: Optional[str], at: int
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
        batch = batch.drop_columns([DEST]) if DEST in batch.schema.names else batch
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
