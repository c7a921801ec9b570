"""Iterate scopes on Spark: a loop runs in *rounds* within a micro-batch until every time
of the batch's epochs is done.

Inside an iterate scope time is ``Product(epoch, inner)`` (partially ordered).  The driver
knows every time that still has work in the loop: the times of the records in flight to
the loop's keyed operators (each task reports the times of the cells it emits, a
``TIMES`` row) and, per bin, the minimal times of its pending timers (reported with the
bin's state file).  One round processes the **minimal** pending times ``M`` (nothing can
still arrive before them: anything that follows from pending work is at or after some
pending time).  Each of the loop's keyed operators runs once per round, in topological
order (a record at ``m`` that passes several of them reaches each within the round; one
that goes around the loop comes back at ``m + (0, step)``: next round), with the
frontier

    ``F = min( (pending - M)  ∪  { m + (0, 1) : m in M }  ∪  { (hi, 0) } )``

(``hi``: the first epoch of the next micro-batch; omitted when the inputs are closed).
Under ``F`` the embedded engine's own operator code applies the records and fires the
timers that are ready -- exactly those at ``M`` and whatever they lead to within the
round -- and leaves the rest; records it cannot apply yet go back in flight.  Rounds
repeat until no pending time belongs to the batch's epochs.  Records leaving the loop
flow on to the operators after it; records and timers at later epochs wait for their
batch (held records, timers in bins).

Loops that do not feed each other (their inputs are all ready) run their rounds
together: one Spark stage runs the ``k``-th keyed operator of each, each loop with its
own frontier (their times are unrelated), so a batch costs the rounds of its longest
loop, not their sum.

The state files written by a round extend the bins' chains within the batch's
checkpoint (an *overlay* over the committed manifest that the next round's tasks read:
the executor cache stays valid from round to round); the batch commits once, after the
last round, so a failure anywhere in the loop commits nothing.

**Small loops run in one task.**  A Spark stage per round costs a fraction of a second
however little the round does, and a loop may need a hundred rounds per epoch.  When
the stored state of the loops' operators is at most ``Backend(local_loops=...)`` bytes
(default 64 MiB), the driver instead sends every record entering them to one task
(:func:`local_loop_task`), which runs the same rounds -- the same frontiers, the same
order of operators, the same operator code -- with the bins in memory from round to
round, writes each changed bin once at the end and reports how many rounds it ran: one
Spark stage per batch for the loops, and the results of one worker (the embedded
engine's on one worker, exactly).

A cell of records for a boundary inside a scope carries its full time as the cell's
first element (the ``time`` column holds the epoch).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

import msgpack
from attrs import frozen

from tstate.progress.timestamp import Product
from tstate.spark.record_types import BUILTIN, RecordTypes
from tstate.spark.records import decode_records, encode_records

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import Plan
    from tstate.spark.task import BatchInfo

__all__ = ["RoundInfo", "Overlay", "minimal", "round_frontier", "loop_task", "encode_cell", "decode_cell", "timer_antichain"]

#: a row kind: the times of the cells a task emitted for boundaries inside loops
#: (``node``: the boundary, ``payload``: ``[[epoch, inner], ...]``)
TIMES = 6
#: a loop whose operators' stored state is at most this many bytes runs all its rounds
#: of a batch in one task (:func:`local_loop_task`; ``Backend(local_loops=...)``)
LOCAL_LOOP_BYTES = 64 << 20
#: a row kind: how many rounds a task that ran loops by itself took (``payload``: the count)
ROUNDS = 7


def minimal(times: Iterable[Product]) -> list[Product]:
    """The minimal elements of ``times`` under the product order (sorted)."""
    out: list[Product] = []
    for t in sorted(set(times)):  # lexicographic: a predecessor is always met first
        if not any(m.less_equal(t) for m in out):
            out.append(t)
    return out


def round_frontier(pending: Iterable[Product], ready: list[Product], hi: Optional[int]) -> list[Product]:
    """The frontier of a round that processes ``ready`` (the minimal pending times)
    out of ``pending`` (see the module docstring)."""
    done = set(ready)
    cand = [t for t in pending if t not in done]
    cand.extend(Product(m.outer, m.inner + 1) for m in ready)
    if hi is not None:
        cand.append(Product(hi, 0))
    return minimal(cand)


def passed(frontier: list[Product], t: Product) -> bool:
    """Whether the frontier has passed ``t`` (no element ``<= t``)."""
    return not any(f.less_equal(t) for f in frontier)


def timer_antichain(times: Iterable[Any]) -> Optional[list[list[int]]]:
    """A bin's pending timer times as the driver keeps them: the minimal ones, as
    ``[[epoch, inner], ...]`` (None: no timers)."""
    m = minimal(t if type(t) is Product else Product(t, 0) for t in times)
    return [[t.outer, t.inner] for t in m] if m else None


def encode_cell(t: Product, recs: list[Any], operator: str, types: RecordTypes = BUILTIN) -> bytes:
    """A cell for a boundary inside a loop: its full time, then the records."""
    return encode_records([t, *recs], operator, types)


def decode_cell(payload: bytes, types: RecordTypes = BUILTIN, where: Any = "a loop's shuffle cell") -> tuple[Product, list[Any]]:
    """The time and records of a cell written by :func:`encode_cell` (``types``, ``where``:
    as :func:`~tstate.spark.records.decode_records`)."""
    recs = decode_records(payload, types, where)
    return recs[0], recs[1:]


@frozen
class RoundInfo:
    """What the driver tells the tasks of one round of a loop."""

    round: int
    #: per boundary of the loop(s): the round's frontier
    frontier: dict[int, tuple[Product, ...]]
    #: per stateful boundary of the loop(s): bins with a timer the frontier passed
    due: dict[int, frozenset[int]]
    overlay: "Overlay"


@frozen
class Overlay:
    """The committed manifest's chains, extended by the files earlier rounds of this
    batch wrote: ``extra[operator][bin] = (replace, refs)``; ``refs`` None: dropped."""

    extra: dict[str, dict[int, tuple[bool, Any]]]

    def chain(self, m: Any, operator: str, b: int) -> tuple[Any, ...]:
        from tstate.spark import binstore

        base = binstore.chain(m, operator, b)
        e = self.extra.get(operator, {}).get(b)
        if e is None:
            return base
        replace, refs = e
        if refs is None:
            return ()
        return tuple(refs) if replace else (*base, *refs)


class _Manifest:
    """A committed manifest seen through an :class:`Overlay` (what binstore needs)."""

    def __init__(self, m: Any, overlay: Overlay, operator: str) -> None:
        self.m = m
        self.overlay = overlay
        self.operators = {operator: None}

    def chain(self, operator: str, b: int) -> tuple[Any, ...]:
        return self.overlay.chain(self.m, operator, b)


def emit_loop_cells(
    plan: "Plan", info: "BatchInfo", routed: dict[tuple[int, int, Any], list[Any]], rows: list[Any]
) -> None:
    """Cells at ``Product`` times (for boundaries inside a loop) and one ``TIMES`` row per
    target boundary; ``routed`` must hold only such cells."""
    from tstate.spark.task import RECORDS

    labels = info.labels
    times: dict[int, set[Product]] = {}
    for (node, b, t), recs in routed.items():
        rows.append((RECORDS, labels[info.owners[node][b]], node, b, t.outer, encode_cell(t, recs, plan.nodes[node].name, plan.records)))
        times.setdefault(node, set()).add(t)
    for node, ts_ in times.items():
        rows.append((TIMES, 0, node, 0, 0, msgpack.packb([[t.outer, t.inner] for t in ts_])))


def _loop_cells(
    plan: "Plan", info: "BatchInfo", nodes: Iterable[int], batches: Iterable["pa.RecordBatch"]
) -> tuple[dict[int, dict[Product, dict[int, list[Any]]]], dict[int, int]]:
    """The ``RECORDS`` cells of ``batches`` for the loops' boundaries ``nodes``: per node,
    time -> bin -> records (in arrival order), and the records per node."""
    from tstate.spark.task import RECORDS, cell_where

    groups: dict[int, dict[Product, dict[int, list[Any]]]] = {node: {} for node in nodes}
    counts = dict.fromkeys(groups, 0)
    for batch in batches:
        kinds = batch.column("kind").to_pylist()
        targets = batch.column("node").to_pylist()
        bins = batch.column("bin").to_pylist()
        payloads = batch.column("payload").to_pylist()
        for k, node, b, p in zip(kinds, targets, bins, payloads):
            if k != RECORDS:
                continue
            t, recs = decode_cell(p, plan.records, functools.partial(cell_where, plan, info, node, b, None))
            counts[node] += len(recs)
            groups[node].setdefault(t, {}).setdefault(b, []).extend(recs)
    return groups, counts


def loop_task(plan: "Plan", info: "BatchInfo", rnd: RoundInfo, nodes: tuple[int, ...]) -> Any:
    """One round of loop boundaries ``nodes`` (of independent loops) on one partition
    (module docstring)."""

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from pyspark import TaskContext

        from tstate.spark.task import STATS, _arrow, _emit

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        groups, counts = _loop_cells(plan, info, nodes, batches)
        rows: list[Any] = []
        for node in nodes:
            routed: dict[tuple[int, int, Any], list[Any]] = {}
            sinks: dict[tuple[int, int], list[Any]] = {}
            if plan.nodes[node].kind == "exchange":
                for t in sorted(groups[node]):
                    for recs in groups[node][t].values():
                        plan.push(node, t, recs, routed, sinks)
                stats: dict[str, Any] = {}
            else:
                stats = _stateful_round(plan, info, rnd, node, partition, groups[node], routed, sinks, rows)
            stats["records"] = counts[node]
            _emit(plan, info, routed, sinks, rows)
            rows.append((STATS, 0, node, partition, 0, msgpack.packb(stats)))
        yield _arrow(rows)

    return run


def _mini(plan: "Plan", node: int, frontier: list[Product]) -> tuple[Any, Any, Any, list[tuple[Any, Any]]]:
    """The stateful operator ``node`` alone in a one-worker execution, inside an iterate
    scope; a placing operator gives each record at its time and holds ``frontier``.
    Returns ``(input, execution, operator runtime, captured outputs)``."""
    import tstate as ts
    from tstate.engine.execution import Execution
    from tstate.operators.stateful import StatefulRuntime

    pn = plan.nodes[node]
    o = pn.options
    captured: list[tuple[Any, Any]] = []
    mini = ts.Dataflow(f"{plan.name}/{pn.name}")
    inp = mini.input("in", batch_size=1 << 30)
    ops: list[Any] = []

    def body(scope: Any, entered: Any) -> Any:
        @mini.unary_frontier(entered, name="place", state=list)
        def place(i: Any, out: Any, ctx: Any) -> None:
            for cap, batch in i:
                if not ctx.state:
                    ctx.state.extend(cap.delayed(f) for f in frontier)
                    ctx.state.append(None)  # (the frontier may be empty)
                for t, recs in batch:
                    if recs:
                        c = cap.delayed(t)
                        out.give_many(c, recs)
                        c.drop()

        st = mini._stateful(place, o["key"], o["state_type"], o["new_state"], o["bins"], pn.name, o["fold"])(o["fn"])
        if o["handlers"].get("on_notify") is not None:
            st.on_notify(o["handlers"]["on_notify"])
        ops.append(st.node)
        return st.inspect(lambda t, r: captured.append((t, r)))

    mini.iterate(inp, name="loop")(body)
    exe = Execution(mini.graph, 1)
    op = exe.operators[0][ops[0]]
    assert isinstance(op, StatefulRuntime)
    op.track_dirty = True
    op.keys = plan.router(node)
    return inp, exe, op, captured


def _feed(
    plan: "Plan",
    node: int,
    parts: tuple[Any, Any, Any, list[tuple[Any, Any]]],
    frontier: list[Product],
    groups: dict[Product, dict[int, list[Any]]],
    routed: dict[tuple[int, int, Any], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
) -> None:
    """Run one round of the operator built by :func:`_mini` (its bins installed) over
    ``groups`` (time -> bin -> records); its outputs go through the fused chain after it
    into ``routed``/``sinks``, and the records the frontier does not let in yet back in
    flight (``routed``)."""
    inp, exe, op, captured = parts
    times = sorted(groups)
    first = min([t.outer for t in times] + [f.outer for f in frontier] + [t.outer for t in op.timer_times.keys()] or [0])
    items = [(t, [r for b in sorted(groups[t]) for r in groups[t][b]]) for t in times] or [(Product(first, 0), [])]
    inp.send(items, time=first)
    inp.close()
    exe.step_while(lambda: True)
    by_time: dict[Any, list[Any]] = {}
    for t, r in captured:
        by_time.setdefault(t, []).append(r)
    for t, recs in sorted(by_time.items()):
        plan.push(node, t, recs, routed, sinks)
    if op.stash:
        bin_of = plan.router(node).bin
        key = plan.nodes[node].options["key"]
        for t, batches_ in op.stash.items():
            for recs in batches_:
                for r in recs:
                    routed.setdefault((node, bin_of(key(r)), t), []).append(r)


def _stored_fingerprint(info: "BatchInfo", pn: Any, codec: Any) -> tuple[Any, str]:
    from tstate.spark import binstore
    from tstate.types.schema import Schema

    m = binstore.manifest(info.directory, info.head)
    entry = m.operators.get(pn.name) if m is not None else None
    return m, (Schema.from_builtins(entry.schema).fingerprint if entry is not None else codec.fingerprint)


def _stateful_round(
    plan: "Plan",
    info: "BatchInfo",
    rnd: RoundInfo,
    node: int,
    partition: int,
    groups: dict[Product, dict[int, list[Any]]],
    routed: dict[tuple[int, int, Any], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
    rows: list[Any],
) -> dict[str, Any]:
    from tstate.spark.task import take_bins, write_bins

    pn = plan.nodes[node]
    frontier = list(rnd.frontier[node])
    parts = _mini(plan, node, frontier)
    op = parts[2]
    codec = op.codec
    m, stored_fp = _stored_fingerprint(info, pn, codec)
    view = _Manifest(m, rnd.overlay, pn.name)
    owners = info.owners[node]
    needed = {b for bins in groups.values() for b in bins} | {b for b in rnd.due.get(node, ()) if owners[b] == partition}
    loaded, found = take_bins(info, view, pn, op, needed, stored_fp)
    _feed(plan, node, parts, frontier, groups, routed, sinks)
    written = write_bins(info, view, pn, codec, loaded, rows, lambda b: timer_antichain(b.timers))
    return {"hits": found["hit"], "catchups": found["catch-up"], "misses": found["miss"], "bytes": written}


@frozen
class LocalLoops:
    """What the driver tells the one task that runs loops' rounds by itself (see
    :func:`local_loop_task`)."""

    #: per loop: its boundaries in topological order
    loops: tuple[tuple[int, ...], ...]
    #: per stateful boundary: the driver's pending timer times per bin
    timers: dict[int, dict[int, tuple[Product, ...]]]
    overlay: Overlay


def local_loop_task(plan: "Plan", info: "BatchInfo", job: LocalLoops) -> Any:
    """All rounds of independent loops in one task (the loops' records all in one
    partition): the driver's round loop (:meth:`LoopRun.run`) run here, round by round,
    with the same frontiers and the same order of operators, so the results are the
    same; but the rounds cost no Spark stage and no state files: the bins stay in
    memory from round to round and each changed bin is written once, at the end.

    Emits the records leaving the loops (and sink cells), ``FILE`` and ``STATS`` rows,
    the records still in flight at later epochs (cells for boundaries inside the loops,
    to be held) and one ``ROUNDS`` row (payload: the number of rounds)."""

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        from tstate.spark.task import STATS, _arrow, _emit, take_bins, write_bins

        inside = {b for lp in job.loops for b in lp}
        flight, _ = _loop_cells(plan, info, inside, batches)
        counts = dict.fromkeys(inside, 0)
        timers = {b: {bn: list(ts_) for bn, ts_ in job.timers.get(b, {}).items()} for b in inside}
        bins: dict[int, dict[int, Any]] = {b: {} for b in inside}
        codecs: dict[int, Any] = {}
        stats = {b: {"hits": 0, "catchups": 0, "misses": 0, "bytes": 0} for b in inside}
        exits: dict[tuple[int, int, Any], list[Any]] = {}
        exit_sinks: dict[tuple[int, int], list[Any]] = {}
        hi = info.hi
        rounds = 0
        while True:
            fronts: dict[int, list[Product]] = {}
            due: dict[int, set[int]] = {}
            active = []
            for lp in job.loops:
                every: set[Product] = set()
                for b in lp:
                    every.update(flight[b])
                    every.update(t for ts_ in timers[b].values() for t in ts_)
                ready = [t for t in every if hi is None or t.outer < hi]
                if not ready:
                    continue
                active.append(lp)
                front = round_frontier(every, minimal(ready), hi)
                for b in lp:
                    fronts[b] = front
                    due[b] = {bn for bn, ts_ in timers[b].items() if any(passed(front, t) for t in ts_)}
            if not active:
                break
            for k in range(max(len(lp) for lp in active)):
                for lp in active:
                    if k >= len(lp) or not (flight[lp[k]] or due[lp[k]]):
                        continue
                    node = lp[k]
                    groups, flight[node] = flight[node], {}
                    counts[node] += sum(len(recs) for g in groups.values() for recs in g.values())
                    routed: dict[tuple[int, int, Any], list[Any]] = {}
                    sinks: dict[tuple[int, int], list[Any]] = {}
                    if plan.nodes[node].kind == "exchange":
                        for t in sorted(groups):
                            for recs in groups[t].values():
                                plan.push(node, t, recs, routed, sinks)
                    else:
                        frontier = fronts[node]
                        parts = _mini(plan, node, frontier)
                        op = parts[2]
                        mine = bins[node]
                        codecs.setdefault(node, op.codec)
                        used = sorted({b for g in groups.values() for b in g} | due[node])
                        for b in used:
                            if b not in mine:
                                pn = plan.nodes[node]
                                m, fp = _stored_fingerprint(info, pn, op.codec)
                                loaded, found = take_bins(info, _Manifest(m, job.overlay, pn.name), pn, op, [b], fp)
                                mine[b] = loaded[b]
                                for name, n_ in (("hits", "hit"), ("catchups", "catch-up"), ("misses", "miss")):
                                    stats[node][name] += found[n_]
                            else:
                                op.install_bin(mine[b])
                        _feed(plan, node, parts, frontier, groups, routed, sinks)
                        for b in used:
                            a = timer_antichain(mine[b].timers)
                            if a is None:
                                timers[node].pop(b, None)
                            else:
                                timers[node][b] = [Product(*v) for v in a]
                    for (n, b, t), recs in routed.items():
                        if n in inside:
                            flight[n].setdefault(t, {}).setdefault(b, []).extend(recs)
                        else:
                            exits.setdefault((n, b, t), []).extend(recs)
                    for key, recs in sinks.items():
                        exit_sinks.setdefault(key, []).extend(recs)
            rounds += 1
        rows: list[Any] = []
        # the records still in flight (at epochs after the batch): held by the driver
        left = {(n, b, t): recs for n, g in flight.items() for t, by_bin in g.items() for b, recs in by_bin.items()}
        _emit(plan, info, exits, exit_sinks, rows)
        if left:
            emit_loop_cells(plan, info, left, rows)
        for node, mine in bins.items():
            if mine:
                pn = plan.nodes[node]
                m, _fp = _stored_fingerprint(info, pn, codecs[node])
                view = _Manifest(m, job.overlay, pn.name)
                stats[node]["bytes"] = write_bins(info, view, pn, codecs[node], mine, rows, lambda b: timer_antichain(b.timers))
        for node in sorted(inside):
            rows.append((STATS, 0, node, 0, 0, msgpack.packb({**stats[node], "records": counts[node]})))
        rows.append((ROUNDS, 0, 0, 0, 0, msgpack.packb(rounds)))
        yield _arrow(rows)

    return run


class LoopRun:
    """The driver's side of one or more independent loops in one micro-batch (module
    docstring): their rounds run together, the k-th boundary of each loop in one stage.

    ``backend``: the :class:`~tstate.spark.backend.Backend`; ``cells``: DataFrames of the
    records entering the loops (``RECORDS`` rows, possibly for other boundaries too);
    ``times``: per boundary, the times of those records (from ``TIMES`` rows)."""

    def __init__(self, backend: Any, lps: list[Any], info: "BatchInfo", writer: Any, overlay: dict[str, Any]) -> None:
        self.be = backend
        self.plan = backend._plan
        self.lps = lps
        self.info = info
        self.writer = writer
        self.overlay = overlay
        self.rounds = 0
        self.stages = 0
        self.persisted: list[Any] = []

    def _timer_times(self) -> dict[int, dict[int, list[Product]]]:
        out: dict[int, dict[int, list[Product]]] = {}
        for lp in self.lps:
            for b in lp.boundaries:
                bins = self.be._timers.get(self.plan.nodes[b].name, {})
                out[b] = {
                    bn: ([Product(*v) for v in ts_] if isinstance(ts_, list) else [Product(int(ts_), 0)])
                    for bn, ts_ in bins.items()
                }
        return out

    def run(self, cells: list[Any], times: dict[int, set[Product]], labels: tuple[int, ...]) -> tuple[Any, list[Any], list[Any]]:
        """Run rounds until the batch's times are done.  Returns the records leaving
        the loops (a DataFrame of ``RECORDS`` rows for boundaries outside them, or
        None), the non-record rows of every stage, and the rows of records still in
        flight at later epochs (to be held)."""
        from tstate.spark import task as T

        plan, info = self.plan, self.info
        hi = info.hi
        inside = {b for lp in self.lps for b in lp.boundaries}
        in_list = ", ".join(str(b) for b in sorted(inside))
        n = len(labels)
        pending = {b: set(times.get(b, ())) for b in inside}
        parts = [c.where(f"kind = {T.RECORDS} and node in ({in_list})") for c in cells]
        limit = getattr(self.be, "local_loops", LOCAL_LOOP_BYTES)
        if limit > 0 and self._ready(pending) and self._state_bytes() <= limit:
            return self._run_local(parts, labels, in_list)
        exits: list[Any] = []
        collected: list[Any] = []
        while True:
            timers = self._timer_times()
            fronts: dict[int, tuple[Product, ...]] = {}
            due: dict[int, frozenset[int]] = {}
            active = []
            for lp in self.lps:  # each loop's own frontier: their times are unrelated
                every = set().union(*(pending[b] for b in lp.boundaries))
                every |= {t for b in lp.boundaries for ts_ in timers[b].values() for t in ts_}
                ready = [t for t in every if hi is None or t.outer < hi]
                if not ready:
                    continue
                active.append(lp)
                front = round_frontier(every, minimal(ready), hi)
                for b in lp.boundaries:
                    fronts[b] = tuple(front)
                    due[b] = frozenset(bn for bn, ts_ in timers[b].items() if any(passed(front, t) for t in ts_))
            if not active:
                break
            rnd = RoundInfo(self.rounds, fronts, due, Overlay({k: dict(v) for k, v in self.overlay.items()}))
            fresh: list[Any] = []  # this round's outputs: what is left in flight after it
            for k in range(max(len(lp.boundaries) for lp in active)):
                nodes = tuple(
                    lp.boundaries[k] for lp in active
                    if k < len(lp.boundaries) and (pending[lp.boundaries[k]] or due[lp.boundaries[k]])
                )
                if not nodes:
                    continue
                these = ", ".join(map(str, nodes))
                inp = self.be._ticks_for(nodes[0], labels)
                for b in nodes[1:]:
                    inp = inp.unionAll(self.be._ticks_for(b, labels))
                for p in parts:
                    inp = inp.unionAll(p.where(f"node in ({these})"))
                out = inp.repartition(n, "dest").mapInArrow(loop_task(plan, info, rnd, nodes), T.SCHEMA)
                out = out.localCheckpoint(eager=False)  # computed once, by the collect below; no lineage
                self.persisted.append(out)
                self.stages += 1
                rows = out.where(f"kind != {T.RECORDS}").collect()
                for b in nodes:
                    pending[b] = set()
                for r in rows:
                    kind = r["kind"]
                    if kind == TIMES:
                        pending.setdefault(r["node"], set()).update(Product(*v) for v in msgpack.unpackb(r["payload"]))
                    elif kind == T.FILE:
                        self._file(r)
                    else:
                        collected.append(r)
                parts = [p.where(f"node not in ({these})") for p in parts]
                mine = out.where(f"kind = {T.RECORDS} and node in ({in_list})")
                parts.append(mine)
                fresh = [p.where(f"node not in ({these})") for p in fresh] + [mine]
                exits.append(out.where(f"kind = {T.RECORDS} and node not in ({in_list})"))
            # every boundary with records in flight ran: what was in flight before the
            # round was consumed (applied or sent on again)
            parts = fresh
            self.rounds += 1
        left: list[Any] = []
        if any(pending.values()):  # records at later epochs: held until their batch
            for p in parts:
                left.extend(p.collect())
        wave = None
        for d in exits:
            wave = d if wave is None else wave.unionAll(d)
        return wave, collected, left
    def _ready(self, pending: dict[int, set[Product]]) -> bool:
        """Whether any record in flight or timer is at an epoch of this batch."""
        hi = self.info.hi
        timers = self._timer_times()
        for lp in self.lps:
            for b in lp.boundaries:
                every = set(pending[b]).union(*timers[b].values())
                if any(hi is None or t.outer < hi for t in every):
                    return True
        return False

    def _state_bytes(self) -> int:
        """The bytes of the stored state (the chains' files) of the loops' operators."""
        from tstate.spark import binstore

        m = binstore.manifest(self.info.directory, self.info.head)
        overlay = Overlay(self.overlay)
        total = 0
        for lp in self.lps:
            for b in lp.boundaries:
                pn = self.plan.nodes[b]
                if pn.kind == "stateful":
                    total += sum(ref.size for bn in range(pn.bins) for ref in overlay.chain(m, pn.name, bn))
        return total

    def _run_local(self, parts: list[Any], labels: tuple[int, ...], in_list: str) -> tuple[Any, list[Any], list[Any]]:
        """All rounds in one task (:func:`local_loop_task`): one Spark stage."""
        from tstate.spark import task as T

        timers = self._timer_times()
        job = LocalLoops(
            tuple(tuple(lp.boundaries) for lp in self.lps),
            {b: {bn: tuple(ts_) for bn, ts_ in by_bin.items()} for b, by_bin in timers.items()},
            Overlay({k: dict(v) for k, v in self.overlay.items()}),
        )
        inp = self.be._ticks_for(self.lps[0].boundaries[0], labels)  # the task runs even without records
        for p in parts:
            inp = inp.unionAll(p)
        out = inp.repartition(1).mapInArrow(local_loop_task(self.plan, self.info, job), T.SCHEMA)
        out = out.localCheckpoint(eager=False)  # computed once, by the collect below
        self.persisted.append(out)
        self.stages += 1
        collected: list[Any] = []
        left: list[Any] = []
        for r in out.where(f"kind != {T.RECORDS} or node in ({in_list})").collect():
            kind = r["kind"]
            if kind == ROUNDS:
                self.rounds += msgpack.unpackb(r["payload"])
            elif kind == TIMES:
                continue
            elif kind == T.FILE:
                self._file(r)
            elif kind == T.RECORDS:
                left.append(r)
            else:
                collected.append(r)
        return out.where(f"kind = {T.RECORDS} and node not in ({in_list})"), collected, left

    def _file(self, r: Any) -> None:
        from tstate.checkpoint.manifest import FileRef

        path, size, checksum, fkind, first = msgpack.unpackb(r["payload"])
        b = r["bin"]
        opname = self.plan.nodes[r["node"]].name
        timers = self.be._timers.setdefault(opname, {})
        chains = self.overlay.setdefault(opname, {})
        if fkind == "drop":
            self.writer.drop_bin(opname, b)
            timers.pop(b, None)
            chains[b] = (True, None)
            return
        ref = FileRef(path, size, checksum)
        self.writer.adopt(opname, b, [ref], replace=fkind == "snap")
        prev = chains.get(b)
        if fkind == "snap" or (prev is not None and prev[1] is None):
            chains[b] = (True, [ref])
        elif prev is None:
            chains[b] = (False, [ref])
        else:
            chains[b] = (prev[0], [*prev[1], ref])
        if first is None:
            timers.pop(b, None)
        else:
            timers[b] = first
