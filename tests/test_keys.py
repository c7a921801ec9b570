"""Stable key hashing: fixed vectors, equality-consistency, cross-process stability."""

from __future__ import annotations

import datetime
import enum
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.errors import ConfigurationError, KeyFunctionError
from tstate.keys import KeyRouter, bin_of, check_bins, decode_key, encode_key, encode_keys, ext_hook, key_bytes, key_hash

# xxHash64 (seed 0) of the canonical msgpack encoding; these must never change, or
# every checkpoint written before would put keys in the wrong bins.
VECTORS = [
    (0, 16804241149081757544),
    (1, 9962287286179718960),
    (-1, 10764519495013463364),
    ("ATL", 13138613275564027666),
    ("", 2081194110632256591),
    (b"\x00", 7918130355630126734),
    (("ATL", "SFO"), 1981181943418234985),
    ((1, "a", None), 2912518938152222826),
    (2**70, 7313353855557714506),
    (3.5, 14894067450333177833),
    (datetime.datetime(2001, 1, 1, 0, 1), 10960168964684769581),
    (frozenset({1, 2}), 2805207090707659882),
]


@pytest.mark.parametrize("key,expected", VECTORS)
def test_fixed_vectors(key, expected):
    assert key_hash(key) == expected


def test_encoding_is_plain_msgpack_for_scalars():
    assert key_bytes("ATL") == b"\xa3ATL"
    assert key_bytes(0) == b"\x00"
    assert key_bytes(("a", 1)) == b"\x92\xa1a\x01"


def test_same_hash_in_another_process_with_another_hash_seed():
    code = "from tstate.keys import key_hash; print([key_hash(k) for k in ['ATL', ('a', 1), 7]])"
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.check_output([sys.executable, "-c", code], env=env, text=True))
    assert outs == {f"{[key_hash('ATL'), key_hash(('a', 1)), key_hash(7)]}\n"}


def test_equal_keys_hash_equally():
    assert key_hash(1) == key_hash(True) == key_hash(1.0)
    assert key_hash((1, 2)) == key_hash([1, 2])

    class Color(enum.IntEnum):
        RED = 3

    assert key_hash(Color.RED) == key_hash(3)


def test_bad_keys():
    class Plain(enum.Enum):
        A = 1

    with pytest.raises(KeyFunctionError, match="plain Enum"):
        key_hash(Plain.A)
    with pytest.raises(KeyFunctionError, match="cannot be used as a key"):
        key_hash(object())
    with pytest.raises(KeyFunctionError, match="not hashable"):
        KeyRouter(4).bin([1, 2])


@pytest.mark.parametrize("bins", [0, 3, 1 << 17, "8"])
def test_bin_counts_must_be_powers_of_two(bins):
    with pytest.raises(ConfigurationError, match="power of two"):
        check_bins(bins)


keys = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.binary(), st.datetimes(), st.floats(allow_nan=False)),
    lambda inner: st.tuples(inner, inner) | st.frozensets(st.integers(), max_size=3),
    max_leaves=6,
)


@given(key=keys, log2=st.integers(0, 16))
def test_bins_are_the_top_bits_and_keys_round_trip(key, log2):
    import msgpack
    import msgspec

    bins = 1 << log2
    assert bin_of(key_hash(key), bins) == ((key_hash(key) >> (64 - log2)) if log2 else 0)
    assert KeyRouter(bins).bin(key) == bin_of(key_hash(key), bins)
    data = msgspec.msgpack.encode(encode_key(key))
    for back in (
        decode_key(msgspec.msgpack.decode(data)),  # extension types decoded by decode_key
        decode_key(msgspec.msgpack.decode(data, ext_hook=ext_hook)),  # ... or while decoding
        decode_key(msgpack.unpackb(data, strict_map_key=False)),  # format 1 read them with msgpack-python
    ):
        assert back == key and key_hash(back) == key_hash(key)
    assert encode_keys([key, key]) == [encode_key(key)] * 2
