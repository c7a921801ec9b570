"""``local_rounds=True``: a stateful operator in a loop applies what it feeds back to its
own worker's bins within the round.  Against a plain reference model and against the
same dataflow without the option: the same results on 1-8 workers, with bins moving and
after a crash and restore; fewer rounds (none at all on one worker)."""

from __future__ import annotations

from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import GraphError

# -- incremental connected components (minimum label), an epoch-sequenced loop -------


def components(
    epochs: list[list[tuple[int, int]]], local: bool, bins: int = 16
) -> tuple[ts.Dataflow, ts.Collected]:
    """Edges arrive per epoch (never leave); in the loop every vertex keeps its label
    (the least vertex id it is connected to) and its neighbours, and floods a smaller
    label on; per epoch, every vertex whose label changed (or that appeared) is
    reported with its new label (a root-scope operator keeps the least one it saw)."""
    flow = ts.Dataflow("cc")
    src = flow.source(ts.io.from_batches(lambda: [(t, es) for t, es in enumerate(epochs)]), name="edges")

    def loop(scope: Any, edges: ts.Stream) -> ts.Stream:
        fb = scope.feedback()
        msgs = edges.flat_map(lambda e: [("e", e[0], e[1]), ("e", e[1], e[0])]).concat(fb.stream)

        @flow.stateful(msgs, key=lambda m: m[1], state=list[int], bins=bins, name="label", local_rounds=local)
        def label(s: list, m: tuple, ctx: ts.Context) -> None:
            v = m[1]
            if not s:
                s.append(v)
                ctx.emit(("out", v, v))
            if m[0] == "e":
                if m[2] not in s[1:]:
                    s.append(m[2])
                ctx.emit(("l", m[2], s[0]))
            elif m[2] < s[0]:
                s[0] = m[2]
                ctx.emit(("out", v, m[2]))
                for n in s[1:]:
                    ctx.emit(("l", n, m[2]))

        fb.connect(label.filter(lambda m: m[0] == "l"))
        return label.filter(lambda m: m[0] == "out")

    out = flow.iterate(src, name="cc", sequenced=True)(loop)

    @flow.stateful(out, key=lambda m: m[1], state=Optional[tuple[int, int]], bins=8, name="final")
    def final(s: Optional[tuple], m: tuple, ctx: ts.Context) -> tuple:
        if s is None or s[0] != ctx.time or m[2] < s[1]:
            ctx.notify_at(ctx.time)
            return (ctx.time, m[2] if s is None or s[0] != ctx.time else min(s[1], m[2]))
        return s

    @final.on_notify
    def report(s: Optional[tuple], t: int, ctx: ts.Context) -> None:
        assert s is not None
        ctx.emit((t, ctx.key, s[1]))

    return flow, final.collect()


