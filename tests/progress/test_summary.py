"""Path summaries against a brute-force model of paths as sequences of primitive steps.

A path is a list of steps, each valid at the depth it is applied at:

- ``("id",)``        an edge / pass-through operator: the time is unchanged;
- ``("adv", k)``     an operator delaying time (or a feedback edge): innermost + k;
- ``("enter",)``     entering an iterate scope: append a coordinate 0;
- ``("leave",)``     leaving a scope (depth >= 1): drop the innermost coordinate.

The model applies the steps to the coordinate vector with unbounded integers; the
path's result overflows (``None``) iff a coordinate of the *final* time exceeds
``TIME_MAX`` (the normal form of a summary drops the coordinates of scopes it leaves,
so an overflow there does not count, as in Timely).
"""

from __future__ import annotations

import doctest
import functools
from typing import Any, Optional

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import tstate.progress.summary as summary_mod
from tstate.progress.summary import PathSummary
from tstate.progress.timestamp import TIME_MAX, Product, from_vector, less_equal, less_than, minimum, to_vector

from tests.progress.strategies import MAX_DEPTH, any_coords, depths, small_coords, times, vec_to_time

Step = tuple[Any, ...]

small_steps = st.integers(min_value=0, max_value=3)
any_steps = st.one_of(
    small_steps,
    st.integers(min_value=0, max_value=TIME_MAX),
    st.integers(min_value=TIME_MAX - 2, max_value=TIME_MAX),
)


# -- the model ------------------------------------------------------------------------


def model_apply(steps: list[Step], v: tuple[int, ...]) -> list[int]:
    out = list(v)
    for step in steps:
        if step[0] == "adv":
            out[-1] += step[1]
        elif step[0] == "enter":
            out.append(0)
        elif step[0] == "leave":
            assert len(out) >= 2
            out.pop()
    return out


def model_results_in(steps: list[Step], t: Any) -> Optional[Any]:
    out = model_apply(steps, to_vector(t))
    if any(x > TIME_MAX for x in out):
        return None
    return vec_to_time(out)


def step_summary(step: Step, d: int, use_feedback: bool = False) -> PathSummary:
    """The constructor call for one primitive step at depth ``d``."""
    if step[0] == "id":
        return PathSummary.identity(d)
    if step[0] == "adv":
        if use_feedback and d >= 1:
            return PathSummary.feedback(d, step[1])
        return PathSummary.advance(d, step[1])
    if step[0] == "enter":
        return PathSummary.enter(d)
    assert step[0] == "leave"
    return PathSummary.leave(d)


@st.composite
def paths(draw, ks=any_steps, src: Optional[int] = None, max_len: int = 8):
    """``(src, steps, summaries, dst)``: a valid random path from depth ``src``."""
    if src is None:
        src = draw(depths)
    d = src
    steps: list[Step] = []
    summaries: list[PathSummary] = []
    for _ in range(draw(st.integers(0, max_len))):
        options = ["id", "adv"] + (["enter"] if d < MAX_DEPTH else []) + (["leave"] if d > 0 else [])
        kind = draw(st.sampled_from(options))
        step: Step = ("adv", draw(ks)) if kind == "adv" else (kind,)
        steps.append(step)
        summaries.append(step_summary(step, d, draw(st.booleans())))
        d += 1 if kind == "enter" else -1 if kind == "leave" else 0
    return src, steps, summaries, d


def compose(src: int, summaries: list[PathSummary]) -> PathSummary:
    return functools.reduce(lambda acc, s: acc.followed_by(s), summaries, PathSummary.identity(src))


def compose_right(src: int, summaries: list[PathSummary]) -> PathSummary:
    if not summaries:
        return PathSummary.identity(src)
    return functools.reduce(lambda acc, s: s.followed_by(acc), reversed(summaries[:-1]), summaries[-1])


