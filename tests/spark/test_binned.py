"""Bins carried through a fused chain (tstate.spark.binned) give each operator the same
records in the same bins as keying every record again (Plan.push)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.spark.binned import chain_carries_bins, check_bins, push_binned, rows_by_time
from tstate.spark.plan import Plan

rows_st = st.lists(
    st.fixed_dictionaries({"k": st.sampled_from("abcdefgh"), "v": st.integers(-3, 9), "t": st.integers(0, 5)}),
    max_size=60,
)


def flow_of(kind: str) -> tuple[Any, Any]:
    flow = ts.Dataflow("binned")
    ev = flow.input("events")
    if kind == "map":
        s = ev.map(lambda r: {**r, "v2": r["v"] * 2})
    elif kind == "filter":
        s = ev.filter(lambda r: r["v"] >= 0)
    elif kind == "flat_map":
        s = ev.flat_map(lambda r: [r] * (r["v"] % 3))
    else:
        s = ev.inspect(lambda t, r: None)
    s.collect()

    @flow.stateful(s, key=ts.col("k"), state=int, bins=16)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        return n + 1

    return flow, count


@settings(max_examples=40, deadline=None)
@given(rows=rows_st, kind=st.sampled_from(["map", "filter", "flat_map", "inspect"]), lo=st.integers(0, 2), hi=st.sampled_from([None, 4]))
def test_same_groups_as_keying_every_record(rows: list, kind: str, lo: int, hi: Any) -> None:
    flow, count = flow_of(kind)
    plan = Plan.of(flow)
    node = plan.inputs["events"]
    (b,) = [n for n in plan.boundaries]
    assert chain_carries_bins(plan, node, [b])
    router = plan.router(b)
    bins = np.array([router.bin(r["k"]) for r in rows], dtype=np.int64)
    times = np.array([r["t"] for r in rows], dtype=np.int64)
    by_time: dict = {}
    held: list = []
    late = rows_by_time(list(rows), bins, times, 0, lo, hi, by_time, held)
    assert late == sum(r["t"] < lo for r in rows)
    assert held == [(r["t"], r) for r in rows if hi is not None and r["t"] >= hi]
    groups: dict = {b: {}}
    sinks: dict = {}
    changers: set = set()
    for t in sorted(by_time):
        push_binned(plan, node, t, *by_time[t], False, groups, changers, sinks)
    # the reference: every record keyed again, in arrival order
    routed: dict = {}
    ref_sinks: dict = {}
    for t in sorted({r["t"] for r in rows if r["t"] >= lo and (hi is None or r["t"] < hi)}):
        plan.push(node, t, [r for r in rows if r["t"] == t], routed, ref_sinks)
    want = {}
    for (_n, bin_, t), recs in routed.items():
        want.setdefault(t, {})[bin_] = recs
    assert groups[b] == want
    assert {k: sorted(v, key=repr) for k, v in sinks.items()} == {k: sorted(v, key=repr) for k, v in ref_sinks.items()}
    assert changers == ({b} if kind in ("map", "flat_map") and any(want.values()) else set())
    check_bins(plan, b, groups[b], lambda *a: (_ for _ in ()).throw(AssertionError(a)))


def test_a_record_in_another_bin_fails_the_check() -> None:
    flow, _ = flow_of("map")
    plan = Plan.of(flow)
    (b,) = plan.boundaries
    right = plan.router(b).bin("a")
    failed: list = []
    check_bins(plan, b, {0: {(right + 1) % 16: [{"k": "a"}]}}, lambda *a: failed.append(a))
    assert failed == [((right + 1) % 16, 0, {"k": "a"})]


def test_other_operators_take_the_keying_path() -> None:
    flow = ts.Dataflow("other")
    ev = flow.input("events")
    other = flow.input("more")
    both = ev.concat(other)

    @flow.stateful(both, key=ts.col("k"), state=int)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        return n + 1

    plan = Plan.of(flow)
    assert not chain_carries_bins(plan, plan.inputs["events"], list(plan.boundaries))
