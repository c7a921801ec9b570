"""The MATCH_RECOGNIZE front end: positions in errors, Flink's translation rules (against
a model of them), expression semantics, the same matches as the hand-written Pattern
API on the real flights, and the query as a dataflow operator."""

from __future__ import annotations

import datetime as dt
import operator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from apps.cep import AfterMatchSkip, EventFieldError, ExpressionError, Matcher, Pattern, SqlError
from apps.cep.sql import match_recognize
from apps.cep.flights import RISING_DELAYS_SQL
from tests.apps.cep.helpers import drive

SAMPLE = Path(__file__).resolve().parents[3] / "apps" / "data" / "flights-sample.parquet"
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason="no bundled sample")


def error_of(query: str) -> SqlError:
    with pytest.raises(SqlError) as err:
        match_recognize(query)
    return err.value


# ---- errors name the position ------------------------------------------------------------------


def test_syntax_errors_name_line_and_column() -> None:
    e = error_of("ORDER BY t\nPATTERN (A B)\nDEFINE A AS A.x >> 3")
    assert (e.line, e.column) == (3, 18)
    assert str(e).startswith("line 3, column 18: syntax error: unexpected '>'")
    assert str(e).endswith("  DEFINE A AS A.x >> 3\n                   ^")
    e = error_of("ORDER BY t PATTERN (A B) DEFINE A AS A.x > 3,")
    assert "unexpected end of the query; expected a name" in str(e) and (e.line, e.column) == (1, 46)
    e = error_of("ORDER BY t PATERN (A) DEFINE A AS A.x > 3")
    assert (e.line, e.column) == (1, 12) and "unexpected 'PATERN'" in str(e) and "PATTERN" in str(e)
    e = error_of("ORDER BY t PATTERN (A) DEFINE A AS A.x # 3")
    assert (e.line, e.column) == (1, 40) and "unexpected '#'" in str(e)


