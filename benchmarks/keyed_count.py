"""Keyed count: 1M events, 10k distinct keys, one worker, ``int`` state per key.

tstate (``@flow.stateful``) vs Bytewax 0.21 (``stateful_map``) vs a plain Python dict
loop, in the same run.  Two tstate variants: one emitting the running count per event
(what Bytewax's ``stateful_map`` must do) and one keeping state only (what the dict loop
does); final counts are checked equal across all implementations.

    python -m benchmarks.keyed_count [--events N] [--keys K] [--epochs E] [--repeat R]

Target (issue 3): tstate >= 1.5M events/s, >= 6x Bytewax and >= 30% of the dict loop.
The last line is one JSON object: ``tstate_events_per_s`` (state only),
``tstate_over_dict_loop``, ``tstate_emit_over_dict_loop`` and ``tstate_emit_over_bytewax``
(speed ratios, higher is faster).
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

import tstate as ts
from benchmarks.common import interleaved, ratio, table


def make_events(n: int, keys: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    names = [f"key{i}" for i in range(keys)]
    return [names[rng.randrange(keys)] for _ in range(n)]


def plain(events: list[str], epochs: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k in events:
        counts[k] = counts.get(k, 0) + 1
    return counts


def _count(total: int, event: str, ctx: ts.Context) -> int:
    return total + 1


def _count_emit(total: int, event: str, ctx: ts.Context) -> int:
    total += 1
    ctx.emit((event, total))
    return total


def _identity(e: str) -> str:
    return e


def tstate_run(events: list[str], epochs: int, emit: bool) -> dict[str, int]:
    flow = ts.Dataflow("keyed_count")
    inp = flow.input("events", batch_size=1 << 30)
    counted = flow.stateful(inp, key=_identity, state=int, name="count")(_count_emit if emit else _count)
    if emit:
        counted.sink(lambda t, recs: None)
    ex = flow.start(workers=1)
    step = max(1, len(events) // epochs)
    for t, i in enumerate(range(0, len(events), step)):
        inp.advance_to(t)
        inp.send(events[i : i + step])
        ex.step()
    inp.close()
    ex.run()
    return flow.state(counted, format="dict")


def bytewax_run(events: list[str], epochs: int) -> dict[str, int]:
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    final: dict[str, int] = {}

    def mapper(state: Any, value: str) -> tuple[int, int]:
        state = (state or 0) + 1
        return state, state

    flow = Dataflow("keyed_count")
    s = op.input("in", flow, TestingSource(events, batch_size=len(events) // epochs or 1))
    keyed = op.key_on("key", s, _identity)
    counts = op.stateful_map("count", keyed, mapper)
    out: list[Any] = []
    op.output("out", counts, TestingSink(out))
    run_main(flow)
    for k, v in out:
        final[k] = v
    return final


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-bytewax", action="store_true")
    args = ap.parse_args(argv)
    events = make_events(args.events, args.keys)
    cases = {
        "plain dict loop": lambda: plain(events, args.epochs),
        "tstate stateful (state only)": lambda: tstate_run(events, args.epochs, emit=False),
        "tstate stateful (emit per event)": lambda: tstate_run(events, args.epochs, emit=True),
    }
    if not args.no_bytewax:
        cases["bytewax 0.21 stateful_map"] = lambda: bytewax_run(events, args.epochs)
    res = interleaved(cases, args.repeat)
    reference = res["plain dict loop"][1]
    for name, (_, result) in res.items():
        assert result == reference, f"{name} computed different counts"
    base = res["plain dict loop"][0]
    bw = res.get("bytewax 0.21 stateful_map", (None,))[0]
    rows = []
    for name, (t, _) in res.items():
        rows.append(
            (name, f"{args.events / t / 1e6:.2f}M", f"{base / t:.2f}", f"{bw / t:.1f}x" if bw else "-")
        )
    print(
        f"keyed count: {args.events:,} events, {args.keys:,} keys, {args.epochs} epochs, 1 worker; "
        f"median of {args.repeat} interleaved runs"
    )
    print(table(["implementation", "events/s", "vs dict loop", "vs bytewax"], rows))
    state_only = res["tstate stateful (state only)"][0]
    emitting = res["tstate stateful (emit per event)"][0]
    ratios = {
        "tstate_events_per_s": round(args.events / state_only),
        "tstate_over_dict_loop": ratio(base / state_only),
        "tstate_emit_over_dict_loop": ratio(base / emitting),
    }
    if bw:
        ratios["tstate_emit_over_bytewax"] = ratio(bw / emitting)
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
