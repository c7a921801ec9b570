"""What runs inside Spark tasks: input routing and the per-partition work of a boundary.

Tasks speak the rows of :mod:`tstate.spark.wire`.  An input's task turns rows into
records at their times, pushes them through the fused chain and emits the shuffle cells
for the boundaries they reach (:mod:`tstate.spark.cells`), the sink output it wrote, and
the records ahead of the batch's frontier (``HELD``).  A boundary's task runs on the
partition owning the bins: an ``exchange`` pushes its records on; a stateful operator is
hosted in a one-worker embedded execution (:mod:`tstate.spark.host`): its bins are
installed, the records fed in time order, the input advanced to the batch's frontier
(or closed in the final batch), and each changed bin written as a delta or snapshot
file -- the embedded engine's own operator code, so both engines compute the same thing.

Fast paths (same results as the general ones): an input whose records go straight to
boundaries ships them as Arrow row cells cut out by a vectorised sort (only the key
function runs per row, on a row view when the records are dicts and no sink reads them:
:mod:`tstate.spark.row_views`); a ``fold_bins`` operator gets one bin-tagged batch per bin
(:class:`~tstate.operators.stateful.BinBatch`), so its records are not keyed twice.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

from tstate.plan import Exchange, Stateful
from tstate.spark.cells import cell_where, emit
from tstate.spark.host import StatefulHost, stored_fingerprint, write_bins
from tstate.spark.profiling import profiled
from tstate.spark.records import Shape, decode_binned, decode_cells, decode_groups, decode_records, encode_records, rows_to_records
from tstate.spark.row_views import views_or_dicts
from tstate.spark.wire import BINNED, GROUPED, ORDER, RECORDS, BatchInfo, Row, arrow, held_row, stats_row

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import Plan

__all__ = ["input_task", "held_task", "boundary_task", "to_records", "direct"]


def to_records(batch: "pa.RecordBatch", shape: Shape) -> list[Any]:
    """The rows of an Arrow batch as records: dicts (``shape`` ``"dict"``), tuples
    (``"tuple"``), the first column's values (``"value"``) or instances of a record
    class built column by column (:func:`~tstate.spark.records.rows_to_records`)."""
    return rows_to_records(batch, shape)


def input_task(
    plan: "Plan", info: BatchInfo, name: str, shape: Any, time_column: Optional[str], at: int = 0, late: Any = None
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """The map side of an input: rows become records (``shape``: ``"dict"``,
    ``"tuple"`` or ``"value"``), at ``time_column``'s value or, without one, at ``at``
    (the micro-batch's epoch),
    pushed through the fused chain to the boundaries' shuffles and to sinks.  Records
    before the frontier are late: dropped and counted in the ``late`` accumulator;
    records at or after the batch's new frontier (allowed lateness) are held back."""
    node = plan.inputs[name]
    fast = direct(plan, node)

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        # the whole partition is grouped before anything is emitted: one shuffle cell per
        # (boundary, bin, time), not one per Arrow batch
        if fast:
            seen: list["pa.RecordBatch"] = []
            it = iter(batches)
            got = _rows_input(plan, info, node, shape, time_column, at, it, seen)
            if got is not None:
                rows, dropped = got
                if dropped and late is not None:
                    late.add(dropped)
                yield arrow(rows)
                return
            batches = itertools.chain(seen, it)
        by_time, _seen, dropped = input_groups(info, shape, time_column, at, batches)
        if dropped and late is not None:
            late.add(dropped)
        yield from _route_input(plan, info, node, by_time)

    return profiled(run, "input")


def input_groups(
    info: BatchInfo, shape: Any, time_column: Optional[str], at: int, batches: Iterable[Any],
) -> tuple[dict[int, list[Any]], int, int]:
    """An input's rows as records by time (``at`` when the input has no time column;
    rows before the batch, ``info.lo``, or without a time dropped), the rows read and
    the rows dropped."""
    by_time: dict[int, list[Any]] = {}
    seen = dropped = 0
    for batch in batches:
        seen += batch.num_rows
        if batch.num_rows == 0:
            continue
        recs = to_records(batch, shape)
        if time_column is None:
            by_time.setdefault(at, []).extend(recs)
            continue
        for t, r in zip(batch.column(time_column).to_pylist(), recs):
            if t is None or t < info.lo:
                dropped += 1
                continue
            lst = by_time.get(t)
            if lst is None:
                by_time[t] = [r]
            else:
                lst.append(r)
    return by_time, seen, dropped


def direct(plan: "Plan", node: int) -> bool:
    """Whether every consumer of input ``node`` is a boundary at the root scope or a
    sink: its records then reach them as the rows themselves (see :func:`_rows_input`)."""
    consumers = plan.nodes[node].consumers
    for c, _port in consumers:
        n = plan.nodes[c]
        if c in plan.sinks:
            continue
        if not isinstance(n.op, (Stateful, Exchange)) or n.loop is not None:
            return False
    return bool(consumers)


def _rows_input(
    plan: "Plan",
    info: BatchInfo,
    node: int,
    shape: Any,
    time_column: Optional[str],
    at: int,
    batches: Iterable["pa.RecordBatch"],
    seen: list["pa.RecordBatch"],
) -> Optional[tuple[list[Row], int]]:
    """The input task when the input feeds boundaries (and sinks) directly: the records
    are the rows, so a boundary's cell is the rows of its ``(bin, time)`` as Arrow
    (:func:`~tstate.spark.records.encode_rows`), cut out of the partition's rows by a
    vectorised sort on ``(time, bin)``; only the key function runs per row, batch by
    batch as Spark sends them (overlapping Spark's conversion of the next one).  Returns
    the output rows and the number of late rows, or None if a key function failed (the
    general path then raises the error naming the record; ``seen`` holds the batches
    consumed here)."""
    import numpy as np

    from tstate.spark.record_types import class_path

    if isinstance(shape, type) and plan.records.get(class_path(shape)) is None:
        return None  # (the general path raises the error saying how to register the class)
    boundaries: list[tuple[int, Any, Any]] = [
        (c, plan.nodes[c].key, plan.router(c)) for c, _port in plan.nodes[node].consumers if c not in plan.sinks
    ]
    dropped = 0
    held: list[tuple[int, Any]] = []
    sel: list[Any] = []  # the records going to sinks (not late, not held back), in order
    idx_parts: list[Any] = []  # the row numbers going in, in the partition
    time_parts: list[Any] = []
    bin_parts: dict[int, list[int]] = {c: [] for c, _, _ in boundaries}
    # without sinks, dict records serve only to key the rows: row views do (tstate.spark.row_views)
    records = shape != "dict" or any(c in plan.sinks for c, _port in plan.nodes[node].consumers)
    views = not records

    def keyed(part: list[Any]) -> list[list[int]]:
        return [router.bin_list(map(key, part)) for _c, key, router in boundaries]

    offset = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        seen.append(batch)
        recs = rows_to_records(batch, shape) if records else None
        li, lt, late = _rows_in(batch, recs, shape, info, time_column, at, held)
        dropped += late
        try:
            if recs is None:
                found, views = views_or_dicts(batch, li, keyed, views)
            else:
                part = recs if len(li) == len(recs) else [recs[i] for i in li]
                found = keyed(part)
                sel.extend(part)
        except Exception:  # the general path reports it, naming the record
            return None
        for (c, _key, _router), bins in zip(boundaries, found):
            bin_parts[c].extend(bins)
        idx_parts.append(li + offset)
        time_parts.append(lt)
        offset += batch.num_rows
    rows: list[Row] = []
    sinks: dict[tuple[int, int], list[Any]] = {}
    if any(len(li) for li in idx_parts):
        times = np.concatenate(time_parts)
        for c, _port in plan.nodes[node].consumers:
            if c in plan.sinks:
                for tt, rs in _by_time(sel, times).items():
                    sinks.setdefault((c, tt), []).extend(rs)
        _row_cells(info, seen, np.concatenate(idx_parts), times, bin_parts, shape, rows, not plan.delays)
    emit(plan, info, {}, sinks, rows)
    if held:
        rows.append(held_row(node, encode_records(held, plan.nodes[node].name, plan.records)))
    return rows, dropped


def _rows_in(
    batch: "pa.RecordBatch", recs: Optional[list[Any]], shape: Shape, info: BatchInfo, time_column: Optional[str],
    at: int, held: list[tuple[int, Any]],
) -> tuple[Any, Any, int]:
    """Of one Arrow batch's rows (``recs``: as records of ``shape``; None: not built,
    those held back are built here): the row numbers going in (not late, not at or
    after the batch's frontier: those go to ``held``), their times, and how many were
    late."""
    import numpy as np
    import pyarrow.compute as pc

    from tstate.spark.arrays import ints

    m, lo, hi = batch.num_rows, info.lo, info.hi
    if time_column is None:
        if hi is not None and at >= hi:
            held.extend((at, r) for r in (rows_to_records(batch, shape) if recs is None else recs))
            return np.arange(0), np.arange(0), 0
        return np.arange(m), np.full(m, at, dtype=np.int64), 0
    col = batch.column(time_column)
    late = pc.fill_null(pc.less(col, lo), True)
    ok = pc.invert(late)
    if hi is not None:
        ahead = pc.and_(ok, pc.greater_equal(col, hi))
        if pc.any(ahead).as_py():
            ahead_at = pc.indices_nonzero(ahead)
            later = rows_to_records(batch.take(ahead_at), shape) if recs is None else [recs[i] for i in ahead_at.to_numpy()]
            held.extend(zip(pc.take(col, ahead_at).to_pylist(), later))
            ok = pc.and_(ok, pc.invert(ahead))
    li = pc.indices_nonzero(ok).to_numpy()
    return li, pc.take(col, ints(li)).to_numpy().astype(np.int64), int(pc.sum(late).as_py() or 0)


def _by_time(recs: list[Any], times: Any) -> dict[int, list[Any]]:
    """``recs`` by their ``times`` (a numpy array), in order."""
    if (times == times[0]).all():
        return {int(times[0]): recs}
    out: dict[int, list[Any]] = {}
    for r, t in zip(recs, times.tolist()):
        out.setdefault(t, []).append(r)
    return out


def _row_cells(
    info: BatchInfo, seen: list["pa.RecordBatch"], idx: Any, times: Any, bin_parts: dict[int, list[int]], shape: Any,
    rows: list[Row], binned: bool = True,
) -> None:
    """Add to ``rows`` the Arrow cells of the rows ``idx`` of the partition's batches
    ``seen`` (at ``times``, in the bins ``bin_parts[boundary]``), cut out by a stable
    sort: with ``binned``, one cell per boundary, destination partition and time, its
    rows' bins in a column (:func:`~tstate.spark.records.encode_binned_rows`: one Arrow
    stream per destination, not per bin); otherwise one cell per boundary, bin and
    time (a plan with frontier operators keeps cells per bin: it holds them by bin)."""
    import numpy as np
    import pyarrow as pa

    from tstate.spark.arrays import ints
    from tstate.spark.records import encode_binned_rows, encode_rows

    table = pa.Table.from_batches(seen)
    single = bool((times == times[0]).all())
    labels = info.labels
    for c, found in bin_parts.items():
        bins = np.asarray(found, dtype=np.int64)
        owners = info.owners[c]
        # the cells' grouping column: the destination's label (binned) or the bin itself
        group = np.asarray([labels[o] for o in owners], dtype=np.int64)[bins] if binned else bins
        keys = (bins, group) if single else (bins, group, times)
        order = np.lexsort(keys)
        sg, st = group[order], times[order]
        cut = np.flatnonzero((sg[1:] != sg[:-1]) | (st[1:] != st[:-1])) + 1
        starts = np.concatenate(([0], cut)).tolist()
        ends = np.concatenate((cut, [len(order)])).tolist()
        taken = table.take(ints(idx[order]))
        sb = bins[order]
        for s0, e0 in zip(starts, ends):
            t, part = int(st[s0]), taken.slice(s0, e0 - s0)
            if binned:
                rows.append((RECORDS, int(sg[s0]), c, BINNED, t, encode_binned_rows(part, sb[s0:e0], shape)))
            else:
                b = int(sb[s0])
                rows.append((RECORDS, labels[owners[b]], c, b, t, encode_rows(part, shape)))


def held_task(
    plan: "Plan", info: BatchInfo, name: str, path: str = "the held-back records file"
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """Records held back by earlier batches (cells of ``[[time, record], ...]``, read
    from the held-back records file ``path``): those the frontier has reached go in,
    like fresh input; the others stay held."""
    node = plan.inputs[name]
    where = f"{path} (records held back for input {name!r})"

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        by_time: dict[int, list[Any]] = {}
        for batch in batches:
            for cell in batch.column("payload").to_pylist():
                for t, r in decode_records(cell, plan.records, where):
                    by_time.setdefault(t, []).append(r)
        yield from _route_input(plan, info, node, by_time)

    return run


def _route_input(plan: "Plan", info: BatchInfo, node: int, by_time: dict[int, list[Any]]) -> Iterator["pa.RecordBatch"]:
    routed: dict[tuple[int, int, int], list[Any]] = {}
    sinks: dict[tuple[int, int], list[Any]] = {}
    held: list[tuple[int, Any]] = []
    for t, rs in by_time.items():
        if info.hi is not None and t >= info.hi:
            held.extend((t, r) for r in rs)
        else:
            plan.push(node, t, rs, routed, sinks)
    rows: list[Row] = []
    emit(plan, info, routed, sinks, rows)
    if held:
        rows.append(held_row(node, encode_records(held, plan.nodes[node].name, plan.records)))
    yield arrow(rows)


def boundary_task(
    plan: "Plan", info: BatchInfo, nodes: "int | tuple[int, ...]"
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """The reduce side of one or more boundaries on one partition (see the module
    docstring).  Boundaries whose inputs are all ready share one stage: each cell goes
    to its ``node``, and each boundary runs over its own cells, in ``nodes`` order."""
    group = (nodes,) if isinstance(nodes, int) else tuple(nodes)

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        received, counts = _received(plan, info, group, batches)
        rows: list[Row] = []
        for node in group:
            groups = received[node]
            if isinstance(plan.nodes[node].op, Exchange):
                routed: dict[tuple[int, int, int], list[Any]] = {}
                sinks: dict[tuple[int, int], list[Any]] = {}
                for t in sorted(groups):
                    for recs in groups[t].values():
                        plan.push(node, t, recs, routed, sinks)
                emit(plan, info, routed, sinks, rows)
                stats: dict[str, Any] = {}
            else:
                stats = _stateful(plan, info, node, partition, groups, rows)
            stats["records"] = counts[node]
            rows.append(stats_row(node, partition, stats))
        yield arrow(rows)

    return profiled(run, "boundary")


def _received(
    plan: "Plan", info: BatchInfo, group: tuple[int, ...], batches: Iterable["pa.RecordBatch"]
) -> tuple[dict[int, dict[int, dict[int, list[Any]]]], dict[int, int]]:
    """The records of a boundary stage's cells: per node, time -> bin -> records, and
    how many each node received.  The cells are taken in their places before the
    stage's shuffle (:data:`~tstate.spark.wire.ORDER`: source partition, then row), not
    in the order the shuffle's blocks arrived in, so a bin's records keep the frame's
    order (rows without the column, in arrival order)."""
    found: list[tuple[int, int, int, int, Any]] = []  # (place, node, time, bin, payload)
    for batch in batches:
        kinds = batch.column("kind").to_pylist()
        targets = batch.column("node").to_pylist()
        bins = batch.column("bin").to_pylist()
        times = batch.column("time").to_pylist()
        places = batch.column(ORDER).to_pylist() if ORDER in batch.schema.names else itertools.repeat(0)
        for i, (p, place) in enumerate(zip(batch.column("payload").to_pylist(), places)):
            if kinds[i] == RECORDS:
                found.append((place, targets[i], times[i], bins[i], p))
    found.sort(key=_place)  # (stable)
    cells: dict[int, list[tuple[int, int]]] = {node: [] for node in group}
    payloads: dict[int, list[Any]] = {node: [] for node in group}
    for _place_, node_, t_, b_, p_ in found:
        cells[node_].append((t_, b_))
        payloads[node_].append(p_)
    received: dict[int, dict[int, dict[int, list[Any]]]] = {node: {} for node in group}
    counts = dict.fromkeys(group, 0)

    def add(node: int, t: int, b: int, recs: list[Any]) -> None:
        counts[node] += len(recs)
        at = received[node].setdefault(t, {})
        lst = at.get(b)
        if lst is None:
            at[b] = list(recs)
        else:
            lst.extend(recs)

    for node in group:
        here = cells[node]
        single = [i for i, (_t, b) in enumerate(here) if b >= 0]
        binned = [i for i, (_t, b) in enumerate(here) if b == BINNED]

        def where(j: int, here: list[tuple[int, int]] = here, node: int = node, which: list[int] = single) -> str:
            t, b = here[which[j]]
            return cell_where(plan, info, node, b, t)

        decoded = dict(zip(single, decode_cells([payloads[node][i] for i in single], plan.records, where)))
        by_bin = dict(zip(binned, decode_binned(
            [payloads[node][i] for i in binned], plan.records, functools.partial(where, which=binned)
        )))  # fmt: skip
        for i, (t, b) in enumerate(here):
            if b >= 0:
                add(node, t, b, decoded[i])
                continue
            if b == BINNED:
                for b2, recs in by_bin[i]:
                    add(node, t, b2, recs)
                continue
            bins_, also = decode_groups(payloads[node][i], plan.records, cell_where(plan, info, node, GROUPED, t))
            for to in (node, *also):
                for b2, recs in bins_:
                    add(to, t, b2, recs)
    return received, counts


_place = operator.itemgetter(0)  # (a cell's place: C, not a Python call per cell)


def _stateful(
    plan: "Plan",
    info: BatchInfo,
    node: int,
    partition: int,
    groups: dict[int, dict[int, list[Any]]],
    rows: list[Row],
    check: Optional[Callable[[StatefulHost, dict[int, Any]], None]] = None,
) -> dict[str, Any]:
    """Stateful boundary ``node`` on ``partition`` over ``groups`` (time -> bin ->
    records): its outputs go on through the fused chain, its changed bins to the store.
    ``check(host, installed bins)``: called after the operator ran, before anything is
    written (it raises to fail the task)."""
    host = StatefulHost(plan, node, state=info.state)
    pn = plan.nodes[node]
    m, stored_fp = stored_fingerprint(info, pn, host.codec)
    owners = info.owners[node]
    needed = {b for bins in groups.values() for b in bins} | {
        b for b in info.due.get(node, ()) if owners[b] == partition
    }
    if info.handover == info.batch:  # a pre-copy hand-over: the new owner installs every bin it got
        needed |= {b for b in info.moved.get(node, ()) if owners[b] == partition}
    loaded, found = host.take(info, m, needed, stored_fp, partition)
    produced = host.run_batch(info, groups)
    if check is not None:
        check(host, loaded)
    # outputs, through the fused chain after the operator
    routed: dict[tuple[int, int, int], list[Any]] = {}
    sinks: dict[tuple[int, int], list[Any]] = {}
    for t, recs in sorted(produced.items(), key=lambda kv: kv[0]):
        plan.push(node, t, recs, routed, sinks)
    emit(plan, info, routed, sinks, rows)
    written = write_bins(
        info, m, pn, host.codec, loaded, rows, lambda b: min(b.timers) if b.timers else None, partition
    )
    loads = 0
    if info.prefetch.get(node) and info.state is None:  # pre-copy (RocksDB state: the new owner ingests the file): this process loads the moving bins while it would idle
        from tstate.spark import binstore

        loads = binstore.prefetch(info.directory, m, pn.name, host.codec, stored_fp, info.prefetch[node], info.handover)
    return {
        "hits": found["hit"], "catchups": found["catch-up"], "misses": found["miss"], "bytes": written,
        "take_us": found["us"], "prefetched": found["prefetched"], "read_bytes": found["read"],
        "handover_bins": found["handover_bins"], "handover_bytes": found["handover_bytes"], "prefetch_loads": loads,
    }
