"""Aggregates give Flink's result types (issue 24, item 5): AVG of integers is an integer,
truncated toward zero (Flink's AvgAggFunction: the column's type, sum / count in long
arithmetic), SUM and COUNT integers; ``exact_avg=True`` divides exactly.  The documented
example's values are in ``test_sql_golden.test_aggregations_avg``."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from apps.cep.sql import match_recognize

QUERY = (
    "ORDER BY t MEASURES AVG(A.x) AS a, SUM(A.x) AS s, COUNT(A.x) AS n, MIN(A.x) AS lo, MAX(A.x) AS hi "
    "PATTERN (A+ B) DEFINE A AS A.x IS NULL OR A.x < 1000, B AS B.x >= 1000"
)


def reference(xs: list[int | None], exact: bool) -> dict[str, object]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return {"a": None, "s": None, "n": 0, "lo": None, "hi": None}
    avg = Fraction(sum(vals), len(vals))
    return {"a": float(avg) if exact else math.trunc(avg), "s": sum(vals), "n": len(vals), "lo": min(vals),
            "hi": max(vals)}  # fmt: skip


@given(st.lists(st.one_of(st.none(), st.integers(min_value=-(10**12), max_value=999)), min_size=1, max_size=8))
def test_integer_aggregates_are_flinks(xs: list[int | None]) -> None:
    rows = [{"t": i, "x": x} for i, x in enumerate([*xs, 1000])]
    for exact in (False, True):
        (out,) = match_recognize(QUERY, exact_avg=exact).run(rows)
        want = reference(xs, exact)
        assert out == want and type(out["a"]) is type(want["a"]), (xs, exact, out)


def test_avg_of_doubles_and_in_define() -> None:
    rows = [{"t": i, "x": x} for i, x in enumerate([1.0, 2, 1000])]
    (out,) = match_recognize(QUERY).run(rows)
    assert out["a"] == 1.5 and out["s"] == 3.0
    # in DEFINE: the average of 7 and 8 is 7 in Flink (BIGINT), 7.5 exactly
    q = "ORDER BY t MEASURES COUNT(A.*) AS n PATTERN (A+ B) DEFINE A AS AVG(A.x) < 7.5, B AS TRUE"
    rows = [{"t": i, "x": x} for i, x in enumerate([7, 8, 100, 0])]
    assert match_recognize(q).run(rows) == [{"n": 2}]  # A = 7, 8; B = 100
    assert match_recognize(q, exact_avg=True).run(rows) == [{"n": 1}]  # A = 7; B = 8
