"""Shuffle cells: the records a task routed, as the ``RECORDS`` rows that carry them to
the partitions owning their bins (and the sink output it wrote, as ``SINK`` rows).

A task pushes records through the fused chain (:meth:`~tstate.spark.plan.Plan.push`),
which gives ``routed[(boundary, bin, time)]`` and ``sinks[(sink, time)]``;
:func:`emit` turns them into rows (:mod:`tstate.spark.wire`):

- at the root scope, the cells of all the bins one task sends to one partition for
  ``(boundary, time)`` go in one ``GROUPED`` cell, shared by twin boundaries fed the
  same records (:attr:`~tstate.spark.plan.Plan.twins`) -- not when the plan has frontier
  operators, whose records at later times are held and re-routed bin by bin;
- inside an iterate scope a cell carries its full ``Product`` time first
  (:func:`encode_cell`), and one ``TIMES`` row per boundary tells the driver which
  times are in flight (:mod:`tstate.spark.rounds`);
- sink records are written by the task to a part file (:func:`~tstate.spark.output.write_parts`).

>>> from tstate.progress.timestamp import Product
>>> decode_cell(encode_cell(Product(3, 1), ["a", "b"], "op"))
(Product(outer=3, inner=1), ['a', 'b'])
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from tstate.progress.timestamp import Product
from tstate.spark import output
from tstate.spark.record_types import BUILTIN, RecordTypes
from tstate.spark.records import decode_records, encode_groups, encode_records
from tstate.spark.wire import BINNED, GROUPED, RECORDS, BatchInfo, Row, times_row

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan

__all__ = ["emit", "emit_loop_cells", "encode_cell", "decode_cell", "cell_where"]


def emit(
    plan: "Plan",
    info: BatchInfo,
    routed: dict[tuple[int, int, Any], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
    rows: list[Row],
) -> None:
    """Add to ``rows`` the cells of ``routed`` (boundary, bin, time -> records) and the
    references of the part files ``sinks`` (sink, time -> records) are written to."""
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
        emit_loop_cells(plan, info, loop, rows)
    if sinks:  # written here, by the task; the driver gets a reference (tstate.spark.output)
        output.write_parts(plan, info, sinks, rows)  # (looked up at the call: tests wrap it)


def _same(a: list[tuple[int, list[Any]]], b: list[tuple[int, list[Any]]]) -> bool:
    """Whether two operators' cells hold the same records (the same objects) in the
    same bins."""
    return len(a) == len(b) and all(
        ba == bb and len(ra) == len(rb) and all(map(operator.is_, ra, rb)) for (ba, ra), (bb, rb) in zip(a, b)
    )


def emit_loop_cells(plan: "Plan", info: BatchInfo, routed: dict[tuple[int, int, Any], list[Any]], rows: list[Row]) -> None:
    """Cells at ``Product`` times (for boundaries inside a loop) and one ``TIMES`` row per
    target boundary; ``routed`` must hold only such cells."""
    labels = info.labels
    times: dict[int, set[Product]] = {}
    for (node, b, t), recs in routed.items():
        rows.append((RECORDS, labels[info.owners[node][b]], node, b, t.outer, encode_cell(t, recs, plan.nodes[node].name, plan.records)))
        times.setdefault(node, set()).add(t)
    for node, ts_ in times.items():
        rows.append(times_row(node, ts_))


def encode_cell(t: Product, recs: list[Any], operator: str, types: RecordTypes = BUILTIN) -> bytes:
    """A cell for a boundary inside a loop: its full time, then the records."""
    return encode_records([t, *recs], operator, types)


def decode_cell(payload: bytes, types: RecordTypes = BUILTIN, where: Any = "a loop's shuffle cell") -> tuple[Product, list[Any]]:
    """The time and records of a cell written by :func:`encode_cell` (``types``, ``where``:
    as :func:`~tstate.spark.records.decode_records`)."""
    recs = decode_records(payload, types, where)
    return recs[0], recs[1:]


def cell_where(plan: "Plan", info: BatchInfo, node: int, b: int, t: Any) -> str:
    """A shuffle cell, named in errors: its batch, operator, bin and time."""
    at = "" if t is None else f", time {t}"
    bins = "several bins" if b in (GROUPED, BINNED) else f"bin {b}"
    return f"a shuffle cell of micro-batch {info.batch} for operator {plan.nodes[node].name!r} ({bins}{at})"
