"""Lowering: boundaries, fused chains, what is refused."""

from __future__ import annotations

from typing import Any

import pytest

import tstate as ts
from tstate.errors import KeyFunctionError, OperatorError, SparkError
from tstate.spark.plan import Plan


def two_stage() -> tuple[ts.Dataflow, Any, Any]:
    flow = ts.Dataflow("p")
    a = flow.input("a")
    b = flow.input("b")
    both = a.map(lambda x: x * 2).concat(b.filter(lambda x: x > 0))

    @flow.stateful(both.flat_map(lambda x: [x, x + 1]), key=lambda x: x % 3, state=int, bins=4)
    def s1(n: int, x: int, ctx: ts.Context) -> int:
        ctx.emit(x)
        return n + 1

    s1.inspect(lambda t, x: None).collect()

    @flow.stateful(s1.exchange(lambda x: x, bins=8).map(lambda x: -x), key=lambda x: x, state=int)
    def s2(n: int, x: int, ctx: ts.Context) -> int:
        return n + x

    return flow, s1, s2


def test_boundaries_feeders_and_sinks() -> None:
    flow, s1, s2 = two_stage()
    plan = Plan.of(flow)
    names = {n: plan.nodes[n].name for n in plan.nodes}
    assert [names[b] for b in plan.boundaries] == ["s1", "exchange#9", "s2"]
    assert plan.feeders[s1.node] == ["a", "b"]
    assert len(plan.sink_reach[s1.node]) == 1 and plan.sink_reach["a"] == []


def test_fused_push_applies_the_chain_and_groups_by_bin() -> None:
    flow, s1, _ = two_stage()
    plan = Plan.of(flow)
    routed, sinks = plan.push_from(plan.inputs["b"], 5, [-1, 2, 4])
    got = sorted((t, r) for (node, _b, t), recs in routed.items() for r in recs)
    assert got == [(5, 2), (5, 3), (5, 4), (5, 5)] and not sinks
    for (node, b, _t), recs in routed.items():
        assert node == s1.node and all(plan.router(node).bin(r % 3) == b for r in recs)


def test_refused_operators_are_named() -> None:
    flow = ts.Dataflow("it")
    inp = flow.input("x")

    @flow.iterate(inp)
    def loop(scope: Any, x: Any) -> Any:
        fb = scope.feedback(max_iterations=2)
        body = x.concat(fb.stream).map(lambda v: v)
        fb.connect(body)
        return body

    with pytest.raises(SparkError, match=r"iterate scope 'loop' has no stateful operator or exchange"):
        Plan.of(flow)


def test_user_errors_name_operator_time_and_record() -> None:
    flow = ts.Dataflow("e")
    inp = flow.input("x")
    inp.map(lambda x: 1 // x, name="inv").collect()
    plan = Plan.of(flow)
    with pytest.raises(OperatorError, match=r"operator 'inv' \(map\) at time 3 raised ZeroDivisionError.*record 0"):
        plan.push_from(plan.inputs["x"], 3, [1, 0])
    flow2 = ts.Dataflow("k")
    inp2 = flow2.input("x")
    inp2.exchange(lambda r: r["missing"], name="ex").collect()
    plan2 = Plan.of(flow2)
    with pytest.raises(KeyFunctionError, match=r"operator 'ex': the key function raised KeyError"):
        plan2.push_from(plan2.inputs["x"], 0, [{"k": 1}])