@pytest.mark.parametrize(
    "query, position, message",
    [
        ("ORDER BY t PATTERN (A | B) DEFINE A AS A.x > 0", (1, 25), "alternation (|) is not supported"),
        ("ORDER BY t PATTERN ((A B)+ C) DEFINE A AS A.x > 0", (1, 21), "groups of variables"),
        ("ORDER BY t PATTERN (PERMUTE(A, B)) DEFINE A AS A.x > 0", (1, 21), "PERMUTE is not supported"),
        ("ORDER BY t PATTERN ({- A -} B) DEFINE A AS A.x > 0", (1, 21), "exclusion"),
        ("ORDER BY t PATTERN (^ A) DEFINE A AS A.x > 0", (1, 21), "anchors"),
        ("ORDER BY t ALL ROWS PER MATCH PATTERN (A) DEFINE A AS A.x > 0", (1, 12), "ALL ROWS PER MATCH"),
        ("ORDER BY t PATTERN (A) SUBSET U = (A) DEFINE A AS A.x > 0", (1, 24), "SUBSET"),
        ("ORDER BY t PATTERN (A B A) DEFINE A AS A.x > 0", (1, 25), "'A' appears twice"),
        ("ORDER BY t PATTERN (A* B?) DEFINE A AS A.x > 0", (1, 12), "can match no row"),
        ("ORDER BY t PATTERN (A B{0}) DEFINE A AS A.x > 0", (1, 24), "needs n > 0"),
        ("ORDER BY t PATTERN (A B{3,2}) DEFINE A AS A.x > 0", (1, 24), "0 <= n <= m"),
        ("ORDER BY t DESC PATTERN (A) DEFINE A AS A.x > 0", (1, 10), "must be ascending"),
        ("PATTERN (A) DEFINE A AS A.x > 0", (1, 1), "ORDER BY <time column> is required"),
        ("ORDER BY t PATTERN (A) DEFINE B AS B.x > 0", (1, 31), "'B' is not a variable of the pattern (A)"),
        ("ORDER BY t PATTERN (A B) DEFINE A AS C.x > 0", (1, 38), "'C' is not a pattern variable"),
        ("ORDER BY t AFTER MATCH SKIP TO LAST C PATTERN (A) DEFINE A AS A.x > 0", (1, 29), "'C' is not a variable"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS SUM(A.x + B.x) > 0", (1, 48), "must reference one pattern variable"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS LAST(A.x + B.x) > 0", (1, 49), "must reference one pattern variable"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS LAST(SUM(A.x)) > 0", (1, 43), "inside the argument"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS NEXT(B.x) > 0", (1, 38), "NEXT looks at rows after"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS LAST(B.x, A.x) > 0", (1, 48), "non-negative integer literal"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS COUNT(DISTINCT B.x) > 0", (1, 38), "DISTINCT is not supported"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS FOO(B.x) > 0", (1, 38), "unknown function FOO"),
        ("ORDER BY t PATTERN (A B) DEFINE B AS MATCH_ROWTIME() > 0", (1, 38), "MEASURES only"),
        ("ORDER BY t MEASURES A.x + 1 PATTERN (A) DEFINE A AS A.x > 0", (1, 21), "needs a name"),
        ("ORDER BY t MEASURES A.x AS y, B.z AS y PATTERN (A B) DEFINE A AS A.x > 0", (1, 12), "'y' appears twice"),
        ("ORDER BY t PATTERN (A B) WITHIN INTERVAL '1:70:00' HOUR DEFINE A AS A.x > 0", (1, 33), "bad interval"),
        ("SELECT T.nope FROM t MATCH_RECOGNIZE (ORDER BY t MEASURES A.x AS y PATTERN (A) DEFINE A AS A.x > 0)",
         (1, 8), "no such output column"),
    ],
)
def test_what_flink_refuses_is_refused_at_its_position(query: str, position: tuple[int, int], message: str) -> None:
    e = error_of(query)
    assert (e.line, e.column) == position, str(e)
    assert message in str(e)


# ---- the translation: Flink's planner rules, against a model of them -----------------------------

QUANTIFIERS = ["", "*", "+", "?", "{2}", "{2,}", "{0,}", "{1,3}", "{0,2}", "{,2}", "{1}"]


def model(q: str, reluctant: bool) -> dict[str, Any] | None:
    """StreamExecMatch.applyQuantifier as a table: (min, max, optional, greedy,
    consecutive) of a stage, or None when Flink refuses it."""
    if q == "":
        return {"min": 1, "max": 1, "optional": False, "greedy": False, "inner": False}
    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1), "{2}": (2, 2), "{2,}": (2, None), "{0,}": (0, None),
              "{1,3}": (1, 3), "{0,2}": (0, 2), "{,2}": (0, 2), "{1}": (1, 1)}[q]  # fmt: skip
    optional = lo == 0
    if lo == 0 and hi == 1:
        return None if reluctant else {"min": 1, "max": 1, "optional": True, "greedy": False, "inner": False}
    return {
        "min": max(lo, 1), "max": hi, "optional": optional,
        "greedy": not reluctant and lo != hi, "inner": True,
    }  # fmt: skip


@given(st.lists(st.tuples(st.sampled_from(QUANTIFIERS), st.booleans()), min_size=1, max_size=4))
def test_quantifiers_translate_as_flinks_planner(terms: list[tuple[str, bool]]) -> None:
    names = [f"V{i}" for i in range(len(terms))]
    text = " ".join(f"{n}{q}{'?' if r and q else ''}" for n, (q, r) in zip(names, terms))
    expected = [model(q, r and bool(q)) for q, r in terms]
    query = f"ORDER BY t PATTERN ({text}) DEFINE V0 AS V0.x > 0"
    if any(e is None for e in expected):
        assert "reluctant optional" in str(error_of(query))
        return
    if all(e["optional"] for e in expected):  # type: ignore[index]
        assert "can match no row" in str(error_of(query))
        return
    if expected[-1]["greedy"]:  # type: ignore[index]
        assert "greedy quantifier" in str(error_of(query))
        return
    p = match_recognize(query).pattern
    assert p.skip == AfterMatchSkip.skip_past_last_event()
    for i, (stage, e) in enumerate(zip(p.stages, expected)):
        assert e is not None
        got = {
            "min": stage.min_times, "max": stage.max_times, "optional": stage.optional, "greedy": stage.greedy,
            "inner": stage.inner_set and stage.inner.value == "strict",
        }  # fmt: skip
        assert got == e, (text, stage)
        assert i == 0 or stage.contiguity.value == "strict"  # concatenation is next()


