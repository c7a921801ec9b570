"""Iterate scopes: Product timestamps, feedback, overflow, nesting, probes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.progress import Product


def count_up(flow: ts.Dataflow, nums: ts.Stream, limit: int, max_iterations=None):
    """Add 1 around a loop until ``limit``; returns the left stream and a log of
    ``(time, value)`` seen inside the loop."""
    times: list = []

    @flow.iterate(nums)
    def loop(scope, xs):
        fb = scope.feedback(max_iterations=max_iterations)
        merged = xs.concat(fb.stream)
        seen = merged.inspect(lambda t, x: times.append((t, x)))
        fb.connect(seen.filter(lambda x: x < limit).map(lambda x: x + 1))
        return seen.filter(lambda x: x >= limit)

    return loop, times


@given(nums=st.lists(st.integers(0, 12), max_size=10), workers=st.integers(1, 4))
def test_loop_counts_iterations_in_the_inner_coordinate(nums, workers):
    flow = ts.Dataflow("up")
    inp = flow.input("nums")
    left, times = count_up(flow, inp.exchange(lambda x: x), 10)
    out = left.collect()
    inp.advance_to(3)
    inp.send(nums)
    inp.close()
    flow.run(workers)
    assert sorted(out.records()) == sorted(max(x, 10) for x in nums)
    assert all(t == 3 for t, _ in out.items)  # leaving drops the iteration count
    for t, x in times:
        assert isinstance(t, Product) and t.outer == 3
    # a record starting at x reaches value v after v - x iterations
    assert sorted((t.inner, x) for t, x in times) == sorted(
        (v - x0, v) for x0 in nums for v in range(x0, max(x0, 10) + 1)
    )


def test_max_iterations_drops_records_that_would_overflow():
    flow = ts.Dataflow("bounded")
    inp = flow.input("nums")
    out = count_up(flow, inp, 10, max_iterations=3)[0].collect()
    inp.send([0, 8, 9, 12])
    inp.close()
    flow.run()
    assert sorted(out.records()) == [10, 10, 12]  # 0 would need 10 iterations


def test_nested_scopes():
    flow = ts.Dataflow("nested")
    inp = flow.input("nums")
    seen = []

    @flow.iterate(inp)
    def outer(scope, xs):
        fb = scope.feedback()

        @flow.iterate(xs.concat(fb.stream))
        def inner(scope2, ys):
            fb2 = scope2.feedback(max_iterations=2)
            z = ys.concat(fb2.stream).inspect(lambda t, y: seen.append(t))
            fb2.connect(z)
            return z

        fb.connect(inner.filter(lambda y: y < 1).map(lambda y: y + 1))
        return inner

    out = outer.collect()
    inp.send([0])
    inp.close()
    flow.run(workers=2)
    # inner: every value comes out 3 times (iterations 0..2); outer: each 0 returns once as 1
    assert sorted(out.records()) == [0] * 3 + [1] * 9
    assert Product(Product(0, 1), 2) in seen
    assert all(isinstance(t.outer, Product) for t in seen)


def test_probe_tracks_progress_step_by_step():
    flow = ts.Dataflow("probe")
    inp = flow.input("nums")
    probe = count_up(flow, inp, 5)[0].probe()
    ex = flow.start(workers=2)
    assert probe.less_equal(0)
    inp.send([0])
    inp.advance_to(1)
    steps = 0
    while probe.less_than(1):
        assert ex.step()
        steps += 1
    assert steps >= 5  # the loop needed its iterations
    assert not probe.done()
    inp.close()
    ex.run()
    assert probe.done()
