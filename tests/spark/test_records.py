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
