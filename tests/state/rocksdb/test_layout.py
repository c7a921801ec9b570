"""Key layout: equal keys find one state, different keys never share one, every key of
a bin sorts inside the bin's range, and the key comes back as it was given."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tstate.keys import key_hash, bin_of
from tstate.state.rocksdb.layout import (
    bin_range, frame_value, is_meta, key_of, meta_key, state_bytes, store_key,
)

TZ = dt.timezone(dt.timedelta(hours=2))
scalars = st.one_of(
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.dates(),
    st.datetimes(timezones=st.just(TZ)),
    st.frozensets(st.integers(-3, 3), max_size=3),
)
keys = st.one_of(scalars, st.tuples(scalars, scalars), st.tuples(st.text(max_size=3), st.tuples(scalars)))


class Color(enum.IntEnum):
    RED = 1


@given(keys, st.integers(0, 65535))
def test_a_key_comes_back_equal_and_of_its_type(key: Any, index: int) -> None:
    skey = store_key(index, key)
    lo, hi = bin_range(index)
    assert lo <= skey < hi and not is_meta(skey)
    value = frame_value(key, b"\x93\x01\x02\x03")
    back = key_of(skey, value)
    assert back == key and type(back) is type(key)
    assert state_bytes(value) == b"\x93\x01\x02\x03"


@given(keys, keys)
def test_store_keys_are_equal_exactly_for_equal_keys(a: Any, b: Any) -> None:
    assert (store_key(0, a) == store_key(0, b)) == (a == b)


def test_equal_keys_of_different_types_share_one_state() -> None:
    assert store_key(1, 1) == store_key(1, True) == store_key(1, 1.0) == store_key(1, Color.RED)
    assert store_key(1, (1, "a")) == store_key(1, (True, "a"))


def test_a_tuple_never_equals_a_tagged_key() -> None:
    day = dt.date(2024, 5, 1)
    assert store_key(0, day) != store_key(0, ("~dt", day.isoformat()))
    assert store_key(0, frozenset({1})) != store_key(0, ("~fs", b"\x01"))
    assert store_key(0, 2**70) != store_key(0, ("~int", str(2**70)))


@given(st.integers(0, 65535), st.integers(0, 65535), keys)
def test_bins_are_disjoint_contiguous_ranges(i: int, j: int, key: Any) -> None:
    lo, hi = bin_range(i)
    inside = lo <= store_key(j, key) < hi
    assert inside == (i == j)
    assert lo <= meta_key(i, b"timers") < hi and is_meta(meta_key(i, b"timers"))


def test_the_last_bin_s_range_holds_its_greatest_key() -> None:
    lo, hi = bin_range(65535)
    assert lo <= store_key(65535, -1) < hi  # b"\xff\xff\xff"
    assert bin_of(key_hash("x"), 65536) >= 0


@given(st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=40), st.binary(max_size=40)))
def test_the_plain_packer_is_the_canonical_encoding(key: Any) -> None:
    """The write-back's fast path (``bin_prefix + pack_plain(key)``) makes the same
    store keys as :func:`store_key` (the canonical ``tstate.keys.key_bytes``)."""
    from tstate.keys import key_bytes
    from tstate.state.rocksdb.layout import bin_prefix, key_suffix, pack_plain

    assert pack_plain(key) == key_bytes(key) == key_suffix(key)
    assert bin_prefix(9) + pack_plain(key) == store_key(9, key)
