"""Bytes in the store never choose code: records cross a Spark exchange only as classes
the dataflow registered (tstate.spark.record_types), and a cell or held-back file naming
any other class is refused without importing its module."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, NamedTuple, Optional

import msgpack
import pytest
from attrs import define, field

import tstate as ts
from tstate.errors import ConfigurationError, RecordClassError
from tstate.spark import Backend, Source
from tstate.spark.plan import Plan
from tstate.spark.record_types import RecordTypes
from tstate.spark.records import decode_cells, decode_records, encode_records

EVIL = "tests.spark.evil_records"
FLAG = os.path.join(__import__("tempfile").gettempdir(), f"tstate-evil-records-imported-{os.getuid()}")


@define
class Leg:
    origin: str
    minutes: int


@define
class Route:
    legs: list[Leg] = field(factory=list)


class Change(NamedTuple):
    key: str
    old: Optional[int]
    new: Optional[int]


@define
class Flight:
    origin: str
    delay: int


@define
class Alert:
    origin: str


@define
class Unregistered:
    x: int


def crafted(path: str, values: list[Any], named_tuple: bool = False) -> bytes:
    """A cell as an attacker writes it: one record naming ``path`` as its class."""
    return msgpack.packb([msgpack.ExtType(8 if named_tuple else 7, msgpack.packb([path, values], use_bin_type=True))])


@pytest.fixture(autouse=True)
def _no_flag() -> Any:
    if os.path.exists(FLAG):
        os.remove(FLAG)
    assert EVIL not in sys.modules
    yield
    assert EVIL not in sys.modules, "a decoder imported the module a cell named"
    assert not os.path.exists(FLAG), "a decoder (driver or Spark worker) imported the module a cell named"


@pytest.mark.parametrize(
    "path, named_tuple",
    [
        (f"{EVIL}:Payload", False),  # an attrs class in a module with a side effect on import
        ("os:system", True),
        ("subprocess:Popen", False),
        ("posix:system", False),
        ("builtins:eval", True),
        (12, False),  # not even a string
    ],
)
def test_a_cell_naming_an_unregistered_class_is_refused_without_importing(path: Any, named_tuple: bool) -> None:
    types = RecordTypes.from_classes([Flight])
    cell = crafted(path, ["echo pwned"], named_tuple)
    with pytest.raises(RecordClassError) as info:
        decode_records(cell, types, "cell 3 of bucket/x")
    msg = str(info.value)
    assert repr(path) in msg and "cell 3 of bucket/x" in msg
    assert "flow.record_types(" in msg
    assert f"{__name__}:Flight" in msg  # what the dataflow did register
    # nested inside other values, and in a batch of cells, too
    nested = msgpack.packb([[1, {"k": msgpack.ExtType(1, crafted(path, [], named_tuple))}]])
    with pytest.raises(RecordClassError, match="cell #1"):
        decode_cells([encode_records([(1, 2)], "op", types), nested], types, lambda i: f"cell #{i}")


def test_a_registered_class_of_the_wrong_kind_is_refused() -> None:
    types = RecordTypes.from_classes([Flight, Change])
    with pytest.raises(RecordClassError, match="is not a named tuple"):
        decode_records(crafted(f"{__name__}:Flight", ["BOS", 1], named_tuple=True), types)
    with pytest.raises(RecordClassError, match="is not a attrs class|is not an attrs class"):
        decode_records(crafted(f"{__name__}:Change", ["k", 1, 2]), types)


def test_a_malformed_cell_names_where_it_came_from() -> None:
    types = RecordTypes.from_classes([Flight])
    with pytest.raises(ts.errors.SparkError, match="held file h1: malformed records"):
        decode_records(crafted(f"{__name__}:Flight", ["BOS", 1, 2, 3]), types, "held file h1")


def test_registered_classes_round_trip_and_others_are_refused_by_the_writer() -> None:
    types = RecordTypes.from_classes([Route, Change])
    recs = [Route([Leg("BOS", 3)]), Change("k", None, 2), (Leg("JFK", 1),)]
    assert decode_records(encode_records(recs, "op", types), types) == recs
    with pytest.raises(RecordClassError) as info:
        encode_records([1, {"a": Unregistered(3)}], "count", types)
    msg = str(info.value)
    assert "operator 'count'" in msg and f"'{__name__}:Unregistered'" in msg
    assert "flow.record_types(Unregistered)" in msg


def test_the_plan_registers_state_types_hinted_classes_and_explicit_ones() -> None:
    flow = ts.Dataflow("reg")
    inp = flow.input("flights")

    def parse(row: dict) -> Iterable[Flight]:
        return [Flight(row["o"], row["d"])]

    flights = inp.flat_map(parse)

    @flow.stateful(flights, key=lambda f: f.origin, state=Route)
    def track(route: Route, f: Flight, ctx: ts.Context) -> None:
        ctx.emit(Alert(f.origin))

    flow.record_types(Alert)
    plan = Plan.of(flow)
    names = set(plan.records.names())
    mod = __name__
    assert {f"{mod}:Flight", f"{mod}:Route", f"{mod}:Leg", f"{mod}:Alert", "tstate.progress.timestamp:Product"} <= names
    assert f"{mod}:Unregistered" not in names and f"{mod}:Change" not in names
    with pytest.raises(ConfigurationError, match="not an attrs class or named tuple"):
        flow.record_types(Flight(1, 2))  # an instance, not a class


def test_unregistered_record_made_in_an_executor_fails_with_what_to_do(spark: Any, tmp_path: Any) -> None:
    def build(register: bool) -> tuple[ts.Dataflow, ts.Collected]:
        flow = ts.Dataflow("alerts")
        inp = flow.input("events")

        @flow.stateful(inp, key=lambda r: r["k"], state=int)
        def count(n: int, r: dict, ctx: ts.Context) -> int:  # no hint names Alert
            ctx.emit(Alert(r["k"]))
            return n + 1

        if register:
            flow.record_types(Alert)
        return flow, count.collect()

    df = spark.createDataFrame([("a", 0), ("b", 0)], "k string, t long")
    flow, _ = build(False)
    with pytest.raises(Exception, match=r"operator 'collect.*' is an instance of '.*:Alert'.*flow.record_types\(Alert\)"):
        Backend(spark, checkpoint=str(tmp_path / "a"), partitions=2).run(flow, {"events": Source(df, time="t")})
    flow, out = build(True)
    Backend(spark, checkpoint=str(tmp_path / "b"), partitions=2).run(flow, {"events": Source(df, time="t")})
    assert sorted(out.records(), key=repr) == [Alert("a"), Alert("b")]


def test_a_crafted_held_back_records_file_is_refused_without_importing(spark: Any, tmp_path: Any) -> None:
    from tstate.spark.held import read_held, write_held

    from .test_streaming import stream, write_files

    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    write_files(src, [[{"k": "a", "v": 1, "t": 5}, {"k": "b", "v": 2, "t": 6}]])

    def build() -> ts.Dataflow:
        flow = ts.Dataflow("held")
        ev = flow.input("events")

        @flow.stateful(ev, key=lambda r: r["k"], state=int)
        def count(n: int, r: dict, ctx: ts.Context) -> int:
            return n + 1

        return flow

    backend = Backend(spark, checkpoint=ck, partitions=2)
    q = backend.start(build(), {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    q.wait()
    held = backend.store.latest().meta["spark"]["held"]
    assert held is not None  # a@5 and b@6 wait for the frontier
    entries = read_held(backend.store.fs, held)
    assert any(isinstance(e, bytes) for e in entries)
    # the attacker rewrites the file (the checksum is not a secret) with a record naming
    # an attrs class in a module that has a side effect on import
    evil = msgpack.packb([[7, msgpack.ExtType(7, msgpack.packb([f"{EVIL}:Payload", ["rm -rf /"]]))]])
    head = backend.store.latest()
    assert [r.path for r in head.attached] == [held]
    ref = write_held(backend.store.fs, held, [evil if isinstance(e, bytes) else e for e in entries])
    # ... and the manifest that names it with its size and checksum (no secret either)
    import attrs

    from tstate.checkpoint.manifest import encode_manifest

    backend.store.fs.write_atomic(head.name, encode_manifest(attrs.evolve(head, attached=(ref,))))
    write_files(src, [[{"k": "c", "v": 0, "t": 15}]], start=1)
    backend2 = Backend(spark, checkpoint=ck, partitions=2)
    q2 = backend2.start(build(), {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    with pytest.raises(Exception) as info:
        q2.wait()
    msg = str(info.value)
    assert "RecordClassError" in msg and f"'{EVIL}:Payload'" in msg
    assert os.path.basename(held) in msg and "records held back for input 'events'" in msg
    assert backend2.store.latest().meta["spark"]["held"] == held  # nothing was committed past it
