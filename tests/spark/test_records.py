"""Records crossing a Spark exchange: msgpack with extensions, never pickle."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.errors import SparkError
from tstate.progress import Product
from tstate.spark.records import decode_records, encode_records

scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text() | st.binary()
    | st.datetimes() | st.dates() | st.decimals(allow_nan=False, allow_infinity=False)
)
hashables = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    | st.sets(hashables, max_size=4)
    | st.frozensets(hashables, max_size=4),
    max_leaves=12,
)


@given(st.lists(values, max_size=6))
def test_round_trip_keeps_types_and_values(records: list) -> None:
    back = decode_records(encode_records(records, "op"))
    assert back == records
    assert [type(b) for b in back] == [type(r) for r in records]


def test_attrs_instances_and_times() -> None:
    recs = [Product(3, 4), {"at": dt.datetime(2001, 1, 2, 3, 4), "d": Decimal("1.5")}]
    assert decode_records(encode_records(recs, "op")) == recs


def test_unencodable_record_is_named() -> None:
    class Local:
        pass

    with pytest.raises(SparkError, match=r"record .*Local.* sent to operator 'count' cannot cross a Spark exchange"):
        encode_records([1, Local()], "count")


# -- tagged cells: one pass, class paths once per cell, older cells still read --------

from tests.spark.typed_events import Event, Pair  # noqa: E402
from tstate.errors import RecordClassError  # noqa: E402
from tstate.spark.record_types import RecordTypes  # noqa: E402

TYPES = RecordTypes.from_classes([Event, Pair])
events = st.builds(Event, st.text(max_size=4), st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5))
pairs = st.builds(Pair, st.integers(), st.text(max_size=4))  # (any int: beyond 64 bits too)
keys = hashables | st.tuples(hashables, hashables) | st.builds(Pair, st.integers(-9, 9), st.text(max_size=3))
deep = st.recursive(
    scalars | events | st.integers() | st.text(alphabet=st.characters(min_codepoint=0x80)),
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.builds(Pair, st.integers(), inner.map(repr))
    | st.dictionaries(keys, inner, max_size=4)
    | st.sets(keys, max_size=4)
    | st.frozensets(keys, max_size=4),
    max_leaves=16,
)


def same_deep(a: object, b: object) -> bool:
    """Equal, and of the same type at every level (``==`` alone says ``{1} == frozenset({1})``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same_deep(a[k], b[k]) for k in a) and all(
            same_deep(x, y) for x, y in zip(a, b)
        )
    if isinstance(a, (set, frozenset)):
        assert isinstance(b, (set, frozenset))
        return a == b and sorted(map(repr, a)) == sorted(map(repr, b))
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple))
        return len(a) == len(b) and all(same_deep(x, y) for x, y in zip(a, b))
    if isinstance(a, Event):
        return same_deep((a.k, a.v, a.t), (b.k, b.v, b.t))  # type: ignore[attr-defined]
    return a == b or (a != a and b != b)


@given(st.lists(deep | pairs, max_size=8))
def test_one_cell_reads_back_as_its_records_one_by_one(records: list) -> None:
    """A cell of many records (one class table, each value tagged in place) gives back
    exactly the records, types at every level included -- the same as one cell per record."""
    cell = encode_records(records, "op", TYPES)
    back = decode_records(cell, TYPES)
    assert same_deep(back, records)
    alone = [decode_records(encode_records([r], "op", TYPES), TYPES)[0] for r in records]
    assert same_deep(alone, back)


def test_a_class_path_is_written_once_per_cell() -> None:
    recs = [(f"k{i}", {"e": (Event("a", i, i), Event("b", -i, 0))}) for i in range(500)]
    cell = encode_records(recs, "op", TYPES)
    assert cell.count(b"typed_events:Event") == 1
    assert decode_records(cell, TYPES) == recs


#: a cell written before tagged arrays (one nested extension per value): the records of
#: ``test_a_cell_of_an_older_run_is_still_read``, as a held file of an older checkpoint holds them
OLD_CELL = bytes.fromhex(
    "9ec713019201c70e0192a16192cb4004000000000000c0c70302920304c7030391a178c71304323030312d30312d30325430333a3034"
    "3a3035c70a05323030312d30322d3033d606312e3235c7160a31313830353931363230373137343131333033343234c7150a2d333638"
    "3933343838313437343139313033323332c7270792d9217473746174652e70726f67726573732e74696d657374616d703a50726f6475"
    "6374920304c7250792be74657374732e737061726b2e74797065645f6576656e74733a4576656e7493a16b0102c7230892bd74657374"
    "732e737061726b2e74797065645f6576656e74733a506169729205a17081a16dc7540192c7250792be74657374732e737061726b2e74"
    "797065645f6576656e74733a4576656e7493a171020381c7230892bd74657374732e737061726b2e74797065645f6576656e74733a50"
    "6169729201a17a91c40162a775c3a9f09f9880c3"
)


def test_a_cell_of_an_older_run_is_still_read() -> None:
    recs = [
        (1, ("a", [2.5, None])), {3, 4}, frozenset({"x"}), dt.datetime(2001, 1, 2, 3, 4, 5), dt.date(2001, 2, 3),
        Decimal("1.25"), 2**70, -(2**65), Product(3, 4), Event("k", 1, 2), Pair(5, "p"),
        {"m": (Event("q", 2, 3), {Pair(1, "z"): [b"b"]})}, "u\u00e9\U0001F600", True,
    ]
    assert same_deep(decode_records(OLD_CELL, TYPES), recs)
    assert same_deep(decode_records(encode_records(recs, "op", TYPES), TYPES), recs)


def test_a_tagged_cell_naming_an_unregistered_class_is_refused_without_import() -> None:
    cell = encode_records([(1, Event("a", 1, 2))], "op", TYPES)
    with pytest.raises(RecordClassError, match=r"held file 7: names record class 'tests.spark.typed_events:Event'"):
        decode_records(cell, RecordTypes.from_classes([Pair]), "held file 7")
    with pytest.raises(RecordClassError, match=r"operator 'op2'.*typed_events:Event.*did not register"):
        encode_records([(1, Event("a", 1, 2))], "op2", RecordTypes.from_classes([Pair]))


def test_a_damaged_tagged_cell_is_named() -> None:
    cell = bytearray(encode_records([(1, 2, Event("a", 1, 2))], "op", TYPES))
    cell[-4] ^= 0x5A
    with pytest.raises(SparkError, match="cell 3 of batch 9: malformed records"):
        decode_records(bytes(cell), TYPES, "cell 3 of batch 9")
