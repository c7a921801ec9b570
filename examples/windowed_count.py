"""Tumbling-window count per key: each window is emitted once, when ``notify_at`` fires
for its end, i.e. when the frontier says no more records of that window can arrive.

    python -m examples.windowed_count
"""

from __future__ import annotations

from typing import Any, Iterable

import tstate as ts


def build(flow: ts.Dataflow, events: ts.Stream, width: int) -> ts.Stream:
    """Events are ``(key, value)``; emits ``(window_start, key, count)`` at time
    ``window_start + width - 1`` (the window's last epoch)."""

    @flow.unary_frontier(events, exchange=lambda e: e[0], state=dict)
    def window_count(inp, out, ctx):
        windows = ctx.state  # window start -> {key: count}
        for cap, batch in inp:
            start = cap.time - cap.time % width
            counts = windows.setdefault(start, {})
            for key, _ in batch:
                counts[key] = counts.get(key, 0) + 1
            ctx.notify_at(start + width - 1)  # merged: one notification per window
        for cap in ctx.notifications():
            start = cap.time - width + 1
            for key, n in sorted(windows.pop(start).items()):
                out.give(cap, (start, key, n))

    return window_count


def run(batches: Iterable[tuple[int, list[tuple[Any, Any]]]], width: int, workers: int = 1) -> list[tuple[int, Any, int]]:
    flow = ts.Dataflow("windowed_count")
    events = flow.input("events")
    out = build(flow, events, width).collect()
    for t, batch in batches:
        events.advance_to(t)
        events.send(batch)
    events.close()
    flow.run(workers=workers)
    return sorted(out.records())


def main() -> None:
    print("== windowed count, windows of 3 epochs (4 workers) ==")
    batches = [(t, [("a" if i % 3 else "b", i) for i in range(t + 1)]) for t in range(7)]
    for row in run(batches, width=3, workers=4):
        print(row)


if __name__ == "__main__":
    main()
