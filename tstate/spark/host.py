"""A stateful operator hosted in a Spark task: the embedded engine's own
:class:`~tstate.operators.stateful.StatefulRuntime`, alone in a one-worker execution,
with the bins it needs taken from the checkpoint store and the bins it changed written
back -- so both engines compute the same thing with the same code.

- :class:`StatefulHost` runs the operator's own plan node (:class:`~tstate.plan.Stateful`:
  the function, key, state declaration and handlers as the dataflow declared them) in a
  one-operator plan: at the root scope (:meth:`StatefulHost.run_batch`: the records of a
  micro-batch in time order, then the batch's frontier) or inside an iterate scope,
  behind an operator that places each record at its ``Product`` time and holds a
  round's frontier (:meth:`StatefulHost.run_round`, :mod:`tstate.spark.rounds`);
- :meth:`StatefulHost.take` installs bins as of a manifest (from the executor's cache
  when it can: :mod:`~tstate.spark.binstore`); :func:`write_bins` writes each changed bin
  as a delta or snapshot and reports it to the driver in a ``FILE`` row.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from attrs import evolve

from tstate.engine.execution import Execution
from tstate.io.inputs import InputHandle
from tstate.io.sinks import CallbackSink
from tstate.operators.stateful import BinBatch, StatefulRuntime
from tstate.plan import Enter, Graph, Input, Inspect, Leave, Scope, Sink, UnaryFrontier
from tstate.progress.timestamp import Product
from tstate.spark.wire import BatchInfo, FileReport, Row

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan, PlanNode

__all__ = ["StatefulHost", "stored_fingerprint", "write_bins"]


class StatefulHost:
    """Stateful operator ``node`` of ``plan`` in a one-worker execution (module
    docstring).  ``frontier``: None at the root scope; inside an iterate scope, the
    round's frontier the placing operator holds."""

    def __init__(
        self, plan: "Plan", node: int, frontier: Optional[list[Product]] = None, state: Any = None
    ) -> None:
        pn = plan.nodes[node]
        op = pn.stateful
        self.plan, self.node, self.pn = plan, node, pn
        self.frontier = frontier
        #: what the operator gave: time -> records, in arrival order
        self.produced: dict[Any, list[Any]] = {}
        # the operator's own node, alone in a plan of its own (helper names cannot be its name);
        # without local rounds: on Spark its loop runs round by round (the driver's rounds)
        g = Graph(f"{plan.name}/{pn.name}")
        self.input = InputHandle(f"{pn.name}/in", 1 << 30)
        src = (g.add(Input(name=self.input.name, scope=g.root, handle=self.input), []), 0)
        if frontier is None:
            index = g.add(evolve(op, scope=g.root, local_rounds=False), [src])
            g.add(Sink(name=f"{pn.name}/out", scope=g.root, sink=CallbackSink(self._give)), [(index, 0)])
        else:
            loop = Scope("loop", depth=1, parent=g.root)
            entered = g.add(Enter(name=f"{pn.name}/enter", scope=loop), [src])
            place = UnaryFrontier(name=f"{pn.name}/place", scope=loop, logic=_placing(frontier), state=list)
            placed = g.add(place, [(entered, 0)])
            index = g.add(evolve(op, scope=loop, local_rounds=False), [(placed, 0)])
            seen = g.add(Inspect(name=f"{pn.name}/out", scope=loop, fn=self._give_one), [(index, 0)])
            g.add(Leave(name=f"{pn.name}/leave", scope=g.root, inner=loop), [(seen, 0)])
        stores = None
        if state is not None:  # keyed state in the executor's RocksDB (tstate.spark.rocks_bins)
            from tstate.spark.rocks_bins import ExecutorStores

            stores = ExecutorStores(state)
        self.execution = Execution(g, 1, stores=stores)
        runtime = self.execution.operators[0][index]
        assert isinstance(runtime, StatefulRuntime)
        runtime.track_dirty = True
        runtime.use_router(plan.router(node))  # the process-wide memo of hashed keys
        self.op: StatefulRuntime = runtime

    def _give(self, t: Any, recs: list[Any]) -> None:
        self.produced.setdefault(t, []).extend(recs)

    def _give_one(self, t: Any, r: Any) -> None:
        self.produced.setdefault(t, []).append(r)

    @property
    def codec(self) -> Any:
        return self.op.codec

    def take(
        self, info: BatchInfo, m: Any, needed: Iterable[int], stored_fp: str, partition: int = -1
    ) -> tuple[dict[int, Any], dict[str, int]]:
        """Install the bins ``needed`` as of manifest ``m`` (anything with ``chain(operator,
        bin)``) for a task of ``partition`` (-1: any; from the executor's cache when it
        can: :mod:`~tstate.spark.binstore`); returns them and how they were found
        (``hit`` / ``catch-up`` / ``prefetched`` / ``miss`` counts, ``read``: bytes of
        state files read, ``handover_bins`` / ``handover_bytes``: of the bins that
        changed owner at this batch, how many and the bytes read for them)."""
        import time

        from tstate.spark import binstore

        start = time.perf_counter()
        binstore.expire(info.batch)
        found = {"hit": 0, "catch-up": 0, "prefetched": 0, "miss": 0, "read": 0, "handover_bins": 0, "handover_bytes": 0}
        moved = info.moved.get(self.node, frozenset())
        loaded = {}
        for b in sorted(needed):
            bin_, how = self._take(info, m, b, stored_fp, partition)
            found[how.how] += 1
            found["read"] += how.read
            if b in moved and (how.how != "miss" or how.read):  # (a bin without state has nothing to hand over)
                found["handover_bins"] += 1
                found["handover_bytes"] += how.read
            loaded[b] = bin_
            self.op.install_bin(bin_)
        found["us"] = int((time.perf_counter() - start) * 1e6)  # (for BatchMetrics.take_seconds)
        return loaded, found

    def _take(self, info: BatchInfo, m: Any, b: int, stored_fp: str, partition: int) -> tuple[Any, Any]:
        from tstate.spark import binstore

        if self.op.store is not None:
            from tstate.spark import rocks_bins

            return rocks_bins.take(info.directory, m, self.op.store, b, stored_fp, partition)
        return binstore.take(info.directory, m, self.pn.name, b, self.op.codec, stored_fp, partition)

    def run_batch(self, info: BatchInfo, groups: dict[int, dict[int, list[Any]]]) -> dict[Any, list[Any]]:
        """At the root scope: apply the batch's records (time -> bin -> records) in time
        order, advance to the batch's frontier (close the input after the last batch) and
        run until nothing is left; returns time -> output records, in arrival order."""
        inp, op = self.input, self.op
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
        self.execution.step_while(lambda: True)
        if op.stash or op.pending:  # pragma: no cover - times before hi are complete
            raise AssertionError(f"operator {self.pn.name!r}: records left unapplied at the end of batch {info.batch}")
        return self.produced

    def run_round(self, groups: dict[Product, dict[int, list[Any]]]) -> tuple[dict[Any, list[Any]], dict[tuple[int, Any], list[Any]]]:
        """Inside an iterate scope: one round over ``groups`` (time -> bin -> records)
        under the round's frontier.  Returns time -> output records and the records the
        frontier did not let in yet, by ``(bin, time)`` (they go back in flight)."""
        assert self.frontier is not None
        inp, op = self.input, self.op
        times = sorted(groups)
        first = min([t.outer for t in times] + [f.outer for f in self.frontier] + [t.outer for t in op.timer_times.keys()] or [0])
        items = [(t, [r for b in sorted(groups[t]) for r in groups[t][b]]) for t in times] or [(Product(first, 0), [])]
        inp.send(items, time=first)
        inp.close()
        self.execution.step_while(lambda: True)
        waiting: dict[tuple[int, Any], list[Any]] = {}
        if op.stash:
            bin_of = self.plan.router(self.node).bin
            key = self.pn.key
            for t, batches_ in op.stash.items():
                for recs in batches_:
                    for r in recs:
                        waiting.setdefault((bin_of(key(r)), t), []).append(r)
        return self.produced, waiting


