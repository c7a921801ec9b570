"""The stateful operator against a plain sequential dict-based reference.

Random keyed records at random (out-of-order) times, random worker counts and bin
counts; the dataflows: a keyed sum, a keyed list-append with timers (emit the list a
few epochs later and clear on a sentinel), and an attrs-struct state.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from attrs import define, field
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import KeyFunctionError, OperatorError, ProgressError, StateTypeError

keys = st.sampled_from(["a", "b", "c", "d", 1, 2, (3, "x")])
record = st.tuples(keys, st.integers(-3, 9))
# (delay relative to the input's time, records)
sends = st.lists(st.tuples(st.integers(0, 3), st.lists(record, max_size=8)), max_size=10)
advances = st.lists(st.integers(0, 2), max_size=10)


def feed(inp: ts.InputStream, ex: ts.Execution, sends, advances) -> list[tuple[int, tuple]]:
    """Send per the script, stepping in between; return (time, record) as sent."""
    sent = []
    for i, (delay, recs) in enumerate(sends):
        t = inp.time + delay
        inp.send(recs, time=t)
        sent.extend((t, r) for r in recs)
        if i < len(advances):
            inp.advance_to(inp.time + advances[i])
        ex.step()
    inp.close()
    ex.run()
    return sent


@given(sends=sends, advances=advances, workers=st.integers(1, 8), bins=st.sampled_from([1, 2, 16, 256]))
def test_keyed_running_sum_in_timestamp_order(sends, advances, workers, bins):
    flow = ts.Dataflow("sum")
    inp = flow.input("in", batch_size=3)

    @flow.stateful(inp, key=lambda r: r[0], state=int, bins=bins)
    def running(total: int, r, ctx: ts.Context) -> int:
        total += r[1]
        ctx.emit((ctx.key, ctx.time, total))
        return total

    out = running.collect()
    sent = feed(inp, flow.start(workers), sends, advances)

    # reference: per key, records in time order (ties in send order), running sums
    totals: dict = defaultdict(int)
    expected = []
    for t, (k, v) in sorted(sent, key=lambda p: p[0]):
        totals[k] += v
        expected.append((k, t, totals[k]))
    got = [r for _, r in out.items]
    # same multiset overall, and per key the same sequence (timestamp order)
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    for k in {k for k, _, _ in expected}:
        assert [x for x in got if x[0] == k] == [x for x in expected if x[0] == k]
    assert all(t == et for t, (_, et, _) in out.items)
    assert flow.state(running, format="dict") == dict(totals)


@given(sends=sends, advances=advances, workers=st.integers(1, 8), delay=st.integers(0, 3))
def test_list_append_with_timers_and_clear(sends, advances, workers, delay):
    """Each record appends; a timer ``delay`` epochs later emits the list as it is
    then; a value of 9 clears the key."""
    flow = ts.Dataflow("lists")
    inp = flow.input("in", batch_size=2)

    @flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=8)
    def append(values: list[int], r, ctx: ts.Context) -> None:
        if r[1] == 9:
            ctx.clear()
            return
        values.append(r[1])
        ctx.notify_at(ctx.time + delay)

    @append.on_notify
    def report(values: list[int], time, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, time, tuple(values)))

    out = append.collect()
    sent = feed(inp, flow.start(workers), sends, advances)

    # reference: an epoch-by-epoch simulation; per epoch, records (in send order) first,
    # then the timers due at that epoch (a timer at t fires after all records at t)
    lists: dict = defaultdict(list)
    expected = []
    by_time: dict = defaultdict(list)
    for t, (k, v) in sent:
        by_time[t].append((k, v))
    max_t = max(by_time, default=0) + delay + 1
    pending: dict = defaultdict(set)
    for t in range(max_t + 1):
        for k, v in by_time.get(t, ()):
            if v == 9:
                lists.pop(k, None)
            else:
                lists[k].append(v)
                pending[t + delay].add(k)
        for k in sorted(pending.pop(t, ()), key=repr):
            expected.append((k, t, tuple(lists[k])))
    assert sorted(out.records(), key=repr) == sorted(expected, key=repr)
    assert all(t == et for t, (_, et, _) in out.items)


@define
class Route:
    flights: int = 0
    delays: list[int] = field(factory=list)
    by_hour: dict[int, int] = field(factory=dict)


@given(sends=sends, workers=st.integers(1, 8))
def test_struct_state_matches_reference(sends, workers):
    flow = ts.Dataflow("routes")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda r: r[0], state=Route)
    def track(route: Route, r, ctx) -> None:
        route.flights += 1
        route.delays.append(r[1])
        route.by_hour[ctx.time] = route.by_hour.get(ctx.time, 0) + 1

    sent = feed(inp, flow.start(workers), sends, [])
    ref: dict = {}
    for t, (k, v) in sorted(sent, key=lambda p: p[0]):
        r = ref.setdefault(k, Route())
        r.flights += 1
        r.delays.append(v)
        r.by_hour[t] = r.by_hour.get(t, 0) + 1
    assert flow.state(track, format="dict") == ref


def test_fold_bins_sees_whole_bins():
    flow = ts.Dataflow("fold")
    inp = flow.input("in")
    calls = []

    @flow.fold_bins(inp, key=lambda r: r, state=int, bins=4)
    def fold(states: dict, records: list, ctx) -> None:
        calls.append((ctx.time, len(records)))
        for r in records:
            states[r] = states.get(r, 0) + 1
        ctx.emit((ctx.time, sum(states.values())))

    fold.collect()
    inp.send(list(range(20)) * 2)
    inp.close()
    flow.run(workers=2)
    assert sum(n for _, n in calls) == 40
    assert len(calls) <= 4 * 3  # one call per (bin, batch): at most 4 bins x 3 batches
    assert flow.state(fold, format="dict") == {i: 2 for i in range(20)}


def test_bad_state_type_is_rejected_at_build_time():
    flow = ts.Dataflow("bad")
    inp = flow.input("in")

    @define
    class Bad:
        ok: int = 0
        delays: list[object] = field(factory=list)

    with pytest.raises(StateTypeError, match=r"Bad.delays\[\]"):
        flow.stateful(inp, key=lambda r: r, state=Bad)


def test_key_function_raising_names_operator_record_and_time():
    flow = ts.Dataflow("bad")
    inp = flow.input("in")
    flow.stateful(inp, key=lambda r: r["k"], state=int, name="count")(lambda s, r, ctx: s + 1)
    inp.advance_to(4)
    inp.send([{"k": 1}, {"j": 2}])
    inp.close()
    with pytest.raises(KeyFunctionError, match=r"'count'.*KeyError.*\{'j': 2\}.*time 4"):
        flow.run()


@pytest.mark.parametrize("workers", [1, 3])
def test_unencodable_key_names_operator_record_and_time(workers):
    flow = ts.Dataflow("bad")
    inp = flow.input("in")
    flow.stateful(inp, key=lambda r: r, state=int, name="count")(lambda s, r, ctx: s + 1)
    inp.send([object.__new__(type("Opaque", (), {}))])
    inp.close()
    with pytest.raises(KeyFunctionError, match=r"'count'.*Opaque.*cannot be used as a key"):
        flow.run(workers=workers)


def test_user_function_error_names_key_and_record():
    flow = ts.Dataflow("bad")
    inp = flow.input("in")
    flow.stateful(inp, key=lambda r: r[0], state=int, name="div")(lambda s, r, ctx: s + 1 // r[1])
    inp.advance_to(2)
    inp.send([("a", 1), ("b", 0)])
    inp.close()
    with pytest.raises(OperatorError, match=r"'div'.*time 2.*ZeroDivisionError.*key 'b'.*\('b', 0\)"):
        flow.run()


def test_timer_before_current_time_is_an_error():
    flow = ts.Dataflow("bad")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda r: r, state=int, name="early")
    def early(s, r, ctx):
        ctx.notify_at(ctx.time - 1)
        return s

    early.on_notify(lambda s, t, ctx: None)
    inp.advance_to(3)
    inp.send([1])
    inp.close()
    with pytest.raises(ts.errors.ProgressError, match=r"'early'.*timer at 2.*before the current time 3"):
        flow.run()


def test_timer_without_handler_is_an_error():
    flow = ts.Dataflow("bad")
    inp = flow.input("in")
    flow.stateful(inp, key=lambda r: r, state=int, name="nohandler")(lambda s, r, ctx: ctx.notify_at(5))
    inp.send([1])
    inp.close()
    with pytest.raises(ts.errors.GraphError, match="on_notify handler"):
        flow.run()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_timer_rearmed_at_its_own_time_is_refused(workers):
    """A timer fires once per (key, time): ``ctx.notify_at(ctx.time)`` inside
    ``on_notify`` would fire forever; it is refused, naming the operator, key and time.
    A later time is fine."""
    def build(again):
        flow = ts.Dataflow("rearm")
        inp = flow.input("in")

        @flow.stateful(inp, key=lambda r: r, state=int)
        def count(n, r, ctx):
            ctx.notify_at(ctx.time)
            return n + 1

        fired = []

        @count.on_notify
        def tick(n, t, ctx):
            fired.append(t)
            if len(fired) > 100:
                raise RuntimeError("the timer fires forever")
            ctx.emit((ctx.key, t))
            if t < 3:
                ctx.notify_at(again(t))
            return n

        out = count.collect()
        inp.send(["k"])
        inp.close()
        return flow, out

    flow, out = build(lambda t: t)
    with pytest.raises(ProgressError, match=r"operator 'count': on_notify for key 'k' at time 0 set a timer at that same time"):
        flow.run(workers=workers)
    flow, out = build(lambda t: t + 1)
    flow.run(workers=workers)
    assert out.records() == [("k", 0), ("k", 1), ("k", 2), ("k", 3)]
