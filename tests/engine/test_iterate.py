"""Iterate scopes: Product timestamps, feedback, overflow, nesting, probes."""

from __future__ import annotations

import pytest
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


# -- epoch-sequenced scopes --------------------------------------------------------------------


def _rounds_flow(sequenced: bool, max_iterations=None):
    """Each record ``(key, n)`` goes around the loop ``n`` times; a stateful operator in
    the loop logs ``(epoch, round)`` of every record it applies, in order."""
    flow = ts.Dataflow("seq")
    inp = flow.input("x")
    log: list = []

    @flow.iterate(inp, name="loop", sequenced=sequenced)
    def loop(scope, xs):
        fb = scope.feedback(name="fb", max_iterations=max_iterations)

        @flow.stateful(xs.concat(fb.stream), key=lambda r: r[0], state=int, name="hop")
        def hop(n, rec, ctx):
            log.append((ctx.time.outer, scope.round_of(ctx.time)))
            if rec[1] > 0:
                ctx.emit((rec[0], rec[1] - 1))
            return n + 1

        fb.connect(hop)
        return hop.filter(lambda r: r[1] == 0)

    return flow, inp, loop, log


@given(st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=5), st.integers(1, 3))
def test_sequenced_scope_runs_epochs_one_after_another(epochs, workers):
    """With every epoch queued before the run, a stateful operator in a sequenced loop
    applies all of epoch e's rounds before any of epoch e + 1; the results and the
    rounds per epoch are those of the plain scope, which interleaves epochs."""
    results = {}
    for sequenced in (True, False):
        flow, inp, loop, log = _rounds_flow(sequenced)
        out = loop.collect()
        for e, ns in enumerate(epochs):
            inp.advance_to(e)
            inp.send([(i, n) for i, n in enumerate(ns)])
        inp.close()
        ex = flow.start(workers)
        ex.run()
        results[sequenced] = (sorted(out.items), ex.metrics.rounds("loop"))
        if sequenced:
            assert [e for e, _ in log] == sorted(e for e, _ in log)
        assert sorted(log) == sorted((e, k) for e, ns in enumerate(epochs) for n in ns for k in range(n + 1))
    assert results[True] == results[False]
    assert results[True][1] == {e: max(ns) for e, ns in enumerate(epochs) if ns and max(ns)}


def test_plain_scope_interleaves_epochs_where_a_sequenced_one_does_not():
    orders = {}
    for sequenced in (True, False):
        flow, inp, loop, log = _rounds_flow(sequenced)
        loop.collect()
        inp.send([(0, 3)])
        inp.advance_to(1)
        inp.send([(1, 3)])
        inp.close()
        flow.run()
        orders[sequenced] = [e for e, _ in log]
    assert orders[True] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert orders[False] != sorted(orders[False])  # epoch 1 starts while epoch 0 still loops


def test_sequenced_scope_times_and_limits():
    from tstate.errors import GraphError, ProgressError
    from tstate.progress.timestamp import MAX_SEQUENCED_EPOCH, SEQUENCE_SPAN

    flow, inp, loop, log = _rounds_flow(True, max_iterations=2)
    out = loop.collect()
    inp.advance_to(7)
    inp.send([(0, 1), (1, 5)])  # 5 rounds would exceed max_iterations=2 per epoch: dropped
    inp.close()
    ex = flow.start()
    ex.run()
    assert out.items == [(7, (0, 0))]
    assert ex.metrics.rounds("loop") == {7: 2}
    scope = ts.Dataflow("s")
    s = scope.input("x")

    @scope.iterate(s, sequenced=True)
    def body(sc, xs):
        assert sc.at(3, 5) == Product(3, 3 * SEQUENCE_SPAN + 5) and sc.round_of(sc.at(3, 5)) == 5
        return xs

    with pytest.raises(GraphError, match="sequenced scope must be in the root scope"):

        @scope.iterate(s, name="outer")
        def outer(sc, xs):
            @scope.iterate(xs, name="inner", sequenced=True)
            def inner(sc2, ys):
                return ys

            return inner

    flow, inp, loop, log = _rounds_flow(True)
    loop.collect()
    inp.advance_to(MAX_SEQUENCED_EPOCH + 1)
    inp.send([(0, 1)])
    inp.close()
    with pytest.raises(ProgressError, match="not an int in"):
        flow.run()


@given(st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=4), st.integers(1, 3))
def test_propagating_only_in_front_of_frontier_readers_changes_nothing(epochs, workers):
    """The engine propagates progress in front of operators that read a frontier (and
    after every step); propagating after every activation as before gives the same
    outputs, epoch by epoch, and the same rounds."""
    from tstate.engine.execution import Execution

    runs = []
    for eager in (True, False):
        flow, inp, loop, log = _rounds_flow(True)
        out = loop.collect()
        probe = loop.probe()
        ex = flow.start(workers)
        ex.eager_propagation = eager
        seen = []
        for e, ns in enumerate(epochs):
            inp.send([(i, n) for i, n in enumerate(ns)])
            inp.advance_to(e + 1)
            ex.step_while(lambda: probe.less_equal(e))
            seen.append(sorted(out.items))
        inp.close()
        ex.run()
        runs.append((seen, ex.metrics.rounds("loop"), sorted(log)))
        assert isinstance(ex, Execution)
    assert runs[0] == runs[1]
