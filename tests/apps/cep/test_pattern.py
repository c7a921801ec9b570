"""The pattern API: immutable chaining, conditions, arity detection; Match/TimedOut."""

from __future__ import annotations

import attrs
import pytest

from apps.cep import (
    AfterMatchSkip,
    Contiguity,
    Match,
    Matcher,
    Pattern,
    PatternError,
    SkipKind,
    StageKind,
)


def test_each_call_returns_a_new_value() -> None:
    p = Pattern.begin("a")
    q = p.where(lambda e: e > 0)
    r = q.followed_by("b").one_or_more().consecutive()
    assert p.stages[0].condition is None and q.stages[0].condition is not None
    assert len(q.stages) == 1 and len(r.stages) == 2
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.window = 3  # type: ignore[misc]
    b = r.stages[1]
    assert (b.min_times, b.max_times, b.looping, b.inner) == (
        1,
        None,
        True,
        Contiguity.STRICT,
    )


def test_stage_kinds_and_contiguity() -> None:
    p = (
        Pattern.begin("a")
        .next("b")
        .followed_by("c")
        .followed_by_any("d")
        .not_next("e")
        .followed_by("f")
        .not_followed_by("g")
        .within(3)
    )
    assert p.names == tuple("abcdefg")
    assert [s.contiguity for s in p.stages[1:4]] == [
        Contiguity.STRICT,
        Contiguity.RELAXED,
        Contiguity.ANY,
    ]
    assert (
        p.stages[4].kind is StageKind.NOT_NEXT
        and p.stages[6].kind is StageKind.NOT_FOLLOWED_BY
    )
    assert "within 3" in repr(p)
    Matcher(p)


def test_where_and_or_where_compose_in_order() -> None:
    def cond(p: Pattern):
        return p.stages[-1].condition

    gt0, even, big = (lambda e: e > 0), (lambda e: e % 2 == 0), (lambda e: e > 100)
    c = cond(
        Pattern.begin("a").where(gt0).where(even).or_where(big)
    )  # (gt0 and even) or big
    assert [c(x) for x in (2, 3, 101, -2)] == [True, False, True, False]
    c = cond(
        Pattern.begin("a").where(gt0).or_where(big).where(even)
    )  # (gt0 or big) and even
    assert [c(x) for x in (2, 3, 101, -2)] == [True, False, False, False]


def test_arity_is_detected_once() -> None:
    seen = []

    def simple(e):
        seen.append(("simple", e))
        return True

    def iterative(e, ctx):
        seen.append(("iterative", e, tuple(ctx.events("a"))))
        return True

    def defaulted(e, threshold=0):  # one required argument: a simple condition
        return e > threshold

    p = (
        Pattern.begin("a")
        .where(simple)
        .followed_by("b")
        .where(iterative)
        .followed_by("c")
        .where(defaulted)
    )
    assert [s.condition.takes_ctx for s in p.stages] == [False, True, False]
    m = Matcher(p)
    st = m.new_state()
    for t, e in enumerate([1, 2, 3]):
        m.process(st, e, t)
    assert ("iterative", 2, (1,)) in seen


def test_context_accessors() -> None:
    seen = []

    def look(e, ctx):
        seen.append(
            (
                e,
                ctx.events("a"),
                ctx.last("a"),
                ctx.last("b"),
                ctx.previous(),
                ctx.timestamp,
            )
        )
        return True

    p = Pattern.begin("a").times(2).followed_by("b").where(look)
    m = Matcher(p)
    st = m.new_state()
    for t, e in enumerate(["x", "y", "z"]):
        m.process(st, e, 10 * t)
    assert ("z", ["x", "y"], "y", None, "y", 20) in seen


def test_skip_strategies() -> None:
    assert AfterMatchSkip.no_skip().kind is SkipKind.NO_SKIP
    assert AfterMatchSkip.skip_to_last("x") == AfterMatchSkip(
        SkipKind.SKIP_TO_LAST, "x"
    )
    assert Pattern.begin("a").skip == AfterMatchSkip.no_skip()
    with pytest.raises(PatternError):
        Pattern.begin("a", skip="past")  # type: ignore[arg-type]
    with pytest.raises(PatternError):
        AfterMatchSkip.skip_to_first("")


