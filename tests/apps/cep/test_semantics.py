"""Pinned behaviours that are easy to get wrong: the documented deviations from Flink
and a few Flink behaviours kept on purpose (see apps/cep/README.md)."""

from __future__ import annotations

from apps.cep import Matcher, Pattern
from tests.apps.cep.helpers import drive, show


def is_(k: str):
    return lambda e: e[0] == k


def run(p: Pattern, text: str, end: int = 1000):
    events = text.split()
    return drive(p, [(e, i) for i, e in enumerate(events)], end)


def test_pending_after_a_loop_waits_from_the_last_event() -> None:
    # deviation: Flink needs an event after a1 to move [a1] to the pending state
    p = (
        Pattern.begin("a")
        .where(is_("a"))
        .one_or_more()
        .not_followed_by("b")
        .where(is_("b"))
        .within(5)
    )
    r = run(p, "a1")
    assert [show(m) for _, m in r.matches] == ["a1"]
    # the partial match still waiting for more a's times out as well
    assert [show(t.partial) for _, t in r.timeouts] == ["a1"]
    assert [show(m) for _, m in run(p, "a1 b").matches] == []


def test_negation_after_times_applies_between_its_events() -> None:
    # deviation: in Flink the "b" between a2 and a3 would be tolerated
    p = (
        Pattern.begin("a")
        .where(is_("a"))
        .times(1, 3)
        .not_followed_by("n")
        .where(is_("b"))
        .followed_by("c")
        .where(is_("c"))
    )
    got = sorted(show(m) for _, m in run(p, "a1 a2 b a3 c").matches)
    assert got == ["a3 c"]


def test_optional_tail_emits_at_once() -> None:
    p = Pattern.begin("a").where(is_("a")).followed_by("b").where(is_("b")).optional()
    r = run(p, "a1 x b1")
    assert [(step, show(m)) for step, m in r.matches] == [
        (("event", 0), "a1"),
        (("event", 2), "a1 b1"),
    ]


def test_greedy_stage_cannot_end_a_match_before_optional_stages() -> None:
    p = (
        Pattern.begin("a")
        .where(is_("a"))
        .times(1, 2)
        .greedy()
        .next("b")
        .where(is_("b"))
        .optional()
    )
    assert [show(m) for _, m in run(p, "a1 a2 x").matches] == []
    assert [show(m) for _, m in run(p, "a1 a2 b").matches] == ["a1 a2 b", "a2 b"]


def test_a_not_event_that_completes_a_match_keeps_it() -> None:
    p = (
        Pattern.begin("a")
        .where(is_("a"))
        .not_followed_by("n")
        .where(lambda e: e.startswith("bc"))
        .followed_by("c")
        .where(lambda e: "c" in e)
    )
    # "bc" is both forbidden and the end of the match: the match is kept
    assert [show(m) for _, m in run(p, "a bc").matches] == ["a bc"]
    # but it kills what would continue past it
    p2 = p.followed_by("d").where(is_("d"))
    assert [show(m) for _, m in run(p2, "a bc d").matches] == []


def test_within_is_exclusive() -> None:
    p = Pattern.begin("a").where(is_("a")).followed_by("b").where(is_("b")).within(3)
    m = Matcher(p)
    st = m.new_state()
    m.process(st, "a", 0)
    assert m.process(st, "b", 3) == []  # 3 - 0 >= 3: expired first
    m.process(st, "a", 10)
    assert [show(x) for x in m.process(st, "b", 12)] == ["a b"]
    assert [show(t.partial) for t in m.advance_time(st, 20)[1]] == ["a"]
