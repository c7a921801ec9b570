"""Events as plain dicts (the rows ts.io.parquet / ts.io.csv give): no event_type=, the
state type inferred from the source's columns and checked on the first record."""

from __future__ import annotations

import datetime as dt
import operator
from pathlib import Path
from typing import Any, Optional, TypedDict

import pytest

import tstate as ts
from apps.cep import AfterMatchSkip, Pattern
from apps.cep.dataflow import CepState, cep
from apps.cep.flights import FlightEvent
from apps.cep.source import flight_source
from tstate.errors import ConfigurationError, StateTypeError
from tstate.types import StateCodec

SAMPLE = Path(__file__).resolve().parents[3] / "apps" / "data" / "flights-sample.parquet"
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason="no bundled sample")


def cascade(field: Any) -> Pattern:
    """delay > 30, then >= 2 departures each delayed more than the previous, within 3 h
    (``field(event, name)`` reads a field: by key for dicts, by attribute for objects)."""
    return (
        Pattern.begin("first", skip=AfterMatchSkip.skip_past_last_event())
        .where(lambda f: field(f, "delay") > 30)
        .followed_by("rise")
        .where(lambda f, ctx: field(f, "delay") > field(ctx.previous(), "delay"))
        .times_or_more(2)
        .within(dt.timedelta(hours=3))
    )


def minutes(d: dt.datetime) -> int:
    return (d - dt.datetime(1970, 1, 1)) // dt.timedelta(minutes=1)


@needs_sample
def test_dict_rows_need_no_event_type(tmp_path: Path) -> None:
    src = ts.io.parquet(SAMPLE, time="date", epoch="1h")
    row_type = src.record_type()
    assert row_type.__annotations__ == {
        "date": Optional[dt.datetime], "delay": Optional[int], "distance": Optional[int],
        "origin": Optional[str], "destination": Optional[str],
    }  # fmt: skip
    flow = ts.Dataflow("dicts")
    rows = flow.source(src, name="rows")
    # no time=, epoch=, event_type=: the source declares them (the date column, hourly
    # epochs, a TypedDict of the columns)
    out = cep(flow, rows, cascade(operator.getitem), key=operator.itemgetter("origin"))
    assert out.operator is not None and out.epoch == dt.timedelta(hours=1)
    matches, timeouts, _ = out.collect()
    flow.run(workers=2, checkpoint=ts.Checkpoints(str(tmp_path / "ck"), every_epochs=6))  # the state is encoded
    assert (tmp_path / "ck").exists()

    # the same pattern over FlightEvent objects (minutes), as the app streams them
    flow2 = ts.Dataflow("objects")
    src2 = flow2.source(flight_source(SAMPLE, epoch="1h"), name="flights")
    want, want_to, _ = cep(flow2, src2, cascade(getattr), key=operator.attrgetter("origin")).collect()
    flow2.run()

    def norm(items: list, mins: bool) -> list:
        return sorted(
            (t, k, tuple((s, tuple((minutes(e["date"]) if mins else e.minute, e["delay"] if mins else e.delay) for e in evs))
                         for s, evs in m.items()))  # fmt: skip
            for t, (k, m) in items
        )

    assert norm(matches.items, True) == norm(want.items, False)
    assert len(matches.items) > 100 and len(timeouts.items) == len(want_to.items)
    # the matches hold the rows as they came: dicts
    (_, (_, m)), *_ = matches.items
    assert type(m["first"][0]) is dict and m["first"][0]["delay"] > 30


@needs_sample
def test_the_inferred_state_type_round_trips() -> None:
    src = ts.io.parquet(SAMPLE, time="date", epoch="1h", limit=50)
    row_type = src.record_type()
    codec = StateCodec(CepState[row_type, dt.datetime])
    reader = src.open()
    rows: list[Any] = []
    while (b := reader.next_batch()) is not None:
        rows += b[1]
    assert len(rows) == 50
    st = CepState(buffer=[(r["date"], r) for r in rows])
    assert codec.decode(codec.encode(st)).buffer == st.buffer


class Row(TypedDict):
    kind: str
    t: int


class Declared(ts.io.Source):
    """A source that declares its records' type (and event time) but yields others."""

    def __init__(self, batches: list) -> None:
        self.inner = ts.io.from_batches(batches)

    def open(self, position: Any = None, start: Any = None) -> Any:
        return self.inner.open(position, start)

    def record_type(self) -> Any:
        return Row

    def event_time(self) -> Any:
        return ts.io.sources.EventTime("t", 10)


def ab() -> Pattern:
    return Pattern.begin("a").where(lambda e: e["kind"] == "a").followed_by("b").where(lambda e: e["kind"] == "b")


def test_the_first_record_is_checked_against_the_inferred_type() -> None:
    flow = ts.Dataflow("ok")
    src = flow.source(Declared([(0, [{"kind": "a", "t": 1}, {"kind": "b", "t": 5}])]))
    matches, _, _ = cep(flow, src, ab(), key=operator.itemgetter("kind")).collect()
    flow.run()
    flow = ts.Dataflow("bad")
    src = flow.source(Declared([(0, [{"kind": "a", "t": 1.5}])]))
    cep(flow, src, ab(), key=operator.itemgetter("kind"), name="pairs")
    with pytest.raises(StateTypeError, match=r"pairs: the record .* does not match Row.*Row\{'t'\}: expected int, got float 1.5"):
        flow.run()
    # no declared record type: event_type= is needed
    flow = ts.Dataflow("none")
    src = flow.source(ts.io.from_batches([(0, [{"kind": "a", "t": 1}])]))
    with pytest.raises(ConfigurationError, match="event_type= is needed"):
        cep(flow, src, ab(), key=operator.itemgetter("kind"), time=operator.itemgetter("t"))
    # a given event_type is used as it is (not checked per record)
    flow = ts.Dataflow("given")
    src = flow.source(Declared([(0, [{"kind": "a", "t": 1.5}])]))
    cep(flow, src, ab(), key=operator.itemgetter("kind"), event_type=Row)
    flow.run()
    assert flight_source(SAMPLE).record_type() is FlightEvent