def test_skip_strategies_translate() -> None:
    def skip(clause: str) -> AfterMatchSkip:
        return match_recognize(f"ORDER BY t {clause} PATTERN (A B) DEFINE A AS A.x > 0").pattern.skip

    assert skip("") == AfterMatchSkip.skip_past_last_event()  # the default
    assert skip("AFTER MATCH SKIP PAST LAST ROW") == AfterMatchSkip.skip_past_last_event()
    assert skip("AFTER MATCH SKIP TO NEXT ROW") == AfterMatchSkip.skip_to_next()
    assert skip("after match skip to first B") == AfterMatchSkip.skip_to_first("B").throw_exception_on_miss()
    assert skip("AFTER MATCH SKIP TO LAST B") == AfterMatchSkip.skip_to_last("B").throw_exception_on_miss()
    assert skip("AFTER MATCH SKIP TO B") == AfterMatchSkip.skip_to_last("B").throw_exception_on_miss()


def test_keywords_are_case_insensitive_and_only_reserved_where_expected() -> None:
    q = match_recognize(
        'partition by `first` order by minute measures last(B."end") as `last`, count(*) as n '
        "pattern (A B+?) within interval '1:30' hour to minute define B as B.minute > A.minute -- a comment\n"
    )
    assert q.partition_by == ("first",) and q.pattern.window == dt.timedelta(minutes=90)
    rows = [{"first": 1, "minute": m, "end": m * 10} for m in (1, 2, 3)]
    assert q.run(rows, time_unit=dt.timedelta(minutes=1)) == [{"first": 1, "last": 20, "n": 2}]


# ---- expressions -------------------------------------------------------------------------------------


def measures(exprs: str, rows: list[dict[str, Any]], pattern: str = "(A B)", define: str = "B AS TRUE") -> dict:
    q = match_recognize(f"ORDER BY t MEASURES {exprs} PATTERN {pattern} DEFINE {define}")
    (out,) = q.run([{"t": i, **r} for i, r in enumerate(rows)])
    return out


def test_null_logic_and_arithmetic() -> None:
    out = measures(
        "A.x + B.x AS s, A.x / B.y AS q, -7 / 2 AS tq, -7 % 3 AS m, 7.0 / 2 AS f, A.s || B.s AS c, "
        "B.n + 1 AS nn, B.n IS NULL AS isn, B.n > 1 AS cmp, (B.n > 1) OR TRUE AS t3, (B.n > 1) AND FALSE AS f3, "
        "NOT (B.n > 1) AS nn3, COALESCE(B.n, A.x, 0) AS co, ABS(-A.x) AS ab, UPPER(A.s) AS up",
        [{"x": 7, "s": "a", "n": 1}, {"x": 3, "y": 2, "s": "b", "n": None}],
    )
    assert out == {
        "s": 10, "q": 3, "tq": -3, "m": -1, "f": 3.5, "c": "ab", "nn": None, "isn": True, "cmp": None,
        "t3": True, "f3": False, "nn3": None, "co": 7, "ab": 7, "up": "A",
    }  # fmt: skip


def test_predicates_case_and_intervals() -> None:
    t0 = dt.datetime(2024, 1, 1, 12)
    out = measures(
        "B.x BETWEEN 1 AND 5 AS bt, B.x NOT BETWEEN 1 AND 5 AS nbt, B.x IN (1, 4, 9) AS inl, "
        "B.x NOT IN (1, NULL) AS nin, CASE WHEN B.x > 5 THEN 'big' WHEN B.x > 2 THEN 'mid' ELSE 'small' END AS sz, "
        "B.d - A.d AS gap, B.d > A.d + INTERVAL '30' MINUTE AS late, INTERVAL '1 02:03:04' DAY TO SECOND AS iv",
        [{"x": 0, "d": t0}, {"x": 4, "d": t0 + dt.timedelta(minutes=45)}],
    )
    assert out == {
        "bt": True, "nbt": False, "inl": True, "nin": None, "sz": "mid", "gap": dt.timedelta(minutes=45),
        "late": True, "iv": dt.timedelta(days=1, hours=2, minutes=3, seconds=4),
    }  # fmt: skip


