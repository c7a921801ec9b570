"""A small micro-batch in one Spark task: its input and every root boundary, in memory.

A root boundary stage costs a Spark job (a shuffle onto the partitions owning the bins,
one Python task per partition), and each Python worker a process start and the imports
of the dataflow's modules, whatever little the stage does: about a second per stage on
a local session.  A batch whose input is small and whose root operators hold little
state does less work than that.  Such a batch runs as **one task**
(:func:`local_batch_task`), as small loops do (:func:`tstate.spark.rounds.local_loop_task`):
its input frame coalesced into one partition, the rows turned into records at their
times and pushed through the fused chain (:meth:`Plan.push
<tstate.spark.plan.Plan.push>`), then each root boundary in the plan's order takes its
records straight from memory (no shuffle cells encoded and decoded) -- an exchange pushes
them on, a stateful operator is hosted as in a boundary task
(:class:`~tstate.spark.host.StatefulHost`: its bins installed, every timer due before the
batch's frontier fired, each changed bin written once) -- and the sinks' parts are
written per boundary.  One Spark job per batch, no shuffle, one Python worker: the
results are those of one worker (the embedded engine's on one worker, exactly).

**When** (:func:`fits`; a rule on the batch's size and the plan's shape, never on what
the dataflow computes): the plan has no iterate scope and no frontier operator (records
at later times held per bin), the batch one input with no records held back from
earlier batches and no bins moving, the input's size by Spark's own estimate (the
statistics of its cached frame, read by the cut job: no job here) at most
:data:`LOCAL_BATCH_BYTES`, and the root stateful operators' stored state (their chains'
files) at most ``Backend(local_loops=...)`` bytes (0 turns both local paths off).  The
rows the driver gets are the ones the stage-by-stage path gives (``FILE``, ``STATS``,
``SINK``, ``HELD``), reduced and committed the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional

from attrs import evolve

from tstate.plan import Exchange, Stateful
from tstate.spark.cells import emit
from tstate.spark.folded import FIRST, Fold, Unfolded, first_time
from tstate.spark.heap import quiet_heap
from tstate.spark.host import StatefulHost, stored_fingerprint, write_bins
from tstate.spark.input_rows import INPUT_ROWS
from tstate.spark.plan import Loop
from tstate.spark.profiling import profiled
from tstate.spark.records import encode_records
from tstate.spark.task import input_groups
from tstate.spark.wire import RECORDS, STATS, BatchInfo, Row, arrow, held_row, row_type, stats_row

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from tstate.spark.committed import Committed
    from tstate.spark.plan import Plan
    from tstate.spark.source import Source

__all__ = ["LOCAL_BATCH_BYTES", "fits", "foldable", "input_bytes", "local_batch_task", "run_local"]

#: a batch whose input is at most this many bytes (Spark's size estimate of its frame)
#: may run in one task (:func:`fits`)
LOCAL_BATCH_BYTES = 4 << 20

#: time -> bin -> records
Groups = dict[int, dict[int, list[Any]]]


def input_bytes(df: Any) -> Optional[int]:
    """Spark's size estimate of ``df`` in bytes (the optimizer's statistics: for a cached
    frame the bytes it takes in the cache once read; no Spark job), or None when Spark
    has none (its default for an unknown size is larger than any limit here) or its
    estimate does not bound the frame (:func:`tstate.spark.unbounded.unbounded`: rows a
    Python function or a generator makes, which Spark sizes as the rows it reads --
    a ``mapInArrow`` reading a million rows out of a file per task over a two-row
    ``spark.range`` is a few hundred bytes by Spark's estimate)."""
    from tstate.spark.unbounded import unbounded

    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if unbounded(df.sparkSession._jvm, plan):
            return None
        return int(str(plan.stats().sizeInBytes()))
    except Exception:  # (no JVM frame: Spark Connect)
        return None


def _state_bytes(plan: "Plan", info: BatchInfo) -> int:
    """The bytes of the stored state (the chains' files) of the root stateful operators."""
    from tstate.spark import binstore

    m = binstore.manifest(info.directory, info.head)
    if m is None:
        return 0
    total = 0
    for b in plan.boundaries:
        pn = plan.nodes[b]
        if isinstance(pn.op, Stateful) and pn.name in m.operators:
            total += sum(ref.size for bn in range(pn.bins) for ref in binstore.chain(m, pn.name, bn))
    return total


def fits(plan: "Plan", info: BatchInfo, dfs: dict[str, Any], held: bool, limit: int, sized: bool = False) -> bool:
    """Whether the batch runs in one task (module docstring): ``dfs`` its inputs'
    frames, ``held`` whether earlier batches held records back, ``limit``
    ``Backend(local_loops=...)``; ``sized``: the input's size is known to be within
    :data:`LOCAL_BATCH_BYTES` (a folded run's: :func:`foldable` checked it)."""
    if not _one_task_shape(plan, len(dfs), held, limit) or info.moved or info.prefetch:
        return False
    if not sized and not _small(next(iter(dfs.values()))):  # (Spark's size estimate is an optimizer pass: once per batch)
        return False
    return _state_bytes(plan, info) <= limit


def _one_task_shape(plan: "Plan", inputs: int, held: bool, limit: int) -> bool:
    """The run's shape allows the one-task path: allowed at all (``limit``), one input,
    nothing held from earlier batches, no loop, delay or frontier operator."""
    if limit <= 0 or plan.loops or plan.delays or held or inputs != 1:
        return False
    return not any(isinstance(it, Loop) for it in plan.items)


def _small(df: Any) -> bool:
    """Frame ``df`` is at most :data:`LOCAL_BATCH_BYTES` by Spark's size estimate."""
    size = input_bytes(df)
    return size is not None and size <= LOCAL_BATCH_BYTES  # (read here: a test may set it)


def foldable(
    plan: "Plan", bound: Mapping[str, "Source"], last: "Committed", moving: bool, limit: int,
    epochs: Optional[int], rows: int,
) -> Optional[Fold]:  # fmt: skip
    """The :class:`~tstate.spark.folded.Fold` of a batch run that may be folded
    (:mod:`tstate.spark.folded`: one micro-batch in one task, no cut), else None: one
    timed input, no rescale under way or pending (``moving``), nothing held from earlier
    batches, a plan with no loop or frontier operator, the one-task path allowed
    (``limit``: ``Backend(local_loops=...)``) and the input at most
    :data:`LOCAL_BATCH_BYTES` by Spark's size estimate, an estimate that bounds it
    (:func:`input_bytes`: none over a Python map or a generator; the batch checks the rest of
    :func:`fits`: the stored state)."""
    if moving or not _one_task_shape(plan, len(bound), last.held is not None, limit):
        return None
    ((_, src),) = bound.items()
    if src.time is None or not _small(src.df):
        return None
    return Fold(epochs, rows, last.fresh)


def _land(flight: dict[int, Groups], routed: dict[tuple[int, int, Any], list[Any]]) -> None:
    """Records routed to boundaries (``(node, bin, time) -> records``) into ``flight``."""
    for (node, b, t), recs in routed.items():
        at = flight.setdefault(node, {}).setdefault(t, {})
        lst = at.get(b)
        if lst is None:
            at[b] = recs
        else:
            lst.extend(recs)


def _stateful(plan: "Plan", info: BatchInfo, node: int, groups: Groups, rows: list[Row]) -> tuple[dict[str, Any], Any]:
    """Stateful boundary ``node`` over ``groups`` with every bin it needs (those with
    records, and all with a timer due): its changed bins written; returns its ``STATS``
    and its output records by time."""
    host = StatefulHost(plan, node, state=info.state)  # (RocksDB state: the executor's database)
    pn = plan.nodes[node]
    m, stored_fp = stored_fingerprint(info, pn, host.codec)
    needed = {b for bins in groups.values() for b in bins} | set(info.due.get(node, ()))
    loaded, found = host.take(info, m, needed, stored_fp)
    produced = host.run_batch(info, groups)
    written = write_bins(info, m, pn, host.codec, loaded, rows, lambda b: min(b.timers) if b.timers else None)
    stats = {
        "hits": found["hit"], "catchups": found["catch-up"] + found["prefetched"], "misses": found["miss"],
        "bytes": written, "take_us": found["us"], "read_bytes": found["read"],
    }
    return stats, produced


def local_batch_task(
    plan: "Plan", info: BatchInfo, name: str, shape: Any, time_column: Optional[str], at: int = 0, late: Any = None
) -> Any:
    """The whole batch of input ``name`` in one task (module docstring): emits the sink
    references, ``FILE`` and ``STATS`` rows (the input's ``input_rows`` among them) and
    the records held back for later batches (``HELD``); no ``RECORDS``."""
    node = plan.inputs[name]

    def run(batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        with quiet_heap():  # (the executor's cached bins out of the collector's reach)
            yield arrow(_run(batches))

    def _run(batches: Iterable["pa.RecordBatch"]) -> list[Row]:
        if info.fold is not None and time_column is not None:  # (decided on the columns: no record built for nothing)
            screened = info.fold.screen(info.lo, time_column, batches)
            if screened is None:
                return [stats_row(node, 0, {FIRST: None})]
            batches = screened
        by_time, seen, dropped = input_groups(info, shape, time_column, at, batches)
        counts: dict[str, Any] = {INPUT_ROWS: seen}
        binfo = info
        if info.fold is not None:  # a folded run (tstate.spark.folded): one micro-batch's input, or nothing done
            first = info.fold.first(info.lo, list(by_time), seen - dropped)
            if first is None:
                return [stats_row(node, 0, {FIRST: None})]
            binfo, counts[FIRST] = evolve(info, lo=first), first
        if dropped and late is not None:
            late.add(dropped)
        return _batch(binfo, by_time, counts)

    def _batch(info: BatchInfo, by_time: dict[int, list[Any]], counts: dict[str, Any]) -> list[Row]:
        rows: list[Row] = []
        flight: dict[int, Groups] = {}
        routed: dict[tuple[int, int, Any], list[Any]] = {}
        sinks: dict[tuple[int, int], list[Any]] = {}
        held: list[tuple[int, Any]] = []
        for t in sorted(by_time):
            if info.hi is not None and t >= info.hi:
                held.extend((t, r) for r in by_time[t])
            else:
                plan.push(node, t, by_time[t], routed, sinks)
        _land(flight, routed)
        emit(plan, info, {}, sinks, rows)
        if held:
            rows.append(held_row(node, encode_records(held, plan.nodes[node].name, plan.records)))
        rows.append(stats_row(node, 0, counts))
        for b in plan.items:
            assert isinstance(b, int)  # (no loops: fits)
            groups = flight.pop(b, {})
            routed, sinks = {}, {}
            if isinstance(plan.nodes[b].op, Exchange):
                for t in sorted(groups):
                    for recs in groups[t].values():
                        plan.push(b, t, recs, routed, sinks)
                stats: dict[str, Any] = {}
            else:
                stats, produced = _stateful(plan, info, b, groups, rows)
                for t, recs in sorted(produced.items(), key=lambda kv: kv[0]):
                    plan.push(b, t, recs, routed, sinks)
            stats["records"] = sum(len(recs) for g in groups.values() for recs in g.values())
            _land(flight, routed)
            emit(plan, info, {}, sinks, rows)
            rows.append(stats_row(b, 0, stats))
        assert not any(flight.values()), f"records left for boundaries {sorted(flight)} after the batch"
        return rows

    return profiled(run, "local batch")


def run_local(stages: Any) -> list[Any]:
    """Batch ``stages`` (a :class:`~tstate.spark.stages.Stages` that :func:`fits`) as one
    Spark job of one task; returns the rows the driver reduces (no ``RECORDS``)."""
    from tstate.spark.placed import unplaced

    plan, info, job = stages.plan, stages.info, stages.job
    ((name, df),) = stages.dfs.items()
    src = stages.bound[name]
    at = stages.const_time if stages.const_time is not None else 0
    task = local_batch_task(plan, info, name, src.record, src.time, at, job.late)
    if name in stages.placed:
        df = unplaced(df)
    stages.loop_stats["root_stages"] += 1
    rows = stages._collect(df.coalesce(1).mapInArrow(task, row_type()))
    if not any(r["kind"] == STATS and r["node"] == plan.inputs[name] for r in rows):
        # the frame had no partition (so no task ran): one partition, however empty
        rows = stages._collect(df.repartition(1).mapInArrow(task, row_type()))
    assert all(r["kind"] != RECORDS for r in rows)
    if info.fold is not None:
        first = first_time(rows, plan.inputs[name])
        if first is None:
            raise Unfolded(f"batch {info.batch}: input {name!r} is more than one micro-batch")
        stages.first = first
    return rows
