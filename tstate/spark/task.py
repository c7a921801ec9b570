"""What runs inside Spark tasks: input routing and the per-partition work of a boundary.

Every task speaks one Arrow schema (:data:`SCHEMA`); a row is one of

- ``RECORDS``: a group of records for boundary ``node``, bin ``bin``, time ``time``,
  shuffled to the partition labelled ``dest`` (``payload``: :mod:`~tstate.spark.records`);
  with ``bin`` = :data:`GROUPED`, the records of all the bins one task sends to one
  partition for ``(node, time)``, in one cell (not when the plan has frontier operators,
  whose records at later times are held and re-routed bin by bin);
- ``SINK``: a part file the task wrote with the records that reached sink ``node``
  (``payload``: its :class:`~tstate.spark.output.Part`; the records never reach the driver);
- ``FILE``: a state file a task wrote for operator ``node``, bin ``bin`` (``payload``:
  path, size, checksum, kind, earliest timer);
- ``STATS``: per-task counters (cache hits and misses, records, late records);
- ``TICK``: one per partition and boundary, so that every partition runs (timers fire
  even where no record arrived);
- ``HELD``: event-time records ahead of the batch's frontier (allowed lateness): kept
  by the driver for a later batch (``payload``: ``[[time, record], ...]``).

A boundary's task rebuilds its operator in a one-worker embedded execution, installs
the bins it needs (:mod:`~tstate.spark.binstore`), feeds the records in time order,
advances the input to the batch's frontier (or closes it in the final batch), steps
until nothing is left, then writes each changed bin as a delta or snapshot file — the
embedded engine's own operator code, so both engines compute the same thing.

Fast paths (same results as the general ones): an input whose records go straight to
boundaries ships them as Arrow row cells cut out by a vectorised sort (only the key
function runs per row); a ``fold_bins`` operator gets one bin-tagged batch per bin
(:class:`~tstate.operators.stateful.BinBatch`), so its records are not keyed twice.
"""

from __future__ import annotations

import itertools
import secrets
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import msgpack
from attrs import frozen

from tstate.spark.records import decode_cells, decode_groups, decode_records, encode_groups, encode_records

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import Plan

__all__ = [
    "BatchInfo", "SCHEMA", "RECORDS", "SINK", "FILE", "STATS", "TICK", "HELD", "input_task", "held_task", "boundary_task",
]

RECORDS, SINK, FILE, STATS, TICK, HELD = 0, 1, 2, 3, 4, 5
#: the ``bin`` of a ``RECORDS`` row whose cell holds several bins' records
#: (:func:`~tstate.spark.records.encode_groups`)
GROUPED = -1
#: the Spark DDL schema of every task's output
SCHEMA = "kind int, dest int, node int, bin int, time long, payload binary"


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


def _arrow(rows: list[tuple[int, int, int, int, int, bytes]]) -> "pa.RecordBatch":
    import pyarrow as pa

    cols: list[Any] = list(zip(*rows)) if rows else [(), (), (), (), (), ()]
    types = [pa.int32(), pa.int32(), pa.int32(), pa.int32(), pa.int64(), pa.binary()]
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), t) for c, t in zip(cols, types)], names=["kind", "dest", "node", "bin", "time", "payload"]
    )


