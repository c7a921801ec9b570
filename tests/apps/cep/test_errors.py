"""Bad input: malformed patterns (PatternError, naming the stage) and conditions that
read fields the events do not have (EventFieldError, naming the stage and the field)."""

from __future__ import annotations

import pytest

from apps.cep import AfterMatchSkip, EventFieldError, Matcher, Pattern, PatternError
from apps.cep.flights import Flight, delay_cascade
from tests.apps.cep.helpers import check_state
from tstate.errors import TstateError

A = Pattern.begin("a").where(lambda e: True)


def compile_(p: Pattern) -> Matcher:
    return Matcher(p)


@pytest.mark.parametrize(
    "build, stage",
    [
        (
            lambda: A.followed_by("b").not_followed_by("c").where(lambda e: True),
            "c",
        ),  # no within
        (lambda: A.not_followed_by("n").optional(), "n"),
        (lambda: A.not_next("n").optional(), "n"),
        (lambda: A.within(0), "a"),
        (lambda: A.within(-5), "a"),
        (lambda: A.within("10"), "a"),
        (lambda: A.within(True), "a"),
        (lambda: A.times(0), "a"),
        (lambda: A.times(-1), "a"),
        (lambda: A.times(3, 2), "a"),
        (lambda: A.times(0, 0), "a"),
        (lambda: A.times(1.5), "a"),
        (lambda: A.times_or_more(0), "a"),
        (lambda: A.followed_by("a"), "a"),  # duplicate name
        (lambda: A.followed_by("b").next("c").followed_by("b"), "b"),
        (lambda: A.until(lambda e: True), "a"),  # not looping
        (lambda: A.times(2).until(lambda e: True), "a"),
        (lambda: A.one_or_more().until(lambda e: True).until(lambda e: True), "a"),
        (
            lambda: Pattern.begin(
                "a", skip=AfterMatchSkip.skip_to_first("zz")
            ).followed_by("b"),
            "zz",
        ),
        (
            lambda: (
                Pattern.begin("a", skip=AfterMatchSkip.skip_to_last("n"))
                .not_next("n")
                .followed_by("b")
            ),
            "n",
        ),
        (
            lambda: A.followed_by("b").optional().not_followed_by("n"),
            "n",
        ),  # NOT after optional
        (lambda: A.not_next("n").not_followed_by("m"), "m"),
        (lambda: A.not_followed_by("n").not_next("m"), "m"),
        (
            lambda: A.not_next("n").followed_by("b").optional(),
            "n",
        ),  # only optional after not_next
        (lambda: A.times(2).times(3), "a"),
        (lambda: A.one_or_more().times(2), "a"),
        (lambda: A.greedy(), "a"),  # singleton
        (lambda: A.one_or_more().allow_combinations().greedy(), "a"),
        (lambda: A.one_or_more().greedy().allow_combinations(), "a"),
        (lambda: A.consecutive(), "a"),
        (lambda: A.one_or_more().consecutive().allow_combinations(), "a"),
        (lambda: A.not_next("n").times(2), "n"),
        (lambda: A.not_followed_by("n").one_or_more(), "n"),
        (lambda: A.not_next("n").greedy(), "n"),
        (lambda: A.not_followed_by("n").until(lambda e: True), "n"),
        (lambda: A.followed_by("b").where(lambda: True), "b"),  # arity 0
        (lambda: A.followed_by("b").where(lambda e, c, x: True), "b"),  # arity 3
        (lambda: A.followed_by("b").where(42), "b"),
        (lambda: Pattern.begin(""), ""),
        (lambda: Pattern.begin("$x"), "$x"),
        (lambda: A.followed_by(3), "3"),
    ],
)
def test_pattern_errors(build, stage: str) -> None:
    with pytest.raises(PatternError) as info:
        compile_(build())
    assert isinstance(info.value, TstateError)
    assert repr(stage) in str(info.value) or stage in str(info.value), str(info.value)


