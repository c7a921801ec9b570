"""Dataflows the Spark tests run on both engines, and how to compare them."""

from __future__ import annotations

import bisect
from typing import Any

from attrs import define, field

import tstate as ts


@define
class Stats:
    n: int = 0
    total: int = 0
    seen: list[int] = field(factory=list)


def keyed(
    fold: bool = False, timers: bool = True, key: Any = None
) -> tuple[ts.Dataflow, ts.InputStream, Any, ts.Collected]:
    """filter -> stateful (struct state, timers) -> map -> exchange -> stateful -> sink;
    ``key``: the first operator's key (default: a function of ``r["k"]``; ``ts.col("k")``
    takes the Spark backend's colocated path).

    Every output is independent of the order of records within one time (Timely's
    contract: no order within a timestamp), so both engines must agree exactly."""
    flow = ts.Dataflow("keyed")
    ev = flow.input("events")
    kept = ev.filter(lambda r: r["v"] >= 0)
    by_k = key if key is not None else (lambda r: r["k"])
    if fold:
        @flow.fold_bins(kept, key=by_k, state=Stats, bins=16)
        def stats(states: dict, recs: list, ctx: ts.Context) -> None:
            for r in recs:
                s = states.setdefault(r["k"], Stats())
                s.n += 1
                s.total += r["v"]
                bisect.insort(s.seen, r["v"])
                ctx.emit((r["k"], r["v"]))
    else:
        @flow.stateful(kept, key=by_k, state=Stats, bins=16)
        def stats(s: Stats, r: dict, ctx: ts.Context) -> None:
            s.n += 1
            s.total += r["v"]
            bisect.insort(s.seen, r["v"])
            ctx.notify_at(ctx.time)  # fires after every record of this time
            if timers:
                ctx.notify_at(ctx.time + 2)

        @stats.on_notify
        def tick(s: Stats, t: int, ctx: ts.Context) -> None:
            ctx.emit((ctx.key, t, s.n, s.total))
            if t % 2 == 1 and s.total % 3 == 0:
                ctx.clear()

    parity = stats.map(lambda x: (x[0], x[-1] % 2)).exchange(lambda x: x[1], bins=4)

    @flow.stateful(parity, key=lambda x: x[1], state=int, bins=4)
    def per_parity(n: int, x: tuple, ctx: ts.Context) -> int:
        ctx.emit(("parity", x[1], n + 1))
        return n + 1

    out = stats.concat(per_parity).collect()
    return flow, ev, stats, out


def embedded(rows: list[dict], workers: int = 2, **kw: Any) -> tuple[list, dict]:
    """Reference: the same flow on the embedded engine, one epoch per distinct time."""
    flow, ev, stats, out = keyed(**kw)
    for t in sorted({r["t"] for r in rows}):
        ev.send([r for r in rows if r["t"] == t], time=t)
    ev.close()
    flow.run(workers=workers)
    return sorted(out.items, key=repr), flow.state(stats, format="dict")