@st.composite
def path_and_times(draw, ks=any_steps, coords=any_coords):
    src, steps, summaries, dst = draw(paths(ks))
    ts = draw(st.lists(times(src, coords), min_size=1, max_size=5))
    return src, steps, summaries, dst, ts


# -- composition vs the model ----------------------------------------------------------------


@given(path_and_times())
def test_followed_by_matches_step_by_step_model(case):
    src, steps, summaries, dst, ts = case
    s = compose(src, summaries)
    assert (s.src, s.dst) == (src, dst)
    assert s.keep + len(s.tail) == dst + 1
    assert 1 <= s.keep <= min(src, dst) + 1
    for t in ts:
        assert s.results_in(t) == model_results_in(steps, t)


@given(path_and_times(ks=small_steps, coords=small_coords))
def test_followed_by_small_values(case):
    """The same on small values (no overflow at all), also applying step by step."""
    src, steps, summaries, dst, ts = case
    s = compose(src, summaries)
    for t in ts:
        expected = model_results_in(steps, t)
        assert expected is not None
        assert s.results_in(t) == expected
        r = t
        for p in summaries:
            r = p.results_in(r)
        assert r == expected


@given(paths())
def test_followed_by_is_associative(case):
    src, _, summaries, _ = case
    assert compose(src, summaries) == compose_right(src, summaries)


@given(paths(max_len=3), paths(max_len=3), paths(max_len=3), st.data())
def test_followed_by_associative_on_three_paths(p1, p2, p3, data):
    # re-root p2 and p3 so that they start where the previous one ends
    src1, _, s1, dst1 = p1
    _, _, s2, dst2 = data.draw(paths(src=dst1, max_len=3))
    _, _, s3, _ = data.draw(paths(src=dst2, max_len=3))
    a, b, c = compose(src1, s1), compose(dst1, s2), compose(dst2, s3)
    assert a.followed_by(b).followed_by(c) == a.followed_by(b.followed_by(c))


@given(depths, depths)
def test_followed_by_rejects_mismatched_depths(d1, d2):
    assume(d1 != d2)
    with pytest.raises(ValueError):
        PathSummary.identity(d1).followed_by(PathSummary.identity(d2))


@given(paths())
def test_identity_is_neutral(case):
    src, _, summaries, dst = case
    s = compose(src, summaries)
    assert PathSummary.identity(src).followed_by(s) == s
    assert s.followed_by(PathSummary.identity(dst)) == s


# -- constructors -------------------------------------------------------------------------


@given(depths.flatmap(lambda d: st.tuples(st.just(d), times(d, any_coords))))
def test_identity(dt):
    d, t = dt
    s = PathSummary.identity(d)
    assert s.is_identity()
    assert s.results_in(t) == t
    assert not s.strictly_advances()
    assert repr(s) == f"Identity(depth={d})"


@given(st.integers(1, MAX_DEPTH).flatmap(lambda d: st.tuples(st.just(d), times(d), small_steps)))
def test_feedback_and_advance(case):
    d, t, k = case
    v = list(to_vector(t))
    v[-1] += k
    assert PathSummary.feedback(d, k).results_in(t) == from_vector(v)
    assert PathSummary.advance(d, k).results_in(t) == from_vector(v)
    assert PathSummary.feedback(d, k) == PathSummary.advance(d, k)
    assert PathSummary.feedback(d).results_in(t) == PathSummary.advance(d, 1).results_in(t)
    assert PathSummary.feedback(d, k).strictly_advances() == (k > 0)


@given(depths.flatmap(lambda d: st.tuples(st.just(d), times(d, any_coords))))
def test_enter_and_leave(dt):
    d, t = dt
    assert PathSummary.enter(d).results_in(t) == Product(t, 0)
    assert PathSummary.leave(d + 1).results_in(Product(t, 7)) == t
    assert PathSummary.enter(d).followed_by(PathSummary.leave(d + 1)) == PathSummary.identity(d)


