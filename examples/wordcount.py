"""Word count: running counts per word, emitted once per epoch when the epoch completes.

    python -m examples.wordcount
"""

from __future__ import annotations

from typing import Any, Iterable

import tstate as ts


def build(flow: ts.Dataflow, lines: ts.Stream) -> ts.Stream:
    """Count words; at the end of every epoch emit ``(word, total so far)`` for the
    words seen in that epoch."""
    words = lines.flat_map(str.split)

    @flow.unary_frontier(words, exchange=lambda w: w, state=lambda: ({}, {}))
    def count(inp, out, ctx):
        totals, pending = ctx.state  # running totals; epoch -> that epoch's words
        for cap, batch in inp:  # epochs may arrive out of order: stash them ...
            pending.setdefault(cap.time, []).extend(batch)
            ctx.notify_at(cap)
        for cap in ctx.notifications():  # ... and apply them in time order
            seen = set()
            for w in pending.pop(cap.time):
                totals[w] = totals.get(w, 0) + 1
                seen.add(w)
            out.give_many(cap, sorted((w, totals[w]) for w in seen))

    return count


def run(epochs: Iterable[list[str]], workers: int = 1) -> dict[Any, list[tuple[str, int]]]:
    flow = ts.Dataflow("wordcount")
    lines = flow.input("lines")
    out = build(flow, lines).collect()
    for t, batch in enumerate(epochs):
        lines.advance_to(t)
        lines.send(batch)
    lines.close()
    flow.run(workers=workers)
    return {t: sorted(v) for t, v in out.by_time().items()}


TEXT = [
    ["the quick brown fox", "jumps over the lazy dog"],
    ["the dog sleeps", "the fox runs"],
    ["quick quick quick"],
]


def main() -> None:
    print("== wordcount (2 workers) ==")
    for t, counts in run(TEXT, workers=2).items():
        print(f"epoch {t}: {counts}")


if __name__ == "__main__":
    main()
