"""The CEP operator (:mod:`apps.cep.dataflow`) against the matcher run sequentially per
key and against the epoch-by-epoch emission rule of its docstring: on the bundled flight
slice (also against the hand-written baselines) and on hypothesis-generated keyed
streams with out-of-order and late events; on 1-8 workers, across a live migration and
across a stop + restore from a checkpoint."""

from __future__ import annotations

import operator
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import apps
import tstate as ts
from apps.cep import Pattern
from apps.cep.baseline import CascadeBaseline, RecoveryBaseline
from apps.cep.dataflow import CepState, cep, release_epoch, watermark
from apps.cep.flights import FlightEvent, delay_cascade, recovery
from apps.cep.source import flight_source
from tests.apps.cep.dataflow_reference import (
    collected,
    per_key_in_order,
    sequential,
    timed,
)
from tests.apps.cep.strategies import KINDS, pattern_specs
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.errors import ConfigurationError, StateTypeError
from tstate.migration.commands import Rescale

SAMPLE = os.path.join(os.path.dirname(apps.__file__), "data", "flights-sample.parquet")

# records: (index, kind, value, key, event time); the generated patterns read [1] and [2]
Rec = tuple[int, str, int, str, int]
rkey = operator.itemgetter(3)
rtime = operator.itemgetter(4)


# -- generated keyed streams --------------------------------------------------------------


