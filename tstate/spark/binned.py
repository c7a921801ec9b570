"""Records that carry the bin the JVM computed for their row, through a fused chain.

On the colocated path (:mod:`tstate.spark.colocated`) every row arrives with its bin
(the ``xxhash64`` of the key's columns, computed by Spark: :data:`BIN`), so the task
need not read the key and hash it again.  :func:`rows_by_time` groups a partition's
rows by time, and within a time by bin (a stable numpy sort: arrival order within a
bin), the bins kept beside the records as a numpy array; :func:`push_binned` walks the
fused chain from the input to the operators carrying the bins along -- ``map`` and
``inspect`` keep them (one output per record), ``filter`` and ``flat_map`` are applied
record by record so that each output keeps its record's bin -- and gives each operator
its records as ``time -> bin -> records`` slices cut where the bin changes.

:func:`chain_carries_bins` says whether a plan's chain is made only of those operators
(anything else takes the key-reading path).  A ``map`` or ``flat_map`` may change the
key field; the bins are then checked (:func:`check_bins`): a fold's records before it
runs (it trusts the bin it is given), other operators' after it, by the bins they had
to make beyond the ones installed (a record whose key's bin differs from its row's
lands in a bin the task did not install).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Callable, Optional

from tstate.plan import Filter, FlatMap, Inspect, Map

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from tstate.spark.plan import Plan

__all__ = ["BIN", "chain_carries_bins", "rows_by_time", "push_binned", "check_bins"]

#: the column holding a row's bin on the colocated path
BIN = "__tstate_bin"
_KEEPS = (Map, Inspect)
_CARRIED = (Map, Inspect, Filter, FlatMap)

#: time -> bin -> records
Groups = dict[int, dict[int, list[Any]]]


def chain_carries_bins(plan: "Plan", node: int, boundaries: list[int]) -> bool:
    """Whether every operator between input ``node`` and ``boundaries`` is a ``map``,
    ``filter``, ``flat_map`` or ``inspect`` (the rest are sinks)."""
    todo = [c for c, _ in plan.nodes[node].consumers]
    while todo:
        c = todo.pop()
        if c in boundaries or c in plan.sinks:
            continue
        if type(plan.nodes[c].op) not in _CARRIED:
            return False
        todo.extend(d for d, _ in plan.nodes[c].consumers)
    return True


def rows_by_time(
    recs: list[Any], bins: "np.ndarray", times: "Optional[np.ndarray]", at: int, lo: int, hi: Optional[int],
    by_time: dict[int, tuple[list[Any], Any]], held: list[tuple[int, Any]],
) -> int:
    """Add one Arrow batch's records (``bins``: their bins; ``times``: their times,
    None: all at ``at``; a null time is below ``lo``) to ``by_time`` (time ->
    (records, bins), sorted by bin within the time), those at or after ``hi`` to
    ``held``; returns how many were late (before ``lo``)."""
    import numpy as np

    if times is None:
        times = np.full(len(recs), at, dtype=np.int64)
    late = times < lo
    ok = ~late
    if hi is not None:
        ahead = ok & (times >= hi)
        if ahead.any():
            held.extend((int(times[i]), recs[i]) for i in np.flatnonzero(ahead))
            ok &= ~ahead
    idx = np.flatnonzero(ok)
    if not len(idx):
        return int(late.sum())
    order = idx[np.lexsort((bins[idx], times[idx]))]
    st = times[order]
    cut = np.flatnonzero(st[1:] != st[:-1]) + 1
    for s, e in zip([0, *cut.tolist()], [*cut.tolist(), len(order)]):
        sel = order[s:e]
        rs = [recs[i] for i in sel.tolist()]
        t = int(st[s])
        got = by_time.get(t)
        if got is None:
            by_time[t] = (rs, bins[sel])
        else:  # a later Arrow batch of the same time: merged, still sorted by bin (stable)
            both = np.concatenate((got[1], bins[sel]))
            o = np.argsort(both, kind="stable")
            merged = got[0] + rs
            by_time[t] = ([merged[i] for i in o.tolist()], both[o])
    return int(late.sum())


def push_binned(
    plan: "Plan", node: int, t: int, recs: list[Any], bins: "np.ndarray", changed: bool,
    groups: dict[int, Groups], changers: set[int], sinks: dict[tuple[int, int], list[Any]],
) -> None:
    """Records ``recs`` (their bins ``bins``, sorted) out of ``node`` at ``t``, through
    the chain (see the module docstring) into ``groups[boundary][t][bin]`` and
    ``sinks``; ``changers`` gets the boundaries reached through a ``map`` or
    ``flat_map`` (``changed``: one is behind already)."""
    import numpy as np

    if not recs:
        return
    for c, _port in plan.nodes[node].consumers:
        if c in groups:
            if changed:
                changers.add(c)
            at = groups[c].setdefault(t, {})
            cut = (np.flatnonzero(bins[1:] != bins[:-1]) + 1).tolist()
            for s, e in zip([0, *cut], [*cut, len(recs)]):
                b = int(bins[s])
                lst = at.get(b)
                if lst is None:
                    at[b] = recs[s:e]
                else:
                    lst.extend(recs[s:e])
        elif c in plan.sinks:
            sinks.setdefault((c, t), []).extend(recs)
        else:
            op = plan.nodes[c].op
            out, out_bins = _carry(op, t, recs, bins)
            push_binned(plan, c, t, out, out_bins, changed or type(op) not in (Filter, Inspect), groups, changers, sinks)


def _carry(op: Any, t: int, recs: list[Any], bins: "np.ndarray") -> tuple[list[Any], "np.ndarray"]:
    """Operator ``op``'s output for ``recs`` and each output's bin."""
    import numpy as np

    try:
        if type(op) in _KEEPS:
            return op.apply(t, recs), bins
        if type(op) is Filter:
            keep = np.fromiter(map(bool, map(op.predicate, recs)), dtype=bool, count=len(recs))
            return list(itertools.compress(recs, keep)), bins[keep]
        outs = [list(op.fn(r)) for r in recs]
        counts = np.fromiter(map(len, outs), dtype=np.int64, count=len(outs))
        return list(itertools.chain.from_iterable(outs)), np.repeat(bins, counts)
    except Exception:
        from tstate.spark.plan import _apply

        _apply(op, t, recs)  # raises the error naming the operator, the time and the record
        raise


def check_bins(plan: "Plan", node: int, groups: Groups, fail: Callable[[int, int, Any], None]) -> None:
    """Check that every record of ``groups`` (boundary ``node``'s) is in its key's bin;
    ``fail(bin, time, record)`` raises the error for the first that is not."""
    bin_of = plan.router(node).bin
    key = plan.nodes[node].key
    for t, at in groups.items():
        for b, recs in at.items():
            for r in recs:
                if bin_of(key(r)) != b:
                    fail(b, t, r)