def reference(epochs: list[list[tuple[int, int]]]) -> list[tuple[int, int, int]]:
    """Per epoch, ``(epoch, vertex, label)`` of every vertex whose least connected
    vertex id changed (or that appeared): union-find."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    before: dict[int, int] = {}
    got = []
    for t, es in enumerate(epochs):
        for a, b in es:
            for x in (a, b):
                parent.setdefault(x, x)
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the root is the least id
        for v in parent:
            lab = find(v)
            if before.get(v) != lab:
                got.append((t, v, lab))
                before[v] = lab
    return sorted(got)


edges_st = st.lists(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=8), min_size=1, max_size=6
)


@settings(max_examples=30, deadline=None)
@given(epochs=edges_st, workers=st.integers(1, 8))
def test_components_equal_the_reference_and_the_option_off(epochs: list, workers: int) -> None:
    want = reference(epochs)
    results = {}
    rounds = {}
    for local in (False, True):
        flow, out = components(epochs, local)
        flow.run(workers=workers)
        results[local] = sorted(r for _, r in out.items)
        rounds[local] = flow.metrics.rounds("cc")
    assert results[True] == results[False] == want
    # fewer rounds: never more in any epoch, none at all on one worker
    for e, k in rounds[True].items():
        assert k <= rounds[False].get(e, 0)
    if workers == 1:
        assert rounds[True] == {}


def test_one_worker_needs_no_round_and_counts_its_passes() -> None:
    chain = [[(i, i + 1) for i in range(20)]]  # a path: 20 rounds of flooding without the option
    flow, out = components(chain, local=False)
    flow.run(workers=1)
    assert max(flow.metrics.rounds("cc").values()) >= 20
    flow2, out2 = components(chain, local=True)
    flow2.run(workers=1)
    assert flow2.metrics.rounds("cc") == {}
    assert flow2.metrics.local_passes("label")[0] >= 20
    assert sorted(out2.records()) == sorted(out.records()) == reference(chain)


def test_rounds_approach_the_exchanges_needed() -> None:
    # a path whose vertices sit in bins of two workers: fewer rounds than flooding needs
    chain = [[(i, i + 1) for i in range(40)]]
    flow, _ = components(chain, local=False)
    flow.run(workers=2)
    off = flow.metrics.rounds("cc")[0]
    flow2, out2 = components(chain, local=True)
    flow2.run(workers=2)
    on = flow2.metrics.rounds("cc").get(0, 0)
    assert on < off
    assert sorted(out2.records()) == reference(chain)


@settings(max_examples=15, deadline=None)
@given(
    epochs=st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=8), min_size=2, max_size=7),
    workers=st.integers(1, 4),
    schedule=st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 8), st.sampled_from(["all-at-once", "fluid", "batched"])),
        max_size=3,
    ),
)
def test_moving_bins_changes_nothing(epochs: list, workers: int, schedule: list) -> None:
    want = reference(epochs)
    flow, out = components(epochs, local=True)
    cmds = [(t, ts.Rescale(w, strategy=s)) for t, w, s in schedule]
    flow.run(workers=workers, max_workers=8, reconfigure=cmds)
    assert sorted(r for _, r in out.items) == want


@settings(max_examples=12, deadline=None)
@given(
    epochs=st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=6), min_size=3, max_size=8),
    every=st.integers(1, 3),
    stop=st.integers(0, 40),
    w1=st.integers(1, 8),
    w2=st.integers(1, 8),
    mode=st.sampled_from(["sync", "async"]),
)
def test_crash_and_restore_on_other_workers(
    tmp_path_factory: Any, epochs: list, every: int, stop: int, w1: int, w2: int, mode: str
) -> None:
    want = reference(epochs)
    cfg = ts.Checkpoints(str(tmp_path_factory.mktemp("ck")), every_epochs=every, mode=mode)
    flow1, out1 = components(epochs, local=True)
    ex = flow1.start(w1, checkpoint=cfg)
    for _ in range(stop):
        if not ex.step():
            break
    ex.coordinator.abort()  # the process "dies" here
    flow2, out2 = components(epochs, local=True)
    ex2 = flow2.start(w2, checkpoint=cfg)
    t0 = ex2.restored.time if ex2.restored is not None else 0
    ex2.run()
    got = [r for t, r in out1.items if t < t0] + [r for _, r in out2.items]
    assert sorted(got) == want


# -- a plain (overlapping epochs) loop: counts per key, records halved until 1 --------


def halving(batches: list[list[int]], local: bool, fold: bool) -> tuple[ts.Dataflow, ts.Collected, Any]:
    flow = ts.Dataflow("halving")
    src = flow.source(ts.io.from_batches([(t, b) for t, b in enumerate(batches)]))
    ops: list[Any] = []

    def loop(scope: Any, xs: ts.Stream) -> ts.Stream:
        fb = scope.feedback()
        ins = xs.concat(fb.stream)
        if fold:

            @flow.fold_bins(ins, key=lambda x: x % 5, state=int, bins=8, name="count", local_rounds=local)
            def count(states: dict, recs: list, ctx: ts.Context) -> None:
                for x in recs:
                    states[x % 5] = states.get(x % 5, 0) + x
                    ctx.emit(("s", x % 5, states[x % 5]))
                    if x > 1:
                        ctx.emit(x // 2)

            op = count
        else:

            @flow.stateful(ins, key=lambda x: x % 5, state=int, bins=8, name="count", local_rounds=local)
            def count2(n: int, x: int, ctx: ts.Context) -> int:
                if x > 1:
                    ctx.emit(x // 2)
                ctx.emit(("s", x % 5, n + x))
                return n + x

            op = count2
        ops.append(op)
        fb.connect(op.inspect(lambda t, x: None).filter(lambda x: type(x) is int).map(lambda x: x))
        return op

    out = flow.iterate(src, name="halve")(loop).collect()
    return flow, out, ops[0]


def halving_reference(batches: list[list[int]]) -> tuple[list[tuple[int, int]], dict[int, int]]:
    out, sums = [], {}
    for t, b in enumerate(batches):
        todo = list(b)
        while todo:
            x = todo.pop()
            sums[x % 5] = sums.get(x % 5, 0) + x
            if x > 1:
                out.append((t, x // 2))
                todo.append(x // 2)
    return sorted(out), sums


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 200), max_size=5), min_size=1, max_size=5),
    workers=st.integers(1, 8),
    fold=st.booleans(),
)
def test_plain_loop_equals_the_reference(batches: list, workers: int, fold: bool) -> None:
    want_out, want_sums = halving_reference(batches)
    for local in (False, True):
        flow, out, op = halving(batches, local, fold)
        flow.run(workers=workers)
        assert sorted(p for p in out.items if type(p[1]) is int) == want_out
        sums: dict[int, int] = {}
        for _, r in out.items:
            if type(r) is tuple:
                sums[r[1]] = max(sums.get(r[1], 0), r[2])
        assert {k: v for k, v in sums.items() if v} == {k: v for k, v in want_sums.items() if v}
        if local and workers == 1:
            assert flow.metrics.rounds("halve") == {}


# -- what local rounds refuse ---------------------------------------------------------


def test_refused_in_the_root_scope() -> None:
    flow = ts.Dataflow("root")
    with pytest.raises(GraphError, match="'op'.*needs an iterate scope"):

        @flow.stateful(flow.input("in"), key=lambda x: x, state=int, name="op", local_rounds=True)
        def op(n: int, x: int, ctx: ts.Context) -> int:
            return n


def _loop(way_back: str) -> ts.Dataflow:
    flow = ts.Dataflow("refused")
    inp = flow.input("in")

    def loop(scope: Any, xs: ts.Stream) -> ts.Stream:
        fb = scope.feedback(max_iterations=3 if way_back == "limit" else None)

        @flow.stateful(xs.concat(fb.stream), key=lambda x: x, state=int, name="op", local_rounds=True)
        def op(n: int, x: int, ctx: ts.Context) -> int:
            ctx.emit(x)
            return n

        if way_back == "stateful":

            @flow.stateful(op, key=lambda x: x, state=int, name="other")
            def other(n: int, x: int, ctx: ts.Context) -> int:
                ctx.emit(x)
                return n

            fb.connect(other)
        elif way_back == "none":
            fb.connect(xs.filter(lambda x: False))
        else:
            fb.connect(op)
        return op

    flow.iterate(inp, name="loop")(loop)
    return flow


@pytest.mark.parametrize(
    "way_back, message",
    [
        ("stateful", "comes back to it through 'other'"),
        ("none", "never comes back to it"),
        ("limit", "max_iterations=3"),
    ],
)
def test_refused_ways_back(way_back: str, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        _loop(way_back).start(1)


def test_refused_two_ways_back() -> None:
    flow = ts.Dataflow("two")
    inp = flow.input("in")

    def loop(scope: Any, xs: ts.Stream) -> ts.Stream:
        fb1 = scope.feedback(name="fb1")
        fb2 = scope.feedback(name="fb2")

        @flow.stateful(xs.concat(fb1.stream, fb2.stream), key=lambda x: x, state=int, name="op", local_rounds=True)
        def op(n: int, x: int, ctx: ts.Context) -> int:
            return n

        fb1.connect(op.filter(lambda x: x > 0))
        fb2.connect(op.filter(lambda x: x < 0))
        return op

    flow.iterate(inp, name="loop")(loop)
    with pytest.raises(GraphError, match="two ways"):
        flow.start(1)