@st.composite
def keyed_streams(draw: Any, max_size: int = 14) -> tuple[list[tuple[int, list[Rec]]], int, int]:
    """(batches [(epoch, records)], epoch, lateness): event times mostly grow, some go
    back by up to 4 units (out of order; late when beyond the lateness); every record
    arrives at the epoch of the largest event time seen so far (as the table sources
    stamp rows), sometimes one epoch later."""
    epoch = draw(st.sampled_from([1, 2, 3, 5]))
    lateness = draw(st.sampled_from([0, 0, 1, 2, 4]))
    n = draw(st.integers(0, max_size))
    keys = draw(st.sampled_from(["x", "xy", "xyz"]))
    base = 4
    arrival = 0
    out: list[tuple[int, list[Rec]]] = []
    for i in range(n):
        base += draw(st.sampled_from([0, 1, 1, 2, 3]))
        t = base - draw(st.sampled_from([0, 0, 0, 1, 2, 4]))
        arrival = max(arrival, base // epoch + draw(st.sampled_from([0, 0, 0, 0, 1])))
        rec = (i, draw(st.sampled_from(KINDS)), draw(st.integers(0, 3)), draw(st.sampled_from(keys)), t)
        if out and out[-1][0] == arrival:
            out[-1][1].append(rec)
        else:
            out.append((arrival, [rec]))
    return out, epoch, lateness


def build(pattern: Pattern, batches, epoch: int, lateness: int, report: bool = True, bins: int = 16, keep: bool = False):
    flow = ts.Dataflow("cep-test")
    src = flow.source(ts.io.from_batches(lambda: [(t, list(r)) for t, r in batches]), name="events")
    out = cep(
        flow, src, pattern, key=rkey, time=rtime, epoch=epoch, lateness=lateness,
        event_type=Rec, report_timeouts=report, bins=bins, keep_idle_keys=keep,
    )  # fmt: skip
    return flow, out, out.collect()


def outputs(sinks) -> tuple[Counter, Counter, Counter]:
    m, t, late = sinks
    return collected(m.items, "match"), collected(t.items, "timeout"), collected(late.items, "late")


def check_against_oracles(pattern, batches, epoch, lateness, got, report=True) -> None:
    want = timed(pattern, batches, key=rkey, time=rtime, epoch=epoch, lateness=lateness, report_timeouts=report)
    assert got[0] == want[0], "matches (with their dataflow times)"
    assert got[1] == want[1], "timeouts (with their dataflow times)"
    assert got[2] == want[2], "late events"


# -- the operator against the oracles ---------------------------------------------------------


@given(spec=pattern_specs(), data=keyed_streams(), workers=st.integers(1, 8), report=st.booleans(), keep=st.booleans())
def test_random_streams_match_the_sequential_matcher(spec, data, workers, report, keep) -> None:
    batches, epoch, lateness = data
    note(f"{spec!r} epoch={epoch} lateness={lateness} batches={batches}")
    pattern = spec.build()
    flow, out, sinks = build(pattern, batches, epoch, lateness, report, keep=keep)
    flow.run(workers=workers)
    got = outputs(sinks)
    check_against_oracles(pattern, batches, epoch, lateness, got, report)
    # and the plain sequential run per key: same matches per key in the same order
    seq_m, _, seq_late = sequential(
        pattern, batches, key=rkey, time=rtime, epoch=epoch, lateness=lateness, report_timeouts=report
    )
    assert per_key_in_order(sinks[0].items) == seq_m
    # (the timeouts depend on where advance_time is called: they are checked above)
    assert {k: sorted(v) for k, v in _by_key(sinks[2].items).items()} == {k: sorted(v) for k, v in seq_late.items()}
    # nothing is left behind: every key's state was dropped once it had nothing pending
    left = flow.state(out.operator, format="dict")
    assert all(not s.buffer and s.wake is None for s in left.values())
    if pattern.window is not None and report:
        assert all(not s.nfa.runs for s in left.values())
        if not keep:
            assert all(not s.is_empty() for s in left.values())


def _by_key(items) -> dict:
    out: dict = {}
    for _, (k, v) in items:
        out.setdefault(k, []).append(v)
    return out


@settings(max_examples=25)
@given(
    spec=pattern_specs(),
    data=keyed_streams(),
    w1=st.integers(1, 4),
    w2=st.integers(1, 8),
    at=st.integers(0, 8),
    strategy=st.sampled_from(["all-at-once", "fluid", "batched"]),
)
def test_same_output_across_a_migration(spec, data, w1, w2, at, strategy) -> None:
    batches, epoch, lateness = data
    pattern = spec.build()
    flow, out, sinks = build(pattern, batches, epoch, lateness)
    flow.run(workers=w1, reconfigure=[(at, Rescale(w2, strategy=strategy))])
    check_against_oracles(pattern, batches, epoch, lateness, outputs(sinks))


@settings(max_examples=25)
@given(
    spec=pattern_specs(),
    data=keyed_streams(),
    every=st.integers(1, 3),
    stop=st.integers(0, 40),
    w1=st.integers(1, 4),
    w2=st.integers(1, 4),
    mode=st.sampled_from(["sync", "async"]),
)
def test_same_output_across_a_crash_and_restore(tmp_path_factory, spec, data, every, stop, w1, w2, mode) -> None:
    batches, epoch, lateness = data
    pattern = spec.build()
    cfg = Checkpoints(str(tmp_path_factory.mktemp("ck")), every_epochs=every, mode=mode)
    flow, out, sinks1 = build(pattern, batches, epoch, lateness)
    ex = flow.start(w1, checkpoint=cfg)
    for _ in range(stop):  # then "crash": abandon the execution
        if not ex.step():
            break
    ex.coordinator.abort()
    flow2, out2, sinks2 = build(pattern, batches, epoch, lateness)
    ex2 = flow2.start(w2, checkpoint=cfg)
    t0 = ex2.restored.time if ex2.restored is not None else 0
    event("restored from a checkpoint" if ex2.restored is not None else "started afresh")
    ex2.run()
    union = tuple(
        Counter({k: n for k, n in a.items() if k[0] < t0}) + Counter({k: n for k, n in b.items() if k[0] >= t0})
        for a, b in zip(outputs(sinks1), outputs(sinks2))
    )
    assert all(k[0] >= t0 for c in outputs(sinks2) for k in c), "the second run re-emitted an earlier epoch"
    check_against_oracles(pattern, batches, epoch, lateness, union)


# -- explicit scenarios ------------------------------------------------------------------------


def ab_pattern(within: int | None = None) -> Pattern:
    p = Pattern.begin("a").where(lambda e: e[1] == "a").followed_by("b").where(lambda e: e[1] == "b")
    return p.within(within) if within is not None else p


def test_out_of_order_events_are_released_in_event_time_order() -> None:
    # epoch 10: b at 5 arrives before a at 3 in the same epoch: still a -> b
    batches = [(0, [(0, "b", 0, "k", 5), (1, "a", 0, "k", 3)]), (1, [(2, "b", 0, "k", 14)])]
    flow, out, (m, t, late) = build(ab_pattern(), batches, epoch=10, lateness=0)
    flow.run()
    got = [(tt, x["a"][0][0], x["b"][0][0]) for tt, (_, x) in m.items]
    assert got == [(0, 1, 0)]  # released when the frontier passed epoch 0
    assert late.items == []


def test_late_events_go_to_the_side_output() -> None:
    # epoch 10, lateness 3: at epoch 1 the watermark is 10 - 3 = 7
    batches = [
        (0, [(0, "a", 0, "k", 2)]),
        (1, [(1, "b", 0, "k", 6), (2, "b", 0, "j", 8), (3, "b", 0, "k", 7)]),
        (2, [(4, "b", 0, "k", 18)]),
    ]
    flow, out, (m, t, late) = build(ab_pattern(), batches, epoch=10, lateness=3)
    flow.run(workers=2)
    assert sorted(late.items) == [(1, ("k", (1, "b", 0, "k", 6)))]
    # a at 2 is released at epoch 0 (W(0) = 7 > 2); b at 7 at epoch 1 (W(1) = 17)
    assert [(tt, x["b"][0][4]) for tt, (_, x) in m.items] == [(1, 7)]


def test_lateness_buffers_events_until_the_watermark_passes_them() -> None:
    # lateness 10 with epochs of 10: an event is released one epoch after its own
    batches = [(0, [(0, "a", 0, "k", 1)]), (1, [(1, "b", 0, "k", 12)]), (2, [(2, "x", 0, "k", 25)])]
    flow, out, (m, t, late) = build(ab_pattern(), batches, epoch=10, lateness=10)
    flow.run()
    assert [tt for tt, _ in m.items] == [release_epoch(12, 10, 10)] == [2]
    assert watermark(2, 10, 10) == 20


def test_timeouts_fire_through_timers_at_the_window_end() -> None:
    # a at 3, within 12: the window closes at 15, W(T) = 10 (T + 1) >= 15 first at T = 1
    batches = [(0, [(0, "a", 0, "k", 3)]), (5, [(1, "x", 0, "j", 50)])]
    flow, out, (m, t, late) = build(ab_pattern(within=12), batches, epoch=10, lateness=0)
    flow.run()
    assert [(tt, k, y.timeout_time) for tt, (k, y) in t.items] == [(1, "k", 15)]
    assert m.items == []
    # ...even when no further event arrives at all (the input's end fires the timers)
    flow, out, (m, t, late) = build(ab_pattern(within=12), batches[:1], epoch=10, lateness=0)
    flow.run()
    assert [(tt, y.timeout_time) for tt, (_, y) in t.items] == [(1, 15)]


def test_trailing_negation_completes_at_the_window_end() -> None:
    p = (
        Pattern.begin("a").where(lambda e: e[1] == "a")
        .not_followed_by("no_b").where(lambda e: e[1] == "b")
        .within(5)
    )  # fmt: skip
    batches = [(0, [(0, "a", 0, "k", 1), (1, "a", 0, "j", 2), (2, "b", 0, "j", 3)])]
    flow, out, (m, t, late) = build(p, batches, epoch=2, lateness=0)
    flow.run()
    # k's window closes at 6: W(T) = 2 (T + 1) >= 6 at T = 2
    assert [(tt, k) for tt, (k, _) in m.items] == [(2, "k")]


def test_state_is_typed_and_idle_keys_are_dropped() -> None:
    flow = ts.Dataflow("state")
    inp = flow.input("events")
    out = cep(flow, inp, ab_pattern(within=100), key=rkey, time=rtime, epoch=10, event_type=Rec)
    probe = out.operator.probe()
    m, _, _ = out.collect()
    ex = flow.start(workers=2)
    inp.send([(0, "a", 0, "k", 1), (1, "a", 0, "j", 1)])
    inp.advance_to(1)
    inp.send([(2, "b", 0, "k", 12), (3, "b", 0, "k", 15)])
    inp.advance_to(2)
    ex.step_while(lambda: probe.less_than(2))
    assert len(m) == 1
    state = flow.state(out.operator, format="dict")
    # k matched and has nothing pending: its state was dropped; j's a still waits
    assert set(state) == {"j"} and isinstance(state["j"], CepState)
    assert state["j"].nfa.runs and not state["j"].buffer
    assert state["j"].wake == 10  # the window of a at 1 closes at 101: W(10) = 110
    table = flow.state(out.operator)  # as Arrow rows, like any typed state
    assert table.num_rows == 1 and "nfa" in table.column_names
    inp.close()
    ex.run()
    assert flow.state(out.operator, format="dict") == {}  # every window closed: dropped


def test_bad_configuration_is_refused_when_the_dataflow_is_built() -> None:
    flow = ts.Dataflow("bad")
    src = flow.input("in")
    with pytest.raises(StateTypeError, match="events"):
        cep(flow, src, ab_pattern(), key=rkey, time=rtime, event_type=Any)
    with pytest.raises(ConfigurationError, match="epoch"):
        cep(flow, src, ab_pattern(), key=rkey, time=rtime, event_type=Rec, epoch=0)
    with pytest.raises(ConfigurationError, match="lateness"):
        cep(flow, src, ab_pattern(), key=rkey, time=rtime, event_type=Rec, lateness=-1)


def test_two_operators_in_one_dataflow_and_unpacking() -> None:
    flow = ts.Dataflow("two")
    src = flow.source(ts.io.from_batches([(0, [(0, "a", 0, "k", 0), (1, "b", 0, "k", 0)])]))
    m1, t1, l1 = cep(flow, src, ab_pattern(), key=rkey, time=rtime, event_type=Rec)
    out2 = cep(flow, src, ab_pattern(), key=rkey, time=rtime, event_type=Rec)
    assert out2.operator.name != "cep"
    c1, c2 = m1.collect(name="c1"), out2.matches.collect(name="c2")
    flow.run()
    assert len(c1) == len(c2) == 1


# -- the flight patterns on the bundled slice ------------------------------------------------


def flight_dataflow(path: str, lateness: int = 0, limit: int | None = None):
    flow = ts.Dataflow("flights")
    src = flow.source(flight_source(path, epoch="1h", limit=limit), name="flights")
    outs = {}
    for name, pattern in (("cascade", delay_cascade()), ("recovery", recovery())):
        outs[name] = cep(
            flow, src, pattern, key=operator.attrgetter("origin"), time=operator.attrgetter("minute"),
            epoch=60, lateness=lateness, event_type=FlightEvent, name=name,
        )  # fmt: skip
    sinks = {n: o.collect() for n, o in outs.items()}
    return flow, outs, sinks


@pytest.fixture(scope="module")
def sample_events() -> list[FlightEvent]:
    r = flight_source(SAMPLE).open()
    out: list[FlightEvent] = []
    while (b := r.next_batch()) is not None:
        out += b[1]
    return out


@pytest.fixture(scope="module")
def sample_run():
    flow, outs, sinks = flight_dataflow(SAMPLE)
    flow.run(workers=1)
    return sinks


def test_flight_patterns_on_the_sample_equal_the_baselines(sample_events, sample_run) -> None:
    assert len(sample_events) > 30_000
    for name, pattern, cls in (("cascade", delay_cascade(), CascadeBaseline), ("recovery", recovery(), RecoveryBaseline)):
        states: dict = {}
        want: dict = {}
        for f in sample_events:
            b = states.get(f.origin)
            if b is None:
                b = states[f.origin] = cls()
            want.setdefault(f.origin, []).extend(b.process(f, f.minute))
        for k, b in states.items():  # the end of the input: every window closes
            want.setdefault(k, []).extend(b.advance_time(10**12))
        want = {k: v for k, v in want.items() if v}
        got: dict = {}
        for _, (k, x) in sorted(sample_run[name][0].items, key=lambda p: p[0]):
            got.setdefault(k, []).append(x.to_dict())
        assert got == want, name
        assert sum(map(len, got.values())) > 100
        # and the matcher run sequentially per key
        batches = [(0, sample_events)]  # in order: nothing is late
        seq_m, _, seq_late = sequential(
            pattern, batches, key=operator.attrgetter("origin"), time=operator.attrgetter("minute"), epoch=10**9
        )
        assert per_key_in_order(sample_run[name][0].items) == seq_m
        assert not sample_run[name][2].items and not seq_late


def test_flight_patterns_emission_times(sample_events, sample_run) -> None:
    for name, pattern in (("cascade", delay_cascade()), ("recovery", recovery())):
        batches: list = []
        for f in sample_events:
            t = f.minute // 60
            if batches and batches[-1][0] == t:
                batches[-1][1].append(f)
            else:
                batches.append((t, [f]))
        want = timed(pattern, batches, key=operator.attrgetter("origin"), time=operator.attrgetter("minute"), epoch=60)
        m, t, late = sample_run[name]
        assert collected(m.items, "match") == want[0]
        assert collected(t.items, "timeout") == want[1]
        # the docstring's rules (in-order input, lateness 0: R(e) = e // 60)
        for T, (_, x) in m.items:
            if name == "recovery":  # no_skip: at the completing event's release epoch
                assert T == x.last_time // 60
            else:  # held back at most until the earlier partial matches time out
                assert x.last_time // 60 <= T <= max(x.last_time // 60, -(-(x.first_time + 180) // 60) - 1)
        for T, (_, y) in t.items:
            last = y.partial.last_time // 60
            assert T == max(last, -(-y.timeout_time // 60) - 1)


@pytest.mark.parametrize("workers", [3, 8])
def test_flight_patterns_on_more_workers(sample_run, workers) -> None:
    flow, outs, sinks = flight_dataflow(SAMPLE, limit=12_000)
    flow.run(workers=workers)
    flow1, outs1, sinks1 = flight_dataflow(SAMPLE, limit=12_000)
    flow1.run(workers=1)
    for name in sinks:
        for a, b, kind in zip(sinks[name], sinks1[name], ("match", "timeout", "late")):
            assert collected(a.items, kind) == collected(b.items, kind)


def test_flight_patterns_across_migration_and_restore(tmp_path) -> None:
    flow1, _, ref = flight_dataflow(SAMPLE, limit=8_000)
    flow1.run()
    want = {n: [collected(s.items, k) for s, k in zip(ref[n], ("match", "timeout", "late"))] for n in ref}
    # a live rescale 2 -> 5 at epoch 16305121 // 60 + 20 (20 hours in)
    at = 16305121 // 60 + 20
    flow, _, sinks = flight_dataflow(SAMPLE, limit=8_000)
    flow.run(workers=2, reconfigure=[(at, Rescale(5))])
    assert flow.execution.metrics.moves, "no bin moved"
    for n in sinks:
        assert [collected(s.items, k) for s, k in zip(sinks[n], ("match", "timeout", "late"))] == want[n]
    # stop after 40 steps, restore on 3 workers
    cfg = Checkpoints(str(tmp_path / "ck"), every_epochs=5, mode="sync")
    flow, _, s1 = flight_dataflow(SAMPLE, limit=8_000)
    ex = flow.start(2, checkpoint=cfg)
    for _ in range(40):
        ex.step()
    ex.coordinator.abort()
    flow2, _, s2 = flight_dataflow(SAMPLE, limit=8_000)
    ex2 = flow2.start(3, checkpoint=cfg)
    assert ex2.restored is not None
    t0 = ex2.restored.time
    ex2.run()
    for n in sinks:
        for a, b, w, kind in zip(s1[n], s2[n], want[n], ("match", "timeout", "late")):
            first = Counter({k: c for k, c in collected(a.items, kind).items() if k[0] < t0})
            assert first + collected(b.items, kind) == w


def test_out_of_order_flights_are_late_or_buffered() -> None:
    """Flights read from a file that is not in time order: with lateness 0 the ones
    behind the current epoch are late; with a large lateness all are matched."""
    import tempfile

    import pyarrow as pa
    import pyarrow.csv as pcsv

    rows = [(0, 45), (10, 50), (70, 10), (20, 60), (130, 0), (15, 70)]  # (minute, delay)
    table = pa.table(
        {
            "date": pa.array([m * 60 for m, _ in rows], pa.timestamp("s")),
            "delay": [d for _, d in rows],
            "distance": [100] * len(rows),
            "origin": ["ATL"] * len(rows),
            "destination": ["ORD"] * len(rows),
        }
    )
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.csv")
        pcsv.write_csv(table, path)
        flow, outs, sinks = flight_dataflow(path, lateness=0)
        flow.run()
        late = sorted(f.minute for _, (_, f) in sinks["cascade"][2].items)
        assert late == [15, 20]  # arrived in epoch 1 (after minute 70), below W(0) = 60
        assert sinks["cascade"][0].items == []
        flow, outs, sinks = flight_dataflow(path, lateness=120)
        flow.run()
        assert sinks["cascade"][2].items == []
        # in event time: 45 (0) -> 50 (10) -> 70 (15), although 15 arrived last
        assert [[f.delay for f in x.events()] for _, (_, x) in sinks["cascade"][0].items] == [[45, 50, 70]]


def test_module_doctests() -> None:
    import doctest

    import apps.cep.dataflow

    r = doctest.testmod(apps.cep.dataflow)
    assert r.attempted > 5 and r.failed == 0


def test_float_event_times_checkpoint_and_restore(tmp_path) -> None:
    FRec = tuple[int, str, int, str, float]
    batches = [(0, [(0, "a", 0, "k", 0.5), (1, "a", 0, "j", 1.25)]), (1, [(2, "b", 0, "k", 2.75)]), (3, [(3, "b", 0, "j", 6.5)])]

    def run(stop: int | None, workers: int):
        flow = ts.Dataflow("floats")
        src = flow.source(ts.io.from_batches(lambda: [(t, list(r)) for t, r in batches]), name="events")
        out = cep(flow, src, ab_pattern(within=5), key=rkey, time=rtime, epoch=2.0, lateness=0.5,
                  event_type=FRec, time_type=float)  # fmt: skip
        m, t, _ = out.collect()
        ex = flow.start(workers, checkpoint=Checkpoints(str(tmp_path / "ck"), every_epochs=1, mode="sync"))
        restored = ex.restored.time if ex.restored is not None else 0
        if stop is None:
            ex.run()
        else:
            for _ in range(stop):
                ex.step()
            ex.coordinator.abort()
        return restored, collected(m.items, "match"), collected(t.items, "timeout")

    want = timed(ab_pattern(within=5), batches, key=rkey, time=rtime, epoch=2.0, lateness=0.5)
    # k: a 0.5 -> b 2.75 matches; j: a 1.25, b 6.5 is 5.25 later: a times out at 6.25
    assert [k[1] for k in want[0]] == ["k"] and [(k[1], k[2][1]) for k in want[1]] == [("j", 6.25)]
    _, m1, t1 = run(stop=4, workers=2)
    t0, m2, t2 = run(stop=None, workers=1)
    assert t0 > 0
    assert Counter({k: n for k, n in m1.items() if k[0] < t0}) + m2 == want[0]
    assert Counter({k: n for k, n in t1.items() if k[0] < t0}) + t2 == want[1]
