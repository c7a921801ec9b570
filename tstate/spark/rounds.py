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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

from attrs import frozen

from tstate.plan import Exchange, Stateful
from tstate.progress.rounds import minimal, next_round, passed, round_frontier
from tstate.progress.timestamp import Product
from tstate.spark.cells import cell_where, decode_cell, emit, emit_loop_cells
from tstate.spark.host import StatefulHost, stored_fingerprint, write_bins
from tstate.spark.wire import (
    FILE, RECORDS, ROUNDS, TIMES, BatchInfo, FileReport, Row, arrow, read_rounds, read_times, rounds_row, row_type,
    stats_row,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.plan import LoopScope, Plan

__all__ = [
    "RoundInfo", "Overlay", "LocalLoops", "LocalRounds", "LoopRun", "minimal", "round_frontier", "passed",
    "loop_task", "local_loop_task", "timer_antichain",
]

#: a loop whose operators' stored state is at most this many bytes runs all its rounds
#: of a batch in one task (:func:`local_loop_task`; ``Backend(local_loops=...)``)
LOCAL_LOOP_BYTES = 64 << 20


def timer_antichain(times: Iterable[Any]) -> Optional[list[list[int]]]:
    """A bin's pending timer times as the driver keeps them: the minimal ones, as
    ``[[epoch, inner], ...]`` (None: no timers)."""
    m = minimal(t if type(t) is Product else Product(t, 0) for t in times)
    return [[t.outer, t.inner] for t in m] if m else None


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


def _loop_cells(
    plan: "Plan", info: "BatchInfo", nodes: Iterable[int], batches: Iterable["pa.RecordBatch"]
) -> tuple[dict[int, dict[Product, dict[int, list[Any]]]], dict[int, int]]:
    """The ``RECORDS`` cells of ``batches`` for the loops' boundaries ``nodes``: per node,
    time -> bin -> records (in arrival order), and the records per node."""
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

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        groups, counts = _loop_cells(plan, info, nodes, batches)
        rows: list[Any] = []
        for node in nodes:
            routed: dict[tuple[int, int, Any], list[Any]] = {}
            sinks: dict[tuple[int, int], list[Any]] = {}
            if isinstance(plan.nodes[node].op, Exchange):
                for t in sorted(groups[node]):
                    for recs in groups[node][t].values():
                        plan.push(node, t, recs, routed, sinks)
                stats: dict[str, Any] = {}
            else:
                stats = _stateful_round(plan, info, rnd, node, partition, groups[node], routed, sinks, rows)
            stats["records"] = counts[node]
            emit(plan, info, routed, sinks, rows)
            rows.append(stats_row(node, partition, stats))
        yield arrow(rows)

    return run


def _push_round(
    plan: "Plan",
    host: StatefulHost,
    groups: dict[Product, dict[int, list[Any]]],
    routed: dict[tuple[int, int, Any], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
) -> None:
    """Run one round of ``host`` (its bins installed) over ``groups`` (time -> bin ->
    records); its outputs go through the fused chain after it into ``routed``/``sinks``,
    and the records the frontier does not let in yet back in flight (``routed``)."""
    node = host.node
    produced, waiting = host.run_round(groups)
    for t, recs in sorted(produced.items()):
        plan.push(node, t, recs, routed, sinks)
    for (b, t), recs in waiting.items():
        routed.setdefault((node, b, t), []).extend(recs)


def _stateful_round(
    plan: "Plan",
    info: BatchInfo,
    rnd: RoundInfo,
    node: int,
    partition: int,
    groups: dict[Product, dict[int, list[Any]]],
    routed: dict[tuple[int, int, Any], list[Any]],
    sinks: dict[tuple[int, int], list[Any]],
    rows: list[Row],
) -> dict[str, Any]:
    pn = plan.nodes[node]
    host = StatefulHost(plan, node, list(rnd.frontier[node]), state=info.state)
    m, stored_fp = stored_fingerprint(info, pn, host.codec)
    view = _Manifest(m, rnd.overlay, pn.name)
    owners = info.owners[node]
    needed = {b for bins in groups.values() for b in bins} | {b for b in rnd.due.get(node, ()) if owners[b] == partition}
    loaded, found = host.take(info, view, needed, stored_fp)
    _push_round(plan, host, groups, routed, sinks)
    written = write_bins(info, view, pn, host.codec, loaded, rows, lambda b: timer_antichain(b.timers))
    return {
        "hits": found["hit"], "catchups": found["catch-up"] + found["prefetched"], "misses": found["miss"],
        "bytes": written, "take_us": found["us"], "read_bytes": found["read"],
    }


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
    with the same frontiers (:func:`~tstate.progress.rounds.next_round`) and the same
    order of operators, so the results are the same; but the rounds cost no Spark stage
    and no state files: the bins stay in memory from round to round and each changed
    bin is written once, at the end (:class:`LocalRounds`).

    Emits the records leaving the loops (and sink cells), ``FILE`` and ``STATS`` rows,
    the records still in flight at later epochs (cells for boundaries inside the loops,
    to be held) and one ``ROUNDS`` row (payload: the number of rounds)."""

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        inside = {b for lp in job.loops for b in lp}
        flight, _ = _loop_cells(plan, info, inside, batches)
        local = LocalRounds(plan, info, job, flight)
        while local.round():
            pass
        yield arrow(local.rows())

    return run


class LocalRounds:
    """The rounds of :func:`local_loop_task` in one task: ``flight``, per boundary of
    the loops, the records in flight (time -> bin -> records); the bins each boundary
    took stay here from round to round."""

    def __init__(
        self, plan: "Plan", info: "BatchInfo", job: LocalLoops, flight: dict[int, dict[Product, dict[int, list[Any]]]]
    ) -> None:
        self.plan, self.info, self.job, self.flight = plan, info, job, flight
        self.inside = {b for lp in job.loops for b in lp}
        self.counts = dict.fromkeys(self.inside, 0)
        self.timers = {b: {bn: list(ts_) for bn, ts_ in job.timers.get(b, {}).items()} for b in self.inside}
        self.bins: dict[int, dict[int, Any]] = {b: {} for b in self.inside}
        self.codecs: dict[int, Any] = {}
        self.stats = {b: {"hits": 0, "catchups": 0, "misses": 0, "bytes": 0, "take_us": 0} for b in self.inside}
        self.exits: dict[tuple[int, int, Any], list[Any]] = {}
        self.exit_sinks: dict[tuple[int, int], list[Any]] = {}
        self.rounds = 0

    def round(self) -> bool:
        """Run the next round (the k-th boundary of every active loop, for each k);
        False: no loop had a time of the batch left."""
        rnd = next_round(self.job.loops, self.flight, self.timers, self.info.hi)
        if rnd is None:
            return False
        active = [self.job.loops[i] for i in rnd.active]
        for k in range(max(len(lp) for lp in active)):
            for lp in active:
                if k >= len(lp) or not (self.flight[lp[k]] or rnd.due[lp[k]]):
                    continue
                self._boundary(lp[k], rnd.frontier[lp[k]], rnd.due[lp[k]])
        self.rounds += 1
        return True

    def _boundary(self, node: int, front: tuple[Product, ...], due: frozenset[int]) -> None:
        """Boundary ``node`` takes its records in flight, under frontier ``front``
        (``due``: its bins with a timer it passed); what it gives goes back in flight or
        leaves the loops."""
        plan = self.plan
        groups, self.flight[node] = self.flight[node], {}
        self.counts[node] += sum(len(recs) for g in groups.values() for recs in g.values())
        routed: dict[tuple[int, int, Any], list[Any]] = {}
        sinks: dict[tuple[int, int], list[Any]] = {}
        if isinstance(plan.nodes[node].op, Exchange):
            for t in sorted(groups):
                for recs in groups[t].values():
                    plan.push(node, t, recs, routed, sinks)
        else:
            self._stateful(node, list(front), due, groups, routed, sinks)
        for (n, b, t), recs in routed.items():
            if n in self.inside:
                self.flight[n].setdefault(t, {}).setdefault(b, []).extend(recs)
            else:
                self.exits.setdefault((n, b, t), []).extend(recs)
        for key, recs in sinks.items():
            self.exit_sinks.setdefault(key, []).extend(recs)

    def _stateful(
        self,
        node: int,
        front: list[Product],
        due: frozenset[int],
        groups: dict[Product, dict[int, list[Any]]],
        routed: dict[tuple[int, int, Any], list[Any]],
        sinks: dict[tuple[int, int], list[Any]],
    ) -> None:
        """Stateful boundary ``node``'s round: its bins (taken from the store the first
        time, then kept) over ``groups``; its pending timers updated."""
        plan, info, stats = self.plan, self.info, self.stats[node]
        host = StatefulHost(plan, node, front, state=info.state)
        mine = self.bins[node]
        self.codecs.setdefault(node, host.codec)
        used = sorted({b for g in groups.values() for b in g} | due)
        for b in used:
            if b not in mine:
                pn = plan.nodes[node]
                m, fp = stored_fingerprint(info, pn, host.codec)
                loaded, found = host.take(info, _Manifest(m, self.job.overlay, pn.name), [b], fp)
                mine[b] = loaded[b]
                for name, n_ in (("hits", "hit"), ("catchups", "catch-up"), ("misses", "miss"), ("take_us", "us")):
                    stats[name] += found[n_]
                stats["catchups"] += found["prefetched"]
            else:
                host.op.install_bin(mine[b])
        _push_round(plan, host, groups, routed, sinks)
        for b in used:
            a = timer_antichain(mine[b].timers)
            if a is None:
                self.timers[node].pop(b, None)
            else:
                self.timers[node][b] = [Product(*v) for v in a]

    def rows(self) -> list[Any]:
        """After the last round: the records leaving the loops, those still in flight
        (at epochs after the batch: held by the driver), each changed bin written once,
        the ``STATS`` rows and the ``ROUNDS`` row."""
        plan, info = self.plan, self.info
        rows: list[Any] = []
        left = {
            (n, b, t): recs for n, g in self.flight.items() for t, by_bin in g.items() for b, recs in by_bin.items()
        }
        emit(plan, info, self.exits, self.exit_sinks, rows)
        if left:
            emit_loop_cells(plan, info, left, rows)
        for node, mine in self.bins.items():
            if mine:
                pn = plan.nodes[node]
                m, _fp = stored_fingerprint(info, pn, self.codecs[node])
                view = _Manifest(m, self.job.overlay, pn.name)
                self.stats[node]["bytes"] = write_bins(
                    info, view, pn, self.codecs[node], mine, rows, lambda b: timer_antichain(b.timers)
                )
        for node in sorted(self.inside):
            rows.append(stats_row(node, 0, {**self.stats[node], "records": self.counts[node]}))
        rows.append(rounds_row(self.rounds))
        return rows


class LoopRun:
    """The driver's side of one or more independent loops in one micro-batch (module
    docstring): their rounds run together, the k-th boundary of each loop in one stage.

    ``writer``: the batch's checkpoint being written (the rounds' state files go in);
    ``overlay``: the files written so far in the batch, per operator and bin
    (:class:`Overlay`'s ``extra``, extended here); ``timers``: the driver's pending timer
    times per operator and bin (updated here); ``ticks(nodes, labels)``: a DataFrame of
    one ``TICK`` row per partition; ``local_loops``: ``Backend(local_loops=...)``."""

    def __init__(
        self,
        plan: "Plan",
        lps: list["LoopScope"],
        info: BatchInfo,
        writer: Any,
        overlay: dict[str, Any],
        timers: dict[str, dict[int, Any]],
        ticks: Callable[[Any, tuple[int, ...]], Any],
        local_loops: int = LOCAL_LOOP_BYTES,
    ) -> None:
        self.plan = plan
        self.lps = lps
        self.info = info
        self.writer = writer
        self.overlay = overlay
        self.timers = timers
        self.ticks = ticks
        self.local_loops = local_loops
        #: Spark stages and rounds run, and the DataFrames to unpersist after the batch
        self.rounds = 0
        self.stages = 0
        self.persisted: list[Any] = []

    def _timer_times(self) -> dict[int, dict[int, list[Product]]]:
        out: dict[int, dict[int, list[Product]]] = {}
        for lp in self.lps:
            for b in lp.boundaries:
                bins = self.timers.get(self.plan.nodes[b].name, {})
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
        hi = self.info.hi
        inside = {b for lp in self.lps for b in lp.boundaries}
        in_list = ", ".join(str(b) for b in sorted(inside))
        pending = {b: set(times.get(b, ())) for b in inside}
        parts = [c.where(f"kind = {RECORDS} and node in ({in_list})") for c in cells]
        limit = self.local_loops
        if limit > 0 and self._ready(pending) and self._state_bytes() <= limit:
            return self._run_local(parts, labels, in_list)
        exits: list[Any] = []
        collected: list[Any] = []
        while True:
            step = next_round([lp.boundaries for lp in self.lps], pending, self._timer_times(), hi)
            if step is None:
                break
            active = [self.lps[i] for i in step.active]
            fronts, due = step.frontier, step.due
            rnd = RoundInfo(self.rounds, fronts, due, Overlay({k: dict(v) for k, v in self.overlay.items()}))
            fresh: list[Any] = []  # this round's outputs: what is left in flight after it
            for k in range(max(len(lp.boundaries) for lp in active)):
                nodes = tuple(
                    lp.boundaries[k] for lp in active
                    if k < len(lp.boundaries) and (pending[lp.boundaries[k]] or due[lp.boundaries[k]])
                )
                if not nodes:
                    continue
                out = self._stage(rnd, nodes, parts, labels, pending, collected)
                these = ", ".join(map(str, nodes))
                parts = [p.where(f"node not in ({these})") for p in parts]
                mine = out.where(f"kind = {RECORDS} and node in ({in_list})")
                parts.append(mine)
                fresh = [p.where(f"node not in ({these})") for p in fresh] + [mine]
                exits.append(out.where(f"kind = {RECORDS} and node not in ({in_list})"))
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

    def _stage(
        self,
        rnd: RoundInfo,
        nodes: tuple[int, ...],
        parts: list[Any],
        labels: tuple[int, ...],
        pending: dict[int, set[Product]],
        collected: list[Any],
    ) -> Any:
        """One Spark stage of round ``rnd``: boundaries ``nodes`` (the k-th of each
        active loop) over their records in ``parts``, a tick row per partition so that
        due timers fire everywhere.  Its rows for the driver: ``TIMES`` into
        ``pending`` (in place of the ran boundaries'), ``FILE`` into the checkpoint and
        the overlay, the rest into ``collected``; returns the stage's output."""
        these = ", ".join(map(str, nodes))
        inp = self.ticks(nodes[0], labels)
        for b in nodes[1:]:
            inp = inp.unionAll(self.ticks(b, labels))
        for p in parts:
            inp = inp.unionAll(p.where(f"node in ({these})"))
        out = inp.repartition(len(labels), "dest").mapInArrow(loop_task(self.plan, self.info, rnd, nodes), row_type())
        out = out.localCheckpoint(eager=False)  # computed once, by the collect below; no lineage
        self.persisted.append(out)
        self.stages += 1
        rows = out.where(f"kind != {RECORDS}").collect()
        for b in nodes:
            pending[b] = set()
        for r in rows:
            kind = r["kind"]
            if kind == TIMES:
                pending.setdefault(r["node"], set()).update(read_times(r["payload"]))
            elif kind == FILE:
                self._file(r)
            else:
                collected.append(r)
        return out

    def _ready(self, pending: dict[int, set[Product]]) -> bool:
        """Whether any record in flight or timer is at an epoch of this batch (there is
        a next round: :func:`~tstate.progress.rounds.next_round`, the one computation)."""
        return next_round([lp.boundaries for lp in self.lps], pending, self._timer_times(), self.info.hi) is not None

    def _state_bytes(self) -> int:
        """The bytes of the stored state (the chains' files) of the loops' operators."""
        from tstate.spark import binstore

        m = binstore.manifest(self.info.directory, self.info.head)
        overlay = Overlay(self.overlay)
        total = 0
        for lp in self.lps:
            for b in lp.boundaries:
                pn = self.plan.nodes[b]
                if isinstance(pn.op, Stateful):
                    total += sum(ref.size for bn in range(pn.bins) for ref in overlay.chain(m, pn.name, bn))
        return total

    def _run_local(self, parts: list[Any], labels: tuple[int, ...], in_list: str) -> tuple[Any, list[Any], list[Any]]:
        """All rounds in one task (:func:`local_loop_task`): one Spark stage."""

        timers = self._timer_times()
        job = LocalLoops(
            tuple(tuple(lp.boundaries) for lp in self.lps),
            {b: {bn: tuple(ts_) for bn, ts_ in by_bin.items()} for b, by_bin in timers.items()},
            Overlay({k: dict(v) for k, v in self.overlay.items()}),
        )
        inp = self.ticks(self.lps[0].boundaries[0], labels)  # the task runs even without records
        for p in parts:
            inp = inp.unionAll(p)
        out = inp.repartition(1).mapInArrow(local_loop_task(self.plan, self.info, job), row_type())
        out = out.localCheckpoint(eager=False)  # computed once, by the collect below
        self.persisted.append(out)
        self.stages += 1
        collected: list[Any] = []
        left: list[Any] = []
        for r in out.where(f"kind != {RECORDS} or node in ({in_list})").collect():
            kind = r["kind"]
            if kind == ROUNDS:
                self.rounds += read_rounds(r["payload"])
            elif kind == TIMES:
                continue
            elif kind == FILE:
                self._file(r)
            elif kind == RECORDS:
                left.append(r)
            else:
                collected.append(r)
        return out.where(f"kind = {RECORDS} and node not in ({in_list})"), collected, left

    def _file(self, r: Any) -> None:
        """A ``FILE`` row of a round: into the batch's checkpoint, the driver's timers,
        and the overlay the next rounds read bins through."""
        b = r["bin"]
        opname = self.plan.nodes[r["node"]].name
        report = FileReport.of_row(r["payload"])
        ref = report.adopt(self.writer, opname, b, self.timers.setdefault(opname, {}))
        chains = self.overlay.setdefault(opname, {})
        if ref is None:
            chains[b] = (True, None)
            return
        prev = chains.get(b)
        if report.kind == "snap" or (prev is not None and prev[1] is None):
            chains[b] = (True, [ref])
        elif prev is None:
            chains[b] = (False, [ref])
        else:
            chains[b] = (prev[0], [*prev[1], ref])
