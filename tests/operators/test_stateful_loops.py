"""Stateful operators inside iterate scopes: per key, records and timers in the product
order -- a timer at ``(e, i)`` fires before a record at ``(e, i + 1)`` is applied, even
while a lexicographically earlier item of another epoch is still waiting."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts


def run(batches: list[list[int]], workers: int) -> list[tuple[Any, Any]]:
    flow = ts.Dataflow("order")
    src = flow.source(ts.io.from_batches([(t, [(t, v) for v in vs]) for t, vs in enumerate(batches)]))
    log: list[tuple[Any, ...]] = []

    def body(scope: Any, entered: ts.Stream) -> ts.Stream:
        fb = scope.feedback(max_iterations=4)

        @flow.stateful(entered.concat(fb.stream), key=lambda r: (r[0], r[1] % 3), state=list[int], bins=4)
        def step(seen: list, r: tuple, ctx: ts.Context) -> None:
            seen.append(ctx.time.inner)
            ctx.notify_at(ctx.time)
            ctx.emit((r[0], r[1] + 1))

        @step.on_notify
        def done(seen: list, t: Any, ctx: ts.Context) -> None:
            # every record applied so far is at an iteration <= t's: none from later ones
            log.append((ctx.key, t.inner, max(seen) <= t.inner))

        fb.connect(step)
        return step

    flow.iterate(src)(body)
    flow.run(workers=workers)
    return log


def test_timer_before_a_later_iteration_while_another_epoch_waits() -> None:
    log = run([[0], [], [0, 1]], workers=1)
    assert log and all(ok for _, _, ok in log)


@settings(max_examples=20)
@given(st.lists(st.lists(st.integers(0, 6), max_size=4), min_size=1, max_size=5), st.integers(1, 3))
def test_per_key_time_order_in_loops(batches: list, workers: int) -> None:
    assert all(ok for _, _, ok in run(batches, workers))