def test_examples():
    assert PathSummary.feedback(1).results_in(Product(3, 4)) == Product(3, 5)
    loop = PathSummary.enter(0).followed_by(PathSummary.feedback(1)).followed_by(PathSummary.leave(1))
    assert loop.results_in(7) == 7
    assert PathSummary.advance(0, 3).results_in(4) == 7
    two = PathSummary.enter(0).followed_by(PathSummary.enter(1)).followed_by(PathSummary.feedback(2, 2))
    assert two.results_in(5) == Product(Product(5, 0), 2)
    assert doctest.testmod(summary_mod).failed == 0


# -- overflow ---------------------------------------------------------------------------


def test_overflow_at_time_max():
    assert PathSummary.advance(0, 1).results_in(TIME_MAX) is None
    assert PathSummary.advance(0, 1).results_in(TIME_MAX - 1) == TIME_MAX
    assert PathSummary.advance(0, TIME_MAX).results_in(1) is None
    assert PathSummary.advance(0, TIME_MAX).results_in(0) == TIME_MAX
    assert PathSummary.identity(0).results_in(TIME_MAX) == TIME_MAX
    assert PathSummary.feedback(1).results_in(Product(3, TIME_MAX)) is None
    assert PathSummary.feedback(1).results_in(Product(TIME_MAX, TIME_MAX - 1)) == Product(TIME_MAX, TIME_MAX)
    assert PathSummary(1, 1, (1, 0)).results_in(Product(TIME_MAX, 0)) is None
    assert PathSummary(2, 2, (0, 1, 0)).results_in(from_vector((0, TIME_MAX, 0))) is None
    assert PathSummary.enter(0).results_in(TIME_MAX) == Product(TIME_MAX, 0)


def test_overflow_in_a_coordinate_appended_by_an_entered_scope():
    """Entering a scope then advancing its coordinate past TIME_MAX overflows too."""
    s = PathSummary.enter(0).followed_by(PathSummary.advance(1, TIME_MAX))
    assert s.results_in(5) == Product(5, TIME_MAX)
    s = s.followed_by(PathSummary.advance(1, 1))
    assert s.results_in(5) is None
    assert s.results_in(0) is None


@given(path_and_times(), st.data())
def test_overflow_is_monotone_in_the_time(case, data):
    """If ``s(t)`` overflows, so does ``s(t')`` for every ``t' >= t``."""
    src, _, summaries, _, ts = case
    s = compose(src, summaries)
    for t in ts:
        bigger = from_vector(tuple(min(TIME_MAX, x + data.draw(st.sampled_from([0, 1, TIME_MAX]))) for x in to_vector(t)))
        r, rb = s.results_in(t), s.results_in(bigger)
        if r is None:
            assert rb is None
        elif rb is not None:
            assert less_equal(r, rb)


# -- the partial order on summaries ---------------------------------------------------------


@st.composite
def normal_forms(draw, src: int, dst: int, keep: int, adds=small_steps):
    add = tuple(draw(adds) for _ in range(keep))
    tail = tuple(draw(adds) for _ in range(dst + 1 - keep))
    return PathSummary(src, dst, add, tail)


@st.composite
def summary_pairs(draw, same_src_dst: bool = True):
    src, dst = draw(depths), draw(depths)
    keep1 = draw(st.integers(1, min(src, dst) + 1))
    keep2 = keep1 if draw(st.booleans()) else draw(st.integers(1, min(src, dst) + 1))
    return draw(normal_forms(src, dst, keep1)), draw(normal_forms(src, dst, keep2))


@st.composite
def skeleton_pairs(draw):
    """Two paths with the same enter/leave skeleton but different delays."""
    src, steps, _, dst = draw(paths(ks=small_steps))
    out = []
    for _ in range(2):
        d = src
        summaries = []
        for step in steps:
            if step[0] == "adv":
                step = ("adv", draw(small_steps))
            summaries.append(step_summary(step, d))
            d += 1 if step[0] == "enter" else -1 if step[0] == "leave" else 0
        out.append(compose(src, summaries))
    return out[0], out[1]