def test_navigation_and_aggregates_in_measures() -> None:
    rows = [{"x": v} for v in (1, 2, 3, 4, 10)]
    out = measures(
        "FIRST(B.x) AS f, FIRST(B.x, 1) AS f1, LAST(B.x, 1) AS l1, B.x AS b, x AS lastx, FIRST(x) AS firstx, "
        "PREV(C.x) AS pc, PREV(C.x, 4) AS pc4, PREV(C.x, 5) AS pc5, NEXT(A.x) AS na, PREV(LAST(B.x, 1), 1) AS plb, "
        "COUNT(*) AS n, COUNT(B.*) AS nb, COUNT(B.x) AS nbx, SUM(B.x) AS sb, AVG(B.x) AS ab, MIN(x) AS mi, "
        "MAX(B.x * 2) AS mx, SUM(D.x) AS sd, COUNT(D.*) AS nd, MATCH_ROWTIME() AS mt",
        rows, "(A B+ D? C)", "B AS B.x < 5, C AS C.x > 5",
    )  # fmt: skip
    assert out == {
        "f": 2, "f1": 3, "l1": 3, "b": 4, "lastx": 10, "firstx": 1, "pc": 4, "pc4": 1, "pc5": None, "na": 2,
        "plb": 2, "n": 5, "nb": 3, "nbx": 3, "sb": 9, "ab": 3.0, "mi": 1, "mx": 8, "sd": None, "nd": 0, "mt": 4,
    }  # fmt: skip


def test_define_sees_the_current_row_and_prev_is_a_physical_offset() -> None:
    # B AS B.x > PREV(B.x): the row before the current one in the match (A's for the
    # first B); LAST(x, 1) says the same the way Flink accepts
    for cond in ("B.x > PREV(B.x)", "B.x > LAST(x, 1)", "B.x > PREV(x)"):
        q = match_recognize(f"ORDER BY t MEASURES COUNT(B.*) AS n PATTERN (A B+ C) DEFINE B AS {cond}, C AS TRUE")
        rows = [{"t": i, "x": v} for i, v in enumerate([5, 6, 7, 3, 4, 9, 1])]
        # 5 (6 7) 3 | 4 (9) 1
        assert q.run(rows) == [{"n": 2}, {"n": 1}]
    # PREV of the first row of a match: NULL (before the match), so the row is not mapped
    q = match_recognize("ORDER BY t MEASURES A.x AS a PATTERN (A B) DEFINE A AS PREV(A.x) IS NULL")
    assert q.run([{"t": i, "x": v} for i, v in enumerate([1, 2, 3, 4])]) == [{"a": 1}, {"a": 3}]
    # simple conditions (the current row only) are plain functions of the event
    q = match_recognize("ORDER BY t PATTERN (A B) DEFINE A AS A.x > 1 AND x < 9, B AS B.x > A.x")
    assert not q.pattern.stages[0].condition.takes_ctx and q.pattern.stages[1].condition.takes_ctx


def test_runtime_errors_name_the_expression() -> None:
    q = match_recognize("ORDER BY t PATTERN (A B) DEFINE A AS A.x > 1,\n  B AS A.x / B.x > 1")
    with pytest.raises(ExpressionError, match=r"DEFINE A \(line 1, column 38\): A.x > 1: TypeError.*'str' and 'int'"):
        q.run([{"t": 0, "x": "s"}])
    with pytest.raises(ExpressionError, match=r"DEFINE B \(line 2, column 8\): A.x / B.x > 1: ZeroDivisionError"):
        q.run([{"t": 0, "x": 3}, {"t": 1, "x": 0}])
    # a column no row has: an SqlError naming it, before any row is matched
    with pytest.raises(SqlError, match=r"line 1, column 38: DEFINE A: no column 'x' \(the rows' columns: t, y\)"):
        q.run([{"t": 0, "y": 1}])
    # a column some row lacks: the matcher's EventFieldError, naming the variable and the column
    with pytest.raises(EventFieldError, match=r"pattern stage 'A': the condition reads field 'x'") as err:
        q.run([{"t": 0, "x": 0}, {"t": 1, "y": 1}])
    assert (err.value.stage, err.value.field) == ("A", "x")
    q = match_recognize("ORDER BY t MEASURES A.x - B.x AS d PATTERN (A B) DEFINE B AS TRUE")
    with pytest.raises(ExpressionError, match=r"MEASURES d \(line 1, column 21\): A.x - B.x"):
        q.run([{"t": 0, "x": "a"}, {"t": 1, "x": 1}])


