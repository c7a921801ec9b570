"""One frontier-operator implementation on both engines (tstate.spark.frontier hosts
tstate.operators.generic's runtime): the same operators give the same records, by
time, as a plain reference, and misuse the same handles with the same errors."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.capability import Capability, InputCapability
from tstate.errors import OperatorError, ProgressError, SparkError
from tstate.plan import BinaryFrontier, Scope, UnaryFrontier
from tstate.spark.frontier import FusedFrontier

Logic = Callable[..., None]


# -- operators that keep nothing between activations, and what each gives (the reference) --

def passthrough(inp: Any, out: Any, ctx: Any) -> None:
    for cap, batch in inp:
        out.give_many(cap, batch)


def delay_by_value(inp: Any, out: Any, ctx: Any) -> None:
    """Each record ``x`` at ``t`` goes to ``t + x % 3`` (a retained, delayed capability)."""
    for cap, batch in inp:
        for x in batch:
            later = cap.delayed(cap.time + x % 3)
            out.give(later, x)
            later.drop()


def split_even_odd(inp: Any, out: Any, ctx: Any) -> None:
    """Evens now; odds one epoch later, through a capability retained then delayed."""
    for cap, batch in inp:
        out.give_many(cap, [x for x in batch if x % 2 == 0])
        kept = cap.retain()
        out.give_many(kept.delayed(cap.time + 1), [x for x in batch if x % 2])
        kept.drop()


def merge_two(a: Any, b: Any, out: Any, ctx: Any) -> None:
    """Both inputs, the second's records negated."""
    for cap, batch in a:
        out.give_many(cap, batch)
    for cap, batch in b:
        out.give_many(cap, [-x for x in batch])


UNARY: dict[str, tuple[Logic, Callable[[int, int], tuple[int, int]]]] = {
    "passthrough": (passthrough, lambda t, x: (t, x)),
    "delay_by_value": (delay_by_value, lambda t, x: (t + x % 3, x)),
    "split_even_odd": (split_even_odd, lambda t, x: (t + x % 2, x)),
}


def reference(batches: list[tuple[int, int, list[int]]], rule: Callable[[int, int, int], tuple[int, int]]) -> dict:
    """A plain model: every record mapped on its own, collected by time, sorted."""
    got: dict[int, list[int]] = {}
    for port, t, recs in batches:
        for x in recs:
            t2, y = rule(port, t, x)
            got.setdefault(t2, []).append(y)
    return {t: sorted(v) for t, v in got.items()}


def embedded(logic: Logic, arity: int, batches: list[tuple[int, int, list[int]]], workers: int = 2) -> dict:
    """``logic`` as a frontier operator of a dataflow on the embedded engine."""
    flow = ts.Dataflow("f")
    inputs = [flow.input(f"in{p}") for p in range(arity)]
    op = (flow.unary_frontier(inputs[0], name="op") if arity == 1 else
          flow.binary_frontier(inputs[0], inputs[1], name="op"))(logic)
    out = op.collect()
    ex = flow.start(workers=workers)
    for t in sorted({t for _p, t, _r in batches}):
        for p, inp in enumerate(inputs):
            inp.advance_to(t)
            recs = [x for port, t2, rs in batches if port == p and t2 == t for x in rs]
            if recs:
                inp.send(recs)
        ex.step_while(lambda: True)  # (each time's batches in activations of their own)
    for inp in inputs:
        inp.close()
    ex.run()
    return {t: sorted(v) for t, v in out.by_time().items()}


def fused(logic: Logic, arity: int, batches: list[tuple[int, int, list[int]]]) -> dict:
    """``logic`` as Spark hosts it: one activation per ``(port, time, batch)``."""
    node_type = UnaryFrontier if arity == 1 else BinaryFrontier
    op = FusedFrontier(node_type(name="op", scope=Scope("root"), logic=logic))
    got: dict[int, list[int]] = {}
    for port, t, recs in batches:
        for t2, ys in op.run(port, t, recs).items():
            got.setdefault(t2, []).extend(ys)
    return {t: sorted(v) for t, v in got.items()}


records_st = st.lists(st.integers(0, 20), min_size=1, max_size=6)
batch_st = st.tuples(st.integers(0, 5), records_st)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(UNARY)), batches=st.lists(batch_st, max_size=6))
def test_unary_operators_give_the_same_records_on_both_engines(name: str, batches: list) -> None:
    logic, rule = UNARY[name]
    bs = [(0, t, recs) for t, recs in batches]
    want = reference(bs, lambda _p, t, x: rule(t, x))
    assert embedded(logic, 1, bs) == want
    assert fused(logic, 1, bs) == want