def test_match_is_an_immutable_mapping() -> None:
    m = Match({"a": (1, 2), "b": (3,)}, 0, 5)
    assert dict(m) == {"a": (1, 2), "b": (3,)} and list(m) == ["a", "b"] and len(m) == 2
    assert m.events() == [1, 2, 3] and m.to_dict() == {"a": [1, 2], "b": [3]}
    assert (m.first_time, m.last_time) == (0, 5)
    assert m == Match({"a": (1, 2), "b": (3,)}, 0, 5) and m == {"a": (1, 2), "b": (3,)}
    with pytest.raises(AttributeError):
        m.first_time = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        m["a"] = (0,)  # type: ignore[index]


def test_matcher_helpers() -> None:
    m = Matcher(
        Pattern.begin("a").where(lambda e: e == "a").followed_by("b").within(10)
    )
    st = m.new_state()
    assert m.next_timeout(st) is None and st.is_empty()
    m.process(st, "a", 3)
    assert m.next_timeout(st) == 13 and not st.is_empty()
    assert st.size()["runs"] == 1
    assert "take" in m.nfa.describe()


def test_match_answers_an_empty_tuple_for_a_stage_without_events() -> None:
    # a b? c: the optional stage took nothing -> m["b"] == (), as Flink's
    # getEventsForPattern gives an empty list; a name the pattern lacks is still an error
    p = (
        Pattern.begin("a").where(lambda e: e == "a")
        .next("b").where(lambda e: e == "b").optional()
        .next("c").where(lambda e: e == "c")
    )  # fmt: skip
    m = Matcher(p)
    st = m.new_state()
    assert m.process(st, "a", 0) == []
    (match,) = m.process(st, "c", 1)
    assert match["b"] == () and match.get("b") == ()
    assert match["a"] == ("a",) and list(match) == ["a", "c"] and "b" not in match
    assert match.stages == ("a", "b", "c")
    with pytest.raises(KeyError, match="no stage 'x'.*a, b, c"):
        match["x"]
    # a match built without the pattern's stages behaves as before
    with pytest.raises(KeyError):
        Match({"a": (1,)}, 0, 0)["b"]


def test_skip_to_first_or_last_throw_exception_on_miss() -> None:
    from apps.cep import AfterMatchSkipError

    def pattern(skip: AfterMatchSkip) -> Pattern:
        # a b? c (strict): "b" may be empty
        return (
            Pattern.begin("a", skip=skip).where(lambda e: e == "a")
            .next("b").where(lambda e: e == "b").optional()
            .next("c").where(lambda e: e == "c")
        )  # fmt: skip

    def run(skip: AfterMatchSkip, events: str) -> list:
        m = Matcher(pattern(skip))
        st = m.new_state()
        return [x.to_dict() for t, e in enumerate(events.split()) for x in m.process(st, e, t)]

    # without throw_exception_on_miss an empty "b" prunes nothing (Flink's default) ...
    assert run(AfterMatchSkip.skip_to_last("b"), "a c") == [{"a": ["a"], "c": ["c"]}]
    assert run(AfterMatchSkip.skip_to_last("b").throw_exception_on_miss(), "a b c") == [
        {"a": ["a"], "b": ["b"], "c": ["c"]}
    ]
    # ... with it, a match without "b" is an error, as is skipping to the match's first event
    with pytest.raises(AfterMatchSkipError, match="has no event for 'b'"):
        run(AfterMatchSkip.skip_to_last("b").throw_exception_on_miss(), "a c")
    with pytest.raises(AfterMatchSkipError, match="first event of the match"):
        run(AfterMatchSkip.skip_to_first("a").throw_exception_on_miss(), "a c")
    with pytest.raises(PatternError, match="only to skip_to_first / skip_to_last"):
        AfterMatchSkip.skip_to_next().throw_exception_on_miss()