def check_less_equal(s1: PathSummary, s2: PathSummary, ts: list[Any]) -> None:
    if s1.less_equal(s2):
        for t in ts:
            r1, r2 = s1.results_in(t), s2.results_in(t)
            if r1 is None:
                assert r2 is None  # overflowing is "later than everything"
            elif r2 is not None:
                assert less_equal(r1, r2), (s1, s2, t)
    if (s1.src, s1.dst, s1.keep) == (s2.src, s2.dst, s2.keep):
        # with the same shape the order is exact: the least time is a witness
        m = minimum(s1.src)
        assert s1.less_equal(s2) == less_equal(s1.results_in(m), s2.results_in(m))
    else:
        assert not s1.less_equal(s2)


@given(summary_pairs(), st.data())
def test_less_equal_sound_and_exact_on_normal_forms(pair, data):
    s1, s2 = pair
    ts = data.draw(st.lists(times(s1.src, any_coords), min_size=1, max_size=6))
    check_less_equal(s1, s2, ts)
    check_less_equal(s2, s1, ts)
    assert s1.less_equal(s1)
    if s1.less_equal(s2) and s2.less_equal(s1):
        assert s1 == s2


@given(skeleton_pairs(), st.data())
def test_less_equal_sound_on_paths(pair, data):
    s1, s2 = pair
    ts = data.draw(st.lists(times(s1.src, any_coords), min_size=1, max_size=6))
    check_less_equal(s1, s2, ts)
    check_less_equal(s2, s1, ts)


@given(summary_pairs(), st.data())
def test_followed_by_is_monotone(pair, data):
    """``s1 <= s2`` implies ``x;s1 <= x;s2`` and ``s1;y <= s2;y`` (the tracker prunes on it)."""
    s1, s2 = pair
    assume(s1.less_equal(s2))
    x = data.draw(normal_forms(data.draw(depths), s1.src, 1)) if s1.src == 0 else None
    y_dst = data.draw(depths)
    y = data.draw(normal_forms(s1.dst, y_dst, data.draw(st.integers(1, min(s1.dst, y_dst) + 1))))
    assert s1.followed_by(y).less_equal(s2.followed_by(y))
    if x is not None:
        assert x.followed_by(s1).less_equal(x.followed_by(s2))


@given(depths.flatmap(lambda d: st.integers(1, d + 1).flatmap(lambda k: normal_forms(d, d, k))), st.data())
def test_strictly_advances_and_is_identity(s, data):
    """``strictly_advances``: no time ``t`` has ``s(t) <= t`` (a pointstamp is never
    blocked by its own consequences around a loop)."""
    d = s.src
    ts = data.draw(st.lists(times(d), min_size=1, max_size=6))
    if s.strictly_advances():
        for t in ts:
            r = s.results_in(t)
            assert r is not None and not less_equal(r, t)
            if s.keep == d + 1:  # nothing re-entered: the time strictly grows
                assert less_than(t, r)
    # a witness time whose every coordinate exceeds every constant of the summary
    c = max(s.tail, default=0) + 1
    w = from_vector((c,) * (d + 1))
    r = s.results_in(w)
    assert s.strictly_advances() == (not less_equal(r, w))
    assert s.is_identity() == (r == w)
    if s.is_identity():
        assert all(s.results_in(t) == t for t in ts)


def test_strictly_advances_examples():
    assert PathSummary.feedback(1).strictly_advances()
    assert PathSummary.advance(0, 2).strictly_advances()
    assert not PathSummary.identity(1).strictly_advances()
    # leaving and re-entering a scope resets the inner coordinate: (o, i) -> (o, 0)
    reenter = PathSummary.leave(1).followed_by(PathSummary.enter(0))
    assert not reenter.strictly_advances()
    assert less_equal(reenter.results_in(Product(3, 4)), Product(3, 4))
    # a summary between different depths is not a loop
    assert not PathSummary.enter(0).followed_by(PathSummary.feedback(1)).strictly_advances()