def _placing(frontier: list[Product]) -> Callable[[Any, Any, Any], None]:
    """The logic of a frontier operator that gives each ``(time, records)`` item at its
    time and holds capabilities at ``frontier`` (the round's) while the input lasts."""

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

    return place


def stored_fingerprint(info: BatchInfo, pn: "PlanNode", codec: Any) -> tuple[Any, str]:
    """The committed manifest the batch reads bins from (None: none yet), and the schema
    fingerprint ``pn``'s stored state has there (the declared one if it has none)."""
    from tstate.spark import binstore
    from tstate.types.schema import Schema

    m = binstore.manifest(info.directory, info.head)
    entry = m.operators.get(pn.name) if m is not None else None
    return m, (Schema.from_builtins(entry.schema).fingerprint if entry is not None else codec.fingerprint)


def write_bins(
    info: BatchInfo, m: Any, pn: "PlanNode", codec: Any, loaded: dict[int, Any], rows: list[Row],
    timers: Callable[[Any], Any], partition: int = -1,
) -> int:
    """Write each changed bin of ``loaded`` as a delta (or a snapshot, when its chain in
    ``m`` is long or absent -- but not for a bin being prefetched for a hand-over: the
    prefetched version must stay in its chain) and report it in a ``FILE`` row
    (``timers(bin)``: what the driver keeps of its pending timers); give every bin back to
    the executor's cache, tagged with its version and ``partition``.  Returns the bytes
    written."""
    from tstate.checkpoint.delta import encode_change
    from tstate.checkpoint.store import write_data_file
    from tstate.spark import binstore

    if info.state is not None:  # the bins are RocksBins: each changed one exported as an SST file
        from tstate.spark import rocks_bins

        return rocks_bins.write_bins(info, m, pn, loaded, rows, timers, partition)

    fs = binstore.store(info.directory).fs
    token = info.token + secrets.token_hex(3)
    written = 0
    node = pn.node
    keep = {b for b, _owner in info.prefetch.get(node, ())}
    for b, bin_ in loaded.items():
        refs = binstore.chain(m, pn.name, b)
        version = refs[-1].path if refs else ""
        if bin_.changed():
            if bin_.is_empty():
                if refs:  # the bin had state: the checkpoint drops its chain
                    rows.append(FileReport.dropped().row(node, b))
                version = ""
            else:
                snapshot = bin_.full or not refs or (len(refs) + 1 > info.compact_after and b not in keep)
                kind = "snap" if snapshot else "delta"
                data = encode_change(bin_, codec, snapshot=snapshot, operator=pn.name)
                ref = write_data_file(fs, pn.name, b, info.checkpoint, token, kind, data)
                written += ref.size
                version = ref.path
                rows.append(FileReport(ref.path, ref.size, ref.xxh64, kind, timers(bin_)).row(node, b))
        binstore.give(info.directory, pn.name, bin_, version, partition)
    return written