def test_run_orders_partitions_and_objects() -> None:
    from attrs import frozen

    @frozen
    class Tick:
        sym: str
        t: int
        seq: int
        x: int

    q = match_recognize(
        "PARTITION BY sym ORDER BY t, seq DESC MEASURES A.seq AS a, B.seq AS b PATTERN (A B) DEFINE B AS B.x > A.x"
    )
    rows = [Tick("s", 1, 1, 5), Tick("r", 0, 0, 1), Tick("s", 1, 2, 1), Tick("r", 1, 1, 2), Tick("s", 0, 0, 9)]
    # s: t=0 seq0 (9), t=1 seq2 (1), t=1 seq1 (5) -> 1 < 5: (2, 1); r: (0, 1)
    assert q.run(rows) == [{"sym": "s", "a": 2, "b": 1}, {"sym": "r", "a": 0, "b": 1}]
    import pyarrow as pa

    table = pa.table({"sym": ["s", "s"], "t": [0, 1], "seq": [0, 0], "x": [1, 2]})
    assert q.run(table) == [{"sym": "s", "a": 0, "b": 0}]


# ---- the flights: the same matches as the Pattern API ---------------------------------------------

FLIGHT_QUERY = RISING_DELAYS_SQL  # (the benchmark measures the same query)


def hand_written() -> Pattern:
    """FLIGHT_QUERY in the Pattern API, as Flink's planner translates it."""
    return (
        Pattern.begin("A", skip=AfterMatchSkip.skip_past_last_event())
        .where(lambda f: f["delay"] > 30)
        .next("B")
        .where(lambda f, ctx: f["delay"] > ctx.previous()["delay"])
        .times_or_more(2)
        .consecutive()
        .next("C")
        .where(lambda f, ctx: f["delay"] < ctx.previous()["delay"])
        .within(dt.timedelta(hours=3))
    )


def flight_rows() -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(SAMPLE, columns=["date", "delay", "origin"]).to_pylist()


@needs_sample
def test_sql_and_pattern_api_give_the_same_matches_on_the_flights() -> None:
    rows = flight_rows()
    q = match_recognize(FLIGHT_QUERY)
    got = sorted((r["origin"], r["start"], r["stop"], r["rises"]) for r in q.run(rows))
    by_origin: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_origin.setdefault(r["origin"], []).append(r)
    want = []
    m = Matcher(hand_written())
    for origin, rs in by_origin.items():
        rs.sort(key=operator.itemgetter("date"))
        res = drive(m, [(r, r["date"]) for r in rs], dt.datetime.max)
        want += [(origin, x["A"][0]["date"], x["C"][0]["date"], len(x["B"])) for _, x in res.matches]
    assert got == sorted(want)
    assert len(got) > 50 and max(n for *_, n in got) >= 3
    # PREV(B.delay) (this front end's physical offset) says the same
    q2 = match_recognize(FLIGHT_QUERY.replace("B.delay > LAST(delay, 1)", "B.delay > PREV(B.delay)"))
    assert sorted((r["origin"], r["start"], r["stop"], r["rises"]) for r in q2.run(rows)) == got


