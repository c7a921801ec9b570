"""The stateful operator hosted in a task (tstate.spark.host) runs the dataflow's own
node -- its function, timer handler and state declaration -- and gives what the
embedded engine gives; its changed bins reach the driver as FILE rows (no Spark here)."""

from __future__ import annotations

from typing import Any

import pytest

import tstate as ts
from tstate.spark import binstore
from tstate.spark.host import StatefulHost, stored_fingerprint, write_bins
from tstate.spark.plan import Plan
from tstate.spark.wire import FILE, BatchInfo, FileReport

BATCHES = {0: ["a", "b", "a"], 1: ["b", "c"], 3: ["a"]}


def build(fold: bool) -> tuple[ts.Dataflow, Any, Any, Any]:
    flow = ts.Dataflow("host")
    words = flow.input("words")
    if fold:

        @flow.fold_bins(words, key=lambda w: w, state=int, bins=4)
        def count(states: dict[Any, int], ws: list[str], ctx: ts.Context) -> None:
            for w in ws:
                states[w] = states.get(w, 0) + 1
                ctx.emit((w, states[w]))

    else:

        @flow.stateful(words, key=lambda w: w, state=int, bins=4)
        def count(n: int, w: str, ctx: ts.Context) -> int:
            ctx.emit((w, n + 1))
            ctx.notify_at(ctx.time + 1)
            return n + 1

        @count.on_notify
        def fired(n: int, t: Any, ctx: ts.Context) -> int:
            ctx.emit((ctx.key, "timer", t))
            return n

    return flow, words, count, count.collect()


def embedded(fold: bool) -> dict[Any, list[Any]]:
    flow, words, _count, out = build(fold)
    ex = flow.start(1)
    for t, ws in BATCHES.items():
        words.advance_to(t)
        words.send(ws)
    words.close()
    ex.run()
    return {t: sorted(map(repr, recs)) for t, recs in out.by_time().items()}


@pytest.fixture(autouse=True)
def _fresh_cache():  # type: ignore[no-untyped-def]
    binstore.clear()
    yield
    binstore.clear()


@pytest.mark.parametrize("fold", [False, True])
def test_hosted_node_gives_the_embedded_engines_output(fold: bool, tmp_path: Any) -> None:
    flow, _words, count, _out = build(fold)
    plan = Plan.of(flow)
    node = count.node
    pn = plan.nodes[node]
    info = BatchInfo(0, 0, None, str(tmp_path), None, 1, "ab", (0,), {node: (0,) * pn.bins}, {node: frozenset()})
    host = StatefulHost(plan, node)
    m, fp = stored_fingerprint(info, pn, host.codec)
    route = plan.router(node)
    groups: dict[int, dict[int, list[Any]]] = {}
    for t, ws in BATCHES.items():
        for w in ws:
            groups.setdefault(t, {}).setdefault(route.bin(w), []).append(w)
    loaded, found = host.take(info, m, {b for g in groups.values() for b in g}, fp)
    assert found["miss"] == len(loaded) > 0  # nothing stored yet
    produced = host.run_batch(info, groups)
    assert {t: sorted(map(repr, recs)) for t, recs in produced.items()} == embedded(fold)

    rows: list[Any] = []
    written = write_bins(info, m, pn, host.codec, loaded, rows, lambda b: min(b.timers) if b.timers else None)
    reports = {r[3]: FileReport.of_row(r[5]) for r in rows}
    assert all(r[0] == FILE and r[2] == node for r in rows) and set(reports) == set(loaded)
    assert written == sum(f.size for f in reports.values()) > 0
    # a first file of a bin is a snapshot; the input closed, so every timer fired
    assert {f.kind for f in reports.values()} == {"snap"} and all(f.timers is None for f in reports.values())
