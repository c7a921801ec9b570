"""A stateful function over a state that cannot change in place must return the new
state: returning None raises :class:`~tstate.errors.StateReturnError` naming the
operator, key and time (a function with no ``return <value>`` at all is refused when the
dataflow is built); mutable states may still be mutated in place and None returned."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Optional

import pytest
from attrs import define, field, frozen
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.errors import OperatorError, StateReturnError
from tstate.state.declaration import returns_required
from tstate.types.schema import analyse


class Colour(enum.Enum):
    RED = 1


@frozen
class Point:
    x: int
    y: int = 0


@frozen
class Bag:
    items: list[int] = field(factory=list)


@define
class Counter:
    n: int = 0


@pytest.mark.parametrize(
    "tp, want",
    [
        (int, "always"), (float, "always"), (str, "always"), (bytes, "always"), (bool, "always"),
        (dt.datetime, "always"), (dt.date, "always"), (Colour, "always"), (Optional[int], "always"),
        (tuple[int, ...], "always"), (tuple[int, str], "always"), (frozenset[int], "always"), (Point, "always"),
        (tuple[Point, ...], "always"),
        (Counter, "never"), (list[int], "never"), (dict[str, int], "never"), (set[int], "never"),
        (tuple[list[int], ...], "never"), (Bag, "never"), (ts.types.Map[str, int], "never"),
        (Optional[list[int]], "when None"), (Optional[Counter], "when None"),
    ],
)  # fmt: skip
def test_which_states_must_be_returned(tp, want) -> None:
    assert returns_required(analyse(tp)) == want


def run(fn, state, records, workers=1, checkpoint=None, **kw):
    flow = ts.Dataflow("returns")
    inp = flow.input("in")
    op = flow.stateful(inp, key=lambda r: r[0], state=state, name="count", **kw)(fn)
    for t, batch in enumerate(records):
        inp.advance_to(t)
        inp.send(batch)
    inp.close()
    flow.run(workers=workers, checkpoint=checkpoint)
    return flow.state(op, format="dict")


def test_a_function_without_return_is_refused_when_the_dataflow_is_built() -> None:
    """The issue's case: ``state=int`` and a forgotten ``return`` silently kept 0."""
    flow = ts.Dataflow("forgot")
    inp = flow.input("in")
    with pytest.raises(StateReturnError) as e:

        @flow.stateful(inp, key=lambda r: r[0], state=int)
        def add(n: int, r: tuple, ctx: ts.Context) -> None:
            n + r[1]  # noqa: B018 - the forgotten return

    assert str(e.value) == (
        "stateful operator 'add': test_a_function_without_return_is_refused_when_the_dataflow_is_built.<locals>.add "
        "never returns a value, but its state type int cannot change in place: return the new state "
        "(return the old one to keep it)"
    )
    assert isinstance(e.value, OperatorError)


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_returning_none_for_an_immutable_state_names_operator_and_key(tmp_path, workers, checkpoint) -> None:
    def add(n: int, r: tuple, ctx: ts.Context) -> Optional[int]:
        if r[1] >= 0:
            return n + r[1]
        return None  # the bug: meant to keep n

    ck = ts.Checkpoints(str(tmp_path / "ck"), every_epochs=1) if checkpoint else None
    assert run(add, int, [[(1, 2), (2, 3)], [(1, 4)]], workers, ck) == {1: 6, 2: 3}
    with pytest.raises(StateReturnError) as e:
        run(add, int, [[(1, 2), (2, 3)], [(2, -1)]], workers, ck and ts.Checkpoints(str(tmp_path / "ck2")))
    msg = str(e.value)
    assert msg.startswith("operator 'count' on worker ") and " at time 1: " in msg
    assert "add returned None for key 2 (record (2, -1)), but its state type int cannot change in place: return the new state" in msg


def test_a_lambda_returning_none_is_caught_when_it_runs() -> None:
    with pytest.raises(StateReturnError, match=r"operator 'count' .* returned None for key 'a'"):
        run(lambda n, r, ctx: ctx.emit(r), int, [[("a", 1)]])


def test_optional_mutable_state_must_be_returned_while_it_is_none() -> None:
    def collect(items: Optional[list[int]], r: tuple, ctx: ts.Context) -> Optional[list[int]]:
        if items is None:
            return [r[1]] if r[1] else None  # None while the state is None: an error
        items.append(r[1])  # in place, returns None: fine
        return None

    assert run(collect, Optional[list[int]], [[("a", 1), ("a", 2)], [("a", 3)]]) == {"a": [1, 2, 3]}
    with pytest.raises(StateReturnError, match=r"returned None for key 'b' .*its state is None, which cannot"):
        run(collect, Optional[list[int]], [[("b", 0)]])


@given(st.lists(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5)), max_size=6), max_size=5))
def test_mutable_states_are_mutated_in_place_as_before(batches) -> None:
    """attrs classes, lists and dicts: mutate and return None (the documented
    contract), against a dict-of-sums reference."""
    want: dict = {}
    for batch in batches:
        for k, v in batch:
            want[k] = want.get(k, 0) + v

    def bump(c: Counter, r: tuple, ctx: ts.Context) -> None:
        c.n += r[1]

    def push(xs: list[int], r: tuple, ctx: ts.Context) -> None:
        xs.append(r[1])

    assert {k: c.n for k, c in run(bump, Counter, batches).items()} == want
    assert {k: sum(xs) for k, xs in run(push, list[int], batches).items()} == want


def test_clear_needs_no_return() -> None:
    def reset(n: int, r: tuple, ctx: ts.Context) -> Optional[int]:
        if r[1] < 0:
            ctx.clear()
            return None
        return n + r[1]

    assert run(reset, int, [[("a", 1), ("b", 2)], [("a", -1)]]) == {"b": 2}


def test_a_function_that_only_clears_is_accepted() -> None:
    """Dropping the key (``ctx.clear()``) leaves nothing to return: such a function is
    not refused when the dataflow is built, although it has no ``return <value>``."""

    def drop(n: int, r: tuple, ctx: ts.Context) -> None:
        ctx.clear()

    assert run(drop, int, [[("a", 1), ("b", 2)], [("a", -1)]]) == {}


def test_timer_handlers_may_still_return_none() -> None:
    """``on_notify`` handlers often only report: returning None keeps the state."""
    flow = ts.Dataflow("timers")
    inp = flow.input("in")

    @flow.stateful(inp, key=lambda r: r[0], state=int)
    def total(n: int, r: tuple, ctx: ts.Context) -> int:
        ctx.notify_at(ctx.time)
        return n + r[1]

    @total.on_notify
    def report(n: int, t: int, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, n))

    out = total.collect()
    inp.send([("a", 1), ("a", 2)])
    inp.close()
    flow.run()
    assert out.records() == [("a", 3)] and flow.state(total, format="dict") == {"a": 3}