def test_valid_patterns_compile() -> None:
    compile_(A.followed_by("b").not_followed_by("c").where(lambda e: True).within(5))
    compile_(A.not_next("n").followed_by("b").optional().followed_by("c"))
    compile_(A.not_followed_by("n").not_followed_by("m").followed_by("b"))
    compile_(A.times(0, 3))  # times(0, m) == times(1, m).optional()
    compile_(Pattern.begin("a", skip=AfterMatchSkip.skip_to_first("a")))
    compile_(A.within(5).within(3))
    assert A.within(5).within(3).window == 3  # the smallest window wins


def test_event_field_error_attribute() -> None:
    m = Matcher(
        Pattern.begin("first")
        .where(lambda e: e.delay > 30)
        .followed_by("second")
        .where(lambda e: e.dely > 0)
    )
    st = m.new_state()
    f = Flight(None, 40, 1, "A", "B")
    assert m.process(st, f, 0) == []
    with pytest.raises(EventFieldError) as info:
        m.process(st, f, 1)
    err = info.value
    assert err.stage == "second" and err.field == "dely"
    assert "'second'" in str(err) and "'dely'" in str(err)
    assert isinstance(err.__cause__, AttributeError)
    assert isinstance(err, TstateError)
    # the event was not applied: the state is consistent and usable
    check_state(st)
    assert len(st.runs) == 1 and st.next_event == 1


def test_event_field_error_key_in_negation_and_until() -> None:
    p = (
        Pattern.begin("a")
        .where(lambda e: e["kind"] == "a")
        .one_or_more()
        .until(lambda e: e["stop"])
        .not_followed_by("n")
        .where(lambda e: e["bad"])
        .followed_by("b")
        .where(lambda e: e["kind"] == "b")
    )
    m = Matcher(p)
    st = m.new_state()
    with pytest.raises(EventFieldError) as info:
        m.process(st, {"kind": "a"}, 0)
    assert info.value.stage == "a" and info.value.field == "stop"
    m.process(st, {"kind": "a", "stop": False}, 0)
    with pytest.raises(EventFieldError) as info:
        m.process(st, {"kind": "x", "stop": False}, 1)
    assert info.value.stage == "n" and info.value.field == "bad"


def test_event_field_error_in_iterative_condition() -> None:
    m = Matcher(delay_cascade())
    st = m.new_state()
    m.process(st, Flight(None, 40, 1, "A", "B"), 0)
    with pytest.raises(EventFieldError) as info:
        m.process(st, {"delay": 50}, 1)  # a dict event: no .delay attribute
    assert info.value.stage in ("first", "rise") and info.value.field == "delay"


def test_other_errors_propagate_unchanged() -> None:
    m = Matcher(Pattern.begin("a").where(lambda e: 1 / e > 0))
    with pytest.raises(ZeroDivisionError):
        m.process(m.new_state(), 0, 0)


def test_condition_helper_functions() -> None:
    def reads(e):
        return e.missing

    m = Matcher(Pattern.begin("a").where(lambda e: reads(e)))
    with pytest.raises(EventFieldError) as info:
        m.process(m.new_state(), object(), 0)
    assert info.value.field == "missing" and info.value.stage == "a"


def test_ctx_unknown_stage() -> None:
    m = Matcher(Pattern.begin("a").where(lambda e, ctx: ctx.events("nope") == []))
    with pytest.raises(PatternError, match="nope"):
        m.process(m.new_state(), 1, 0)


def test_event_field_error_names_the_right_stage_with_combined_conditions() -> None:
    p = (
        Pattern.begin("first")
        .where(lambda e: e["kind"] == "a")
        .where(lambda e: e["v"] >= 0)
        .followed_by("second")
        .where(lambda e: e["kind"] == "b")
        .or_where(lambda e: e["w"] > 0)
    )
    m = Matcher(p)
    st = m.new_state()
    m.process(st, {"kind": "a", "v": 1}, 0)
    with pytest.raises(EventFieldError) as info:
        m.process(st, {"kind": "c", "v": 1}, 1)
    assert (info.value.stage, info.value.field) == ("second", "w")
