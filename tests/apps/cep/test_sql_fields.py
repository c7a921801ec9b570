"""Columns of a MATCH_RECOGNIZE query are the rows' declared fields, resolved when the
query is compiled: no attribute traversal from query text (issue 26, finding 1), and an
unknown column in any clause is an SqlError naming it, the clause and the columns there
are, before any row is processed (issue 24, papercut 1)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from attrs import define, frozen
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from apps.cep import EventFieldError, Matcher, SqlError
from apps.cep.sql import match_recognize
from apps.cep.sql_fields import AttrFields, KeyFields, RowFields, fields_of

SAMPLE = Path(__file__).resolve().parents[3] / "apps" / "data" / "flights-sample.parquet"
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason="no bundled sample")


@frozen
class Flight:
    date: int
    delay: int
    origin: str


FLIGHTS = [Flight(i, d, "ATL") for i, d in enumerate([40, 50, 60, 10])]


# ---- the three queries ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query, ident, clause",
    [
        ('ORDER BY date MEASURES A."__init__.__globals__" AS leak PATTERN (A) DEFINE A AS TRUE', "__init__.__globals__",
         "MEASURES"),
        ("ORDER BY date MEASURES A.`__class__` AS cls PATTERN (A) DEFINE A AS TRUE", "__class__", "MEASURES"),
        ("ORDER BY date PATTERN (A) DEFINE A AS A.`__class__.__name__` = 'Flight'", "__class__.__name__", "DEFINE A"),
    ],
)  # fmt: skip
def test_dunders_and_paths_in_query_text_are_refused(query: str, ident: str, clause: str) -> None:
    for compile_ in (lambda: match_recognize(query), lambda: match_recognize(query, Flight)):
        with pytest.raises(SqlError) as err:
            compile_()
        assert f"{clause}: {ident!r} is not a plain column name" in str(err.value)


def test_only_declared_fields_are_read() -> None:
    q = match_recognize("ORDER BY date MEASURES A.to_dict AS m PATTERN (A) DEFINE A AS TRUE")  # plain, not declared
    with pytest.raises(SqlError, match=r"MEASURES: no column 'to_dict' \(the rows' columns: date, delay, origin\)"):
        q.run(FLIGHTS)
    with pytest.raises(SqlError, match=r"MEASURES: no column 'to_dict'"):
        match_recognize(q.text, Flight)
    # nothing declared up front (the pattern used on its own): each row is checked when read
    cond = match_recognize("ORDER BY date PATTERN (A) DEFINE A AS A.evolve IS NULL").pattern
    m = Matcher(cond)
    with pytest.raises(EventFieldError, match=r"Flight has the fields date, delay, origin, not 'evolve'"):
        m.process(m.new_state(), FLIGHTS[0], 0)

    class Plain:
        def __init__(self) -> None:
            self.x = 1

    with pytest.raises(SqlError, match=r"Plain declares no fields a query can read"):
        match_recognize("ORDER BY x PATTERN (A) DEFINE A AS TRUE").run([Plain()])
    with pytest.raises(EventFieldError, match=r"Plain declares no fields, not 'x'"):
        m = Matcher(match_recognize("ORDER BY t PATTERN (A) DEFINE A AS A.x > 0").pattern)
        m.process(m.new_state(), Plain(), 0)


# ---- papercut: unknown columns in every clause -------------------------------------------------


QUERY = """PARTITION BY origin ORDER BY date
MEASURES A.date AS start, C.delay AS last_delay
PATTERN (A B C) DEFINE A AS A.delay > 30, B AS B.delay > A.delay, C AS C.delay < B.delay"""


@pytest.mark.parametrize(
    "typo, clause, position",
    [("PARTITION BY orign", "PARTITION BY", (1, 14)), ("ORDER BY dte", "ORDER BY", (1, 30)),
     ("C.dely AS last_delay", "MEASURES", (2, 27)), ("B.delay > A.dely", "DEFINE B", (3, 58))],
)  # fmt: skip
def test_an_unknown_column_is_named_with_its_clause_before_any_row(
    typo: str, clause: str, position: tuple[int, int]
) -> None:
    right = {"PARTITION BY orign": "PARTITION BY origin", "ORDER BY dte": "ORDER BY date",
             "C.dely AS last_delay": "C.delay AS last_delay", "B.delay > A.dely": "B.delay > A.delay"}[typo]  # fmt: skip
    text = QUERY.replace(right, typo)
    wrong = typo.split()[-1] if "BY" in typo else typo.split()[0 if "AS" in typo else 2].split(".")[1]
    message = f"{clause}: no column {wrong!r} (the rows' columns: date, delay, origin)"

    def seen(e: SqlError) -> None:
        assert message in str(e) and (e.line, e.column) == position, str(e)

    with pytest.raises(SqlError) as err:  # against a declared type
        match_recognize(text, Flight)
    seen(err.value)

    consumed = []

    def rows() -> Any:
        for f in FLIGHTS:
            consumed.append(f)
            yield {"date": f.date, "delay": f.delay, "origin": f.origin}

    with pytest.raises(SqlError) as err:  # in memory: bound to the rows' keys first
        match_recognize(text).run(rows())
    seen(err.value)
    with pytest.raises(SqlError) as err:  # a pyarrow table: its columns
        import pyarrow as pa

        match_recognize(text).run(pa.Table.from_pylist([{"date": 0, "delay": 1, "origin": "x"}]))
    seen(err.value)
    flow = ts.Dataflow("typo")
    src = flow.input("flights")
    with pytest.raises(SqlError) as err:  # a dataflow: when it is built, not when it runs
        match_recognize(text).cep(flow, src, event_type=Flight, epoch=60)
    seen(err.value)


@needs_sample
def test_a_table_source_declares_its_columns() -> None:
    flow = ts.Dataflow("typo")
    src = flow.source(ts.io.parquet(SAMPLE, time="date", epoch="1h", columns=["date", "delay", "origin"]), name="rows")
    with pytest.raises(SqlError, match=r"MEASURES: no column 'dely' \(the rows' columns: date, delay, origin\)"):
        match_recognize(QUERY.replace("C.delay AS", "C.dely AS")).cep(flow, src)


# ---- fields_of -------------------------------------------------------------------------------


def test_what_declares_fields() -> None:
    class Row(typing.TypedDict):
        a: int
        b: str

    @dataclasses.dataclass
    class DC:
        a: int

    class NT(NamedTuple):
        a: int
        c: float

    import pyarrow as pa

    assert fields_of(Row) == KeyFields(("a", "b"))
    assert fields_of(DC) == AttrFields(("a",))
    assert fields_of(NT) == AttrFields(("a", "c"))
    assert fields_of(Flight) == AttrFields(("date", "delay", "origin"))
    assert fields_of(pa.schema([("x", pa.int64())])) == KeyFields(("x",))
    assert fields_of(["x", "y"]) == KeyFields(("x", "y"))
    assert fields_of(None) == fields_of(dict) == fields_of(Any) == RowFields()
    for bad in (int, object, 3):
        with pytest.raises(SqlError):
            fields_of(bad)
    q = match_recognize("ORDER BY a MEASURES A.c AS c PATTERN (A) DEFINE A AS A.a > 0", NT)
    assert q.run([NT(1, 2.5), NT(0, 1.0)]) == [{"c": 2.5}]


# ---- property: no identifier outside the declared fields reaches the event ---------------------


@define(slots=False)
class Recorded:
    """An event that records every attribute looked up on it."""

    date: int
    delay: int
    origin: str

    def __getattribute__(self, name: str) -> Any:
        object.__getattribute__(self, "__dict__").setdefault("_seen", []).append(name)
        return object.__getattribute__(self, name)


DECLARED = ("date", "delay", "origin")
TRICKY = ["__class__", "__init__.__globals__", "__dict__", "_seen", "origin.upper", "delay.real", "to_dict", "",
          "date ", "Date", "evolve", "__getattribute__", "a`b", "x\x00", *DECLARED]  # fmt: skip


def _quoted(ident: str) -> str:
    return "`" + ident.replace("`", "``") + "`"


@given(
    ident=st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)),
    clause=st.sampled_from(["MEASURES", "DEFINE", "PARTITION BY", "ORDER BY"]),
    declared=st.booleans(),
)
def test_no_identifier_outside_the_declared_fields_reaches_the_event(ident: str, clause: str, declared: bool) -> None:
    col = _quoted(ident)
    text = {
        "MEASURES": f"ORDER BY date MEASURES A.{col} AS v PATTERN (A) DEFINE A AS TRUE",
        "DEFINE": f"ORDER BY date PATTERN (A) DEFINE A AS A.{col} IS NOT NULL",
        "PARTITION BY": f"PARTITION BY {col} ORDER BY date PATTERN (A) DEFINE A AS TRUE",
        "ORDER BY": f"ORDER BY {col} PATTERN (A) DEFINE A AS TRUE",
    }[clause]
    events = [Recorded(i, 10 * i, "ATL") for i in range(3)]
    readable = ident in DECLARED
    try:
        q = match_recognize(text, Recorded if declared else None)
        rows = q.run(events)
        if clause == "DEFINE" and not declared:  # the pattern alone: checked per row
            m = Matcher(q.pattern)
            st_ = m.new_state()
            for e in events:
                m.process(st_, e, e.date)
    except (SqlError, EventFieldError) as exc:
        assert not readable, exc
        assert repr(ident) in str(exc)
    else:
        assert readable
        if clause == "MEASURES":
            assert [r["v"] for r in rows] == [getattr(e, ident) for e in events]
    for e in events:
        seen = object.__getattribute__(e, "__dict__").get("_seen", [])
        assert ident in DECLARED or ident not in seen, (ident, seen)