def _emit(
    plan: "Plan",
    info: BatchInfo,
    routed: dict[tuple[int, int, int], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
    rows: list[tuple[int, int, int, int, int, bytes]],
) -> None:
    labels = info.labels
    loop: dict[tuple[int, int, Any], list[Any]] = {}
    grouped: dict[tuple[int, int, int], list[tuple[int, list[Any]]]] = {}
    for (node, b, t), recs in routed.items():
        if t.__class__ is not int:  # a boundary inside an iterate scope (tstate.spark.rounds)
            loop[node, b, t] = recs
            continue
        dest = labels[info.owners[node][b]]
        if plan.delays:  # records at later times are held per bin (and re-routed by it)
            rows.append((RECORDS, dest, node, b, t, encode_records(recs, plan.nodes[node].name, plan.records)))
        else:
            grouped.setdefault((node, dest, t), []).append((b, recs))
    shared: dict[tuple[int, int, int], list[int]] = {}  # a cell -> the other operators it is for
    if grouped:
        for groups in grouped.values():
            groups.sort(key=lambda g: g[0])
        for a, b in plan.twins:
            for (node, dest, t), groups in list(grouped.items()):
                if node != b:
                    continue
                first = grouped.get((a, dest, t))
                if first is not None and _same(first, groups):
                    del grouped[node, dest, t]
                    shared.setdefault((a, dest, t), []).append(b)
    for (node, dest, t), groups in grouped.items():
        also = tuple(shared.get((node, dest, t), ()))
        if len(groups) == 1 and not also:
            b, recs = groups[0]
            rows.append((RECORDS, dest, node, b, t, encode_records(recs, plan.nodes[node].name, plan.records)))
        else:
            rows.append((RECORDS, dest, node, GROUPED, t, encode_groups(groups, plan.nodes[node].name, also, plan.records)))
    if loop:
        from tstate.spark.rounds import emit_loop_cells

        emit_loop_cells(plan, info, loop, rows)
    if sinks:  # written here, by the task; the driver gets a reference (tstate.spark.output)
        from tstate.spark.output import write_parts

        write_parts(plan, info, sinks, rows)


def _same(a: list[tuple[int, list[Any]]], b: list[tuple[int, list[Any]]]) -> bool:
    """Whether two operators' cells hold the same records (the same objects) in the
    same bins."""
    import operator

    return len(a) == len(b) and all(
        ba == bb and len(ra) == len(rb) and all(map(operator.is_, ra, rb)) for (ba, ra), (bb, rb) in zip(a, b)
    )


def cell_where(plan: "Plan", info: BatchInfo, node: int, b: int, t: Any) -> str:
    """A shuffle cell, named in errors: its batch, operator, bin and time."""
    at = "" if t is None else f", time {t}"
    return f"a shuffle cell of micro-batch {info.batch} for operator {plan.nodes[node].name!r} (bin {b}{at})"


def _to_records(batch: "pa.RecordBatch", shape: str) -> list[Any]:
    if shape == "dict":
        return batch.to_pylist()  # type: ignore[no-any-return]
    cols = [c.to_pylist() for c in batch.columns]
    if shape == "value":
        return cols[0]
    return list(zip(*cols))


def input_task(
    plan: "Plan", info: BatchInfo, name: str, shape: str, time_column: Optional[str], at: int = 0, late: Any = None
) -> Callable[[Iterable["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]:
    """The map side of an input: rows become records (``shape``: ``"dict"``,
    ``"tuple"`` or ``"value"``), at ``time_column``'s value or, without one, at ``at``
    (the micro-batch's epoch),
    pushed through the fused chain to the boundaries' shuffles and to sinks.  Records
    before the frontier are late: dropped and counted in the ``late`` accumulator;
    records at or after the batch's new frontier (allowed lateness) are held back."""
    node = plan.inputs[name]
    direct = _direct(plan, node)

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        # the whole partition is grouped before anything is emitted: one shuffle cell per
        # (boundary, bin, time), not one per Arrow batch
        if direct:
            seen: list["pa.RecordBatch"] = []
            it = iter(batches)
            fast = _rows_input(plan, info, node, shape, time_column, at, it, seen)
            if fast is not None:
                rows, dropped = fast
                if dropped and late is not None:
                    late.add(dropped)
                yield _arrow(rows)
                return
            batches = itertools.chain(seen, it)
        by_time: dict[int, list[Any]] = {}
        dropped = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            recs = _to_records(batch, shape)
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
        if dropped and late is not None:
            late.add(dropped)
        yield from _route_input(plan, info, node, by_time)

    return run


def _direct(plan: "Plan", node: int) -> bool:
    """Whether every consumer of input ``node`` is a boundary at the root scope or a
    sink: its records then reach them as the rows themselves (see :func:`_rows_input`)."""
    consumers = plan.nodes[node].consumers
    for c, _port in consumers:
        n = plan.nodes[c]
        if n.kind == "sink":
            continue
        if n.kind not in ("stateful", "exchange") or getattr(n, "loop", None) is not None:
            return False
    return bool(consumers)


def _rows_input(
    plan: "Plan",
    info: BatchInfo,
    node: int,
    shape: str,
    time_column: Optional[str],
    at: int,
    batches: Iterable["pa.RecordBatch"],
    seen: list["pa.RecordBatch"],
) -> Optional[tuple[list[tuple[int, int, int, int, int, bytes]], int]]:
    """The input task when the input feeds boundaries (and sinks) directly: the records
    are the rows, so a boundary's cell is the rows of its ``(bin, time)`` as Arrow
    (:func:`~tstate.spark.records.encode_rows`), cut out of the partition's rows by a
    vectorised sort on ``(time, bin)``; only the key function runs per row, batch by
    batch as Spark sends them (overlapping Spark's conversion of the next one).  Returns
    the output rows and the number of late rows, or None if a key function failed (the
    general path then raises the error naming the record; ``seen`` holds the batches
    consumed here)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from tstate.spark.records import encode_rows, rows_to_records

    lo, hi = info.lo, info.hi
    boundaries: list[tuple[int, Any, Any]] = [
        (c, plan.nodes[c].key, plan.router(c)) for c, _port in plan.nodes[node].consumers if plan.nodes[c].kind != "sink"
    ]
    sink_nodes = [c for c, _port in plan.nodes[node].consumers if plan.nodes[c].kind == "sink"]
    dropped = 0
    held: list[tuple[int, Any]] = []
    sel: list[Any] = []  # the records going in (not late, not held back), in order
    idx_parts: list[Any] = []  # their row numbers in the partition
    time_parts: list[Any] = []
    bin_parts: dict[int, list[int]] = {c: [] for c, _, _ in boundaries}
    offset = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        seen.append(batch)
        recs = rows_to_records(batch, shape)
        m = len(recs)
        if time_column is None:
            if hi is not None and at >= hi:
                held.extend((at, r) for r in recs)
                offset += m
                continue
            li = np.arange(m)
            lt = np.full(m, at, dtype=np.int64)
            part = recs
        else:
            col = batch.column(time_column)
            late = pc.fill_null(pc.less(col, lo), True)
            dropped += int(pc.sum(late).as_py() or 0)
            ok = pc.invert(late)
            if hi is not None:
                ahead = pc.and_(ok, pc.greater_equal(col, hi))
                if pc.any(ahead).as_py():
                    tl = col.to_pylist()
                    held.extend((tl[i], recs[i]) for i in pc.indices_nonzero(ahead).to_numpy())
                    ok = pc.and_(ok, pc.invert(ahead))
            li = pc.indices_nonzero(ok).to_numpy()
            lt = pc.take(col, pa.array(li)).to_numpy().astype(np.int64)
            part = recs if len(li) == m else [recs[i] for i in li]
        for c, key, router in boundaries:
            try:
                bin_parts[c].extend(router.bin_list(map(key, part)))
            except Exception:  # the general path reports it, naming the record
                return None
        idx_parts.append(li + offset)
        time_parts.append(lt)
        sel.extend(part)
        offset += m
    rows: list[tuple[int, int, int, int, int, bytes]] = []
    sinks: dict[tuple[int, int], list[Any]] = {}
    if sel:
        table = pa.Table.from_batches(seen)
        idx = np.concatenate(idx_parts)
        times = np.concatenate(time_parts)
        single = bool((times == times[0]).all())
        for c in sink_nodes:
            if single:
                sinks.setdefault((c, int(times[0])), []).extend(sel)
            else:
                for r, tt in zip(sel, times.tolist()):
                    sinks.setdefault((c, tt), []).append(r)
        labels = info.labels
        for c, _key, _router in boundaries:
            bins = np.asarray(bin_parts[c], dtype=np.int64)
            order = np.argsort(bins, kind="stable") if single else np.lexsort((bins, times))
            sb, st = bins[order], times[order]
            cut = np.flatnonzero((sb[1:] != sb[:-1]) | (st[1:] != st[:-1])) + 1
            starts = np.concatenate(([0], cut)).tolist()
            ends = np.concatenate((cut, [len(order)])).tolist()
            taken = table.take(pa.array(idx[order]))
            owners = info.owners[c]
            for s0, e0 in zip(starts, ends):
                b, t = int(sb[s0]), int(st[s0])
                rows.append((RECORDS, labels[owners[b]], c, b, t, encode_rows(taken.slice(s0, e0 - s0), shape)))
    _emit(plan, info, {}, sinks, rows)
    if held:
        rows.append((HELD, 0, node, 0, 0, encode_records(held, plan.nodes[node].name, plan.records)))
    return rows, dropped


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
    rows: list[tuple[int, int, int, int, int, bytes]] = []
    _emit(plan, info, routed, sinks, rows)
    if held:
        rows.append((HELD, 0, node, 0, 0, encode_records(held, plan.nodes[node].name, plan.records)))
    yield _arrow(rows)


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
        cells: dict[int, list[tuple[int, int]]] = {node: [] for node in group}
        payloads: dict[int, list[Any]] = {node: [] for node in group}
        for batch in batches:
            kinds = batch.column("kind").to_pylist()
            targets = batch.column("node").to_pylist()
            bins = batch.column("bin").to_pylist()
            times = batch.column("time").to_pylist()
            for i, p in enumerate(batch.column("payload").to_pylist()):
                if kinds[i] == RECORDS:
                    cells[targets[i]].append((times[i], bins[i]))
                    payloads[targets[i]].append(p)
        rows: list[tuple[int, int, int, int, int, bytes]] = []
        # per node: time -> bin -> records, in arrival order
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
            single = [i for i, (_t, b) in enumerate(cells[node]) if b != GROUPED]
            here = cells[node]

            def where(j: int, here: list[tuple[int, int]] = here, node: int = node) -> str:
                t, b = here[single[j]]
                return cell_where(plan, info, node, b, t)

            decoded = dict(zip(single, decode_cells([payloads[node][i] for i in single], plan.records, where)))
            for i, (t, b) in enumerate(cells[node]):
                if b != GROUPED:
                    add(node, t, b, decoded[i])
                    continue
                bins, also = decode_groups(payloads[node][i], plan.records, cell_where(plan, info, node, GROUPED, t))
                for to in (node, *also):
                    for b2, recs in bins:
                        add(to, t, b2, recs)
        for node in group:
            groups = received[node]
            n = counts[node]
            if plan.nodes[node].kind == "exchange":
                routed: dict[tuple[int, int, int], list[Any]] = {}
                sinks: dict[tuple[int, int], list[Any]] = {}
                for t in sorted(groups):
                    for recs in groups[t].values():
                        plan.push(node, t, recs, routed, sinks)
                _emit(plan, info, routed, sinks, rows)
                stats = {"records": n}
            else:
                stats = _stateful(plan, info, node, partition, groups, rows)
                stats["records"] = n
            rows.append((STATS, 0, node, partition, 0, msgpack.packb(stats)))
        yield _arrow(rows)

    return run


def take_bins(info: BatchInfo, m: Any, pn: Any, op: Any, needed: Iterable[int], stored_fp: str) -> tuple[dict[int, Any], dict[str, int]]:
    """Install the bins ``needed`` in ``op`` as of manifest ``m`` (from the executor's
    cache when it can: :mod:`~tstate.spark.binstore`); returns them and how they were
    found (``hit`` / ``catch-up`` / ``miss`` counts)."""
    from tstate.spark import binstore

    found = {"hit": 0, "catch-up": 0, "miss": 0}
    loaded = {}
    for b in sorted(needed):
        bin_, how = binstore.take(info.directory, m, pn.name, b, op.codec, stored_fp)
        found[how] += 1
        loaded[b] = bin_
        op.install_bin(bin_)
    return loaded, found


def write_bins(
    info: BatchInfo, m: Any, pn: Any, codec: Any, loaded: dict[int, Any], rows: list[Any], timers: Callable[[Any], Any]
) -> int:
    """Write each changed bin of ``loaded`` as a delta (or a snapshot, when its chain in
    ``m`` is long or absent) and report it in a ``FILE`` row (``timers(bin)``: what the
    driver keeps of its pending timers); give every bin back to the executor's cache,
    tagged with its version.  Returns the bytes written."""
    from tstate.checkpoint.delta import encode_change
    from tstate.checkpoint.store import write_data_file
    from tstate.spark import binstore

    fs = binstore.store(info.directory).fs
    token = info.token + secrets.token_hex(3)
    written = 0
    node = pn.node
    for b, bin_ in loaded.items():
        refs = binstore.chain(m, pn.name, b)
        version = refs[-1].path if refs else ""
        if bin_.changed():
            if bin_.is_empty():
                if refs:  # the bin had state: the checkpoint drops its chain
                    rows.append((FILE, 0, node, b, 0, msgpack.packb([None, 0, None, "drop", None])))
                version = ""
            else:
                snapshot = bin_.full or not refs or len(refs) + 1 > info.compact_after
                kind = "snap" if snapshot else "delta"
                data = encode_change(bin_, codec, snapshot=snapshot, operator=pn.name)
                ref = write_data_file(fs, pn.name, b, info.checkpoint, token, kind, data)
                written += ref.size
                version = ref.path
                payload = [ref.path, ref.size, ref.xxh64, kind, timers(bin_)]
                rows.append((FILE, 0, node, b, 0, msgpack.packb(payload)))
        binstore.give(info.directory, pn.name, bin_, version)
    return written


def _stateful(
    plan: "Plan",
    info: BatchInfo,
    node: int,
    partition: int,
    groups: dict[int, dict[int, list[Any]]],
    rows: list[tuple[int, int, int, int, int, bytes]],
) -> dict[str, Any]:
    import tstate as ts
    from tstate.engine.execution import Execution
    from tstate.operators.stateful import BinBatch, StatefulRuntime
    from tstate.spark import binstore
    from tstate.types.schema import Schema

    pn = plan.nodes[node]
    o = pn.options
    # the operator, alone in a one-worker execution
    mini = ts.Dataflow(f"{plan.name}/{pn.name}")
    inp = mini.input("in", batch_size=1 << 30)
    stream = mini._stateful(inp, o["key"], o["state_type"], o["new_state"], o["bins"], pn.name, o["fold"])(o["fn"])
    if o["handlers"].get("on_notify") is not None:
        stream.on_notify(o["handlers"]["on_notify"])
    produced: dict[Any, list[Any]] = {}  # time -> output records, in arrival order
    stream.sink(lambda t, recs: produced.setdefault(t, []).extend(recs))
    exe = Execution(mini.graph, 1)
    op = exe.operators[0][stream.node]
    assert isinstance(op, StatefulRuntime)
    op.track_dirty = True
    op.keys = plan.router(node)  # the process-wide memo of hashed keys
    codec = op.codec
    m = binstore.manifest(info.directory, info.head)
    entry = m.operators.get(pn.name) if m is not None else None
    stored_fp = Schema.from_builtins(entry.schema).fingerprint if entry is not None else codec.fingerprint
    owners = info.owners[node]
    needed = {b for bins in groups.values() for b in bins} | {
        b for b in info.due.get(node, ()) if owners[b] == partition
    }
    loaded, found = take_bins(info, m, pn, op, needed, stored_fp)
    if info.lo > 0:
        inp.advance_to(info.lo)
    for t in sorted(groups):
        if op.fold:  # one batch per bin, tagged with it: the fold does not key the records again
            for b in sorted(groups[t]):
                inp.send(BinBatch(groups[t][b], b), time=t)
        else:
            recs = [r for b in sorted(groups[t]) for r in groups[t][b]]
            inp.send(recs, time=t)
    if info.hi is None:
        inp.close()
    elif info.hi > info.lo:
        inp.advance_to(info.hi)
    exe.step_while(lambda: True)
    if op.stash or op.pending:  # pragma: no cover - times before hi are complete
        raise AssertionError(f"operator {pn.name!r}: records left unapplied at the end of batch {info.batch}")
    # outputs, through the fused chain after the operator
    routed: dict[tuple[int, int, int], list[Any]] = {}
    sinks: dict[tuple[int, int], list[Any]] = {}
    for t, recs in sorted(produced.items(), key=lambda kv: kv[0]):
        plan.push(node, t, recs, routed, sinks)
    _emit(plan, info, routed, sinks, rows)
    written = write_bins(info, m, pn, codec, loaded, rows, lambda b: min(b.timers) if b.timers else None)
    return {"hits": found["hit"], "catchups": found["catch-up"], "misses": found["miss"], "bytes": written}