@needs_sample
def test_the_query_as_a_dataflow_operator() -> None:
    # ts.io.parquet gives dict rows with the date as a datetime and hourly epochs: the
    # query needs nothing else (time, epoch, record type come from the source)
    q = match_recognize(FLIGHT_QUERY)
    flow = ts.Dataflow("sql")
    src = flow.source(ts.io.parquet(SAMPLE, time="date", epoch="1h", columns=["date", "delay", "origin"]), name="rows")
    out = q.cep(flow, src)
    rows = out.rows.collect()
    flow.run(workers=3)
    assert sorted(map(repr, (r for _, r in rows.items))) == sorted(map(repr, q.run(flight_rows())))
    # emitted at the epoch of the row that completed the match (its hour, or later)
    assert all(t == (r["stop"] - dt.datetime(1970, 1, 1)) // dt.timedelta(hours=1) for t, r in rows.items)
    with pytest.raises(SqlError, match="orders rows by time only"):
        match_recognize("ORDER BY date, delay PATTERN (A) DEFINE A AS A.delay > 0").cep(flow, src)


# ---- the README's table of MATCH_RECOGNIZE / Flink CEP / apps.cep -------------------------------


def test_the_readme_table_says_what_the_front_end_does() -> None:
    import re

    readme = (Path(__file__).resolve().parents[3] / "apps" / "cep" / "README.md").read_text()
    table = readme[readme.index("| MATCH_RECOGNIZE | Flink CEP (Java) | `apps.cep` |") :]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:] if line.startswith("|")]
    by_sql = {r[0]: r for r in rows}
    for clause in ("PATTERN (A B)", "B+", "B*", "B?", "B{3}", "B{2,}", "WITHIN INTERVAL '1' HOUR",
                   "AFTER MATCH SKIP TO NEXT ROW", "AFTER MATCH SKIP TO FIRST A", "PARTITION BY origin"):  # fmt: skip
        assert f"`{clause}`" in by_sql, clause

    def stage_of(p: Pattern) -> tuple:
        b = p.stages[1]
        return (b.min_times, b.max_times, b.optional, b.greedy, b.inner, b.inner_set, b.contiguity)

    for q in ("B+", "B*", "B?", "B{3}", "B{2,}"):
        api = re.findall(r"`([^`]*)`", by_sql[f"`{q}`"][2])[0]
        written = eval('Pattern.begin("A").next("B")' + api + '.next("C")', {"Pattern": Pattern})
        compiled = match_recognize(f"ORDER BY t PATTERN (A {q} C) DEFINE A AS A.x > 0").pattern
        assert stage_of(written) == stage_of(compiled), q
    for sql, skip in (
        ("AFTER MATCH SKIP TO NEXT ROW", AfterMatchSkip.skip_to_next()),
        ("AFTER MATCH SKIP TO FIRST A", AfterMatchSkip.skip_to_first("A").throw_exception_on_miss()),
    ):
        api = re.findall(r"`([^`]*)`", by_sql[f"`{sql}`"][2])[0]
        assert eval("AfterMatchSkip." + api, {"AfterMatchSkip": AfterMatchSkip}) == skip
        assert match_recognize(f"ORDER BY t {sql} PATTERN (A B) DEFINE A AS A.x > 0").pattern.skip == skip


# ---- comparisons with a literal or of current-row columns: the fused paths (issue 24 item 5) ----

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq, "<>": operator.ne}


@given(
    xs=st.lists(st.tuples(st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5)), max_size=12),
    op=st.sampled_from(sorted(_OPS)),
    form=st.sampled_from(["col op lit", "lit op col", "col op col", "col op null"]),
)
def test_comparisons_keep_sql_null_semantics(xs: list[tuple[int | None, int | None]], op: str, form: str) -> None:
    """A row matches A exactly when its condition is TRUE: a NULL operand makes it NULL
    (no match), whichever way the comparison was compiled."""
    rows = [{"t": i, "x": x, "y": y} for i, (x, y) in enumerate(xs)]
    cond = {
        "col op lit": f"A.x {op} 2",
        "lit op col": f"2 {op} A.x",
        "col op col": f"A.x {op} A.y",
        "col op null": f"A.x {op} NULL",
    }[form]
    q = match_recognize(f"ORDER BY t MEASURES A.t AS i ONE ROW PER MATCH PATTERN (A) DEFINE A AS {cond}")
    f = _OPS[op]

    def holds(i: int) -> bool:
        x, y = xs[i]
        other = {"col op lit": 2, "lit op col": 2, "col op col": y, "col op null": None}[form]
        if x is None or other is None:
            return False
        return bool(f(2, x)) if form == "lit op col" else bool(f(x, other))

    assert [r["i"] for r in q.run(rows)] == [i for i in range(len(rows)) if holds(i)]