@settings(max_examples=20, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5), records_st), max_size=6))
def test_a_binary_operator_gives_the_same_records_on_both_engines(batches: list) -> None:
    want = reference(batches, lambda p, t, x: (t, -x if p else x))
    assert embedded(merge_two, 2, batches) == want
    assert fused(merge_two, 2, batches) == want


# -- the same misuse, the same error ------------------------------------------------------

def gives_a_time(inp: Any, out: Any, ctx: Any) -> None:
    for cap, batch in inp:
        out.give_many(cap.time, batch)


def delays_backwards(inp: Any, out: Any, ctx: Any) -> None:
    for cap, batch in inp:
        out.give_many(cap.delayed(cap.time - 1), batch)


def downgrades_an_input_capability(inp: Any, out: Any, ctx: Any) -> None:
    for cap, batch in inp:
        cap.downgrade(cap.time + 1)


def uses_a_dropped_capability(inp: Any, out: Any, ctx: Any) -> None:
    for cap, batch in inp:
        later = cap.delayed(cap.time + 1)
        later.drop()
        out.give_many(later, batch)


def raises(inp: Any, out: Any, ctx: Any) -> None:
    for _cap, batch in inp:
        raise ValueError(f"bad batch {batch}")


def keeps_the_input_capability() -> Logic:
    """Gives at the input capability of the previous activation (expired by then)."""
    seen: list[Any] = []

    def logic(inp: Any, out: Any, ctx: Any) -> None:
        for cap, batch in inp:
            if seen:
                out.give_many(seen[0], batch)
            seen.append(cap)

    return logic


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: gives_a_time, ProgressError, r"operator 'op': give\(\) needs a capability"),
        (lambda: delays_backwards, ProgressError, r"operator 'op': cannot delay a capability for 1 to the earlier time 0"),
        (lambda: downgrades_an_input_capability, OperatorError, r"AttributeError"),
        (lambda: uses_a_dropped_capability, ProgressError, r"use of a dropped capability for time 2"),
        (lambda: raises, OperatorError, r"operator 'op'.* at time 1 raised ValueError: bad batch \[1\]"),
        (keeps_the_input_capability, ProgressError, r"input capability for time 1 was used after its activation"),
    ],
    ids=["give-a-time", "delay-backwards", "downgrade-input", "dropped", "user-error", "expired-input"],
)
def test_the_same_misuse_is_the_same_error_on_both_engines(make: Callable[[], Logic], error: type, match: str) -> None:
    batches = [(0, 1, [1]), (0, 2, [2])]
    with pytest.raises(error, match=match):
        embedded(make(), 1, batches, workers=1)
    with pytest.raises(error, match=match):
        fused(make(), 1, batches)


def test_the_handles_are_the_embedded_engines() -> None:
    """The function gets the embedded engine's capability types on Spark too."""
    seen: list[Any] = []

    def logic(inp: Any, out: Any, ctx: Any) -> None:
        for cap, batch in inp:
            seen.append((type(cap), type(cap.delayed(cap.time + 1)), ctx.worker, ctx.workers, list(ctx.notifications())))
            out.give_many(cap, batch)

    assert fused(logic, 1, [(0, 3, [1])]) == {3: [1]}
    assert seen == [(InputCapability, Capability, 0, 1, [])]


def _notifies(inp: Any, out: Any, ctx: Any) -> None:
    for cap, _batch in inp:
        ctx.notify_at(cap.time + 1)


def _keeps(inp: Any, out: Any, ctx: Any) -> None:
    for cap, _batch in inp:
        _kept.append(cap.retain())


def _reads_frontier(inp: Any, out: Any, ctx: Any) -> None:
    inp.frontier


_kept: list[Any] = []


@pytest.mark.parametrize(
    "logic, match",
    [
        (_notifies, r"operator 'op' asks for a notification at 2"),
        (_keeps, r"operator 'op' keeps a capability at 1 beyond its activation"),
        (_reads_frontier, r"operator 'op' reads its input frontier"),
    ],
)
def test_what_a_fused_operator_cannot_do_is_refused_naming_it(logic: Logic, match: str) -> None:
    with pytest.raises(SparkError, match=match):
        fused(logic, 1, [(0, 1, [1])])
    _kept.clear()
