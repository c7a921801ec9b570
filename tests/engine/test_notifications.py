"""Notifications and frontiers on the embedded engine, against a sequential reference.

Random keyed records at random (possibly out-of-order) times, random worker counts and
batch sizes, random interleavings of sends and steps.  The operator stashes records per
time and emits per-key sums when ``notify_at`` fires; we check every notification fires
exactly once, in time order, only after every record at its time was delivered, and
that the output equals a plain dict computation.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import given
from hypothesis import strategies as st

import tstate as ts

records = st.tuples(st.integers(0, 9), st.integers(-5, 5))
# a script: list of actions; ("send", delta_time, recs) | ("advance", delta) | ("step", n)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 3), st.lists(records, max_size=12)),
        st.tuples(st.just("advance"), st.integers(0, 2)),
        st.tuples(st.just("step"), st.integers(1, 3)),
    ),
    max_size=25,
)


def build(workers: int, batch_size: int):
    flow = ts.Dataflow("sums")
    inp = flow.input("events", batch_size=batch_size)
    delivered: Counter = Counter()  # time -> records delivered to the operator (all workers)
    fired: list[tuple[int, object]] = []  # (worker, time) in firing order
    violations: list[str] = []
    sent: Counter = Counter()

    @flow.unary_frontier(inp, exchange=lambda r: r[0], state=dict)
    def sums(inp_, out, ctx):
        stash = ctx.state
        for cap, batch in inp_:
            delivered[cap.time] += len(batch)
            per_key = stash.setdefault(cap.time, defaultdict(int))
            for k, v in batch:
                per_key[k] += v
            ctx.notify_at(cap)
        for cap in ctx.notifications():
            if delivered[cap.time] != sent[cap.time]:
                violations.append(f"fired at {cap.time} before all records arrived")
            fired.append((ctx.worker, cap.time))
            out.give_many(cap, sorted(stash.pop(cap.time).items()))

    out = sums.collect()
    return flow, inp, out, fired, violations, sent


@given(actions=actions, workers=st.integers(1, 8), batch_size=st.integers(1, 6), data=st.data())
def test_notifications_fire_once_in_order_after_all_records(actions, workers, batch_size, data):
    flow, inp, out, fired, violations, sent = build(workers, batch_size)
    ex = flow.start(workers)
    reference: dict[int, Counter] = defaultdict(Counter)
    for act in actions:
        if act[0] == "send":
            t = inp.time + act[1]
            inp.send(act[2], time=t)
            sent[t] += len(act[2])
            for k, v in act[2]:
                reference[t][k] += v
        elif act[0] == "advance":
            inp.advance_to(inp.time + act[1])
        else:
            for _ in range(act[1]):
                ex.step()
    inp.close()
    ex.run()

    assert not violations
    # exactly once per (worker, time) that received data
    assert len(fired) == len(set(fired))
    per_worker: dict[int, list] = defaultdict(list)
    for w, t in fired:
        per_worker[w].append(t)
    for times in per_worker.values():
        assert times == sorted(times), "notifications out of time order"
    got: dict[int, dict] = defaultdict(dict)
    for t, (k, v) in out.items:
        assert k not in got[t], "a key emitted twice for one time"
        got[t][k] = v
    # every key that had records at a time is emitted once, with the sum (even a 0 sum)
    assert dict(got) == {t: dict(c) for t, c in reference.items() if keys_at(actions, t)}
    assert ex.finished and flow.execution.tracker.is_idle()


def keys_at(actions, time: int) -> bool:
    """Whether the script sent any record at ``time``."""
    t = 0
    for act in actions:
        if act[0] == "send" and act[2] and t + act[1] == time:
            return True
        if act[0] == "advance":
            t += act[1]
    return False


@given(workers=st.integers(1, 8), epochs=st.lists(st.lists(records, max_size=10), max_size=6))
def test_runs_are_deterministic(workers, epochs):
    def once():
        flow, inp, out, fired, _, _ = build(workers, 3)
        for t, recs in enumerate(epochs):
            inp.advance_to(t)
            inp.send(recs)
        inp.close()
        flow.run(workers)
        return out.items, fired

    assert once() == once()


def test_notify_requests_are_merged_and_fire_after_frontier():
    flow = ts.Dataflow("merge")
    inp = flow.input("in")
    fired = []

    @flow.unary_frontier(inp)
    def op(i, out, ctx):
        for cap, _ in i:
            ctx.notify_at(cap)
            ctx.notify_at(cap.time)  # merged with the previous one
            ctx.notify_at(cap.time + 2)  # a later time, from the capability in hand
        for cap in ctx.notifications():
            fired.append(cap.time)

    ex = flow.start()
    inp.send([1])
    ex.step_while(lambda: True)
    assert fired == []  # epoch 0 is not complete yet
    inp.advance_to(1)
    ex.step_while(lambda: True)
    assert fired == [0]
    inp.advance_to(5)
    ex.step_while(lambda: True)
    assert fired == [0, 2]
    inp.close()
    ex.run()
    assert fired == [0, 2]
