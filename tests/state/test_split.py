"""Split and merge of bins preserve contents exactly, and agree with the hash."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tstate.keys import bin_of, key_hash
from tstate.state.bin import Bin
from tstate.state.split import merge_all, merge_bins, split_all, split_bin

keys = st.one_of(st.integers(), st.text(max_size=5), st.tuples(st.integers(0, 9), st.text(max_size=2)))


def make_bins(entries, count: int) -> dict[int, Bin]:
    bins: dict[int, Bin] = {}
    for k, v, timer, dirty in entries:
        b = bins.setdefault(bin_of(key_hash(k), count), Bin(bin_of(key_hash(k), count)))
        b.states[k] = v
        if timer is not None:
            b.add_timer(timer, k)
        if dirty:
            b.dirty[k] = None
    return bins


entries = st.lists(st.tuples(keys, st.integers(), st.one_of(st.none(), st.integers(0, 5)), st.booleans()), max_size=60)


def flat(bins: dict[int, Bin]):
    states = {k: v for b in bins.values() for k, v in b.states.items()}
    timers = sorted(((t, repr(k)) for b in bins.values() for t, ks in b.timers.items() for k in ks))
    dirty = sorted(repr(k) for b in bins.values() for k in b.dirty)
    return states, timers, dirty


@given(entries=entries, log2=st.integers(0, 10))
def test_split_then_merge_preserves_everything(entries, log2):
    count = 1 << log2
    bins = make_bins(entries, count)
    split = split_all(bins, count)
    assert flat(split) == flat(bins)
    for b in split.values():  # every key lands in the bin the hash says at 2 * count
        for k in b.states:
            assert bin_of(key_hash(k), 2 * count) == b.index
    merged = merge_all(split, 2 * count)
    assert flat(merged) == flat(bins)
    assert {i: b.states for i, b in merged.items() if b.states} == {i: b.states for i, b in bins.items() if b.states}


def test_split_of_single_bin_and_merge_inverse():
    b = Bin(3)
    for k in range(50):
        b.states[k] = str(k)
    lo, hi = split_bin(b, 4)
    assert (lo.index, hi.index) == (6, 7)
    assert merge_bins(lo, hi).states == b.states


def test_estimated_size_is_close_to_the_encoded_size():
    from tstate.state.payload import encode_bin
    from tstate.types import StateCodec

    b = Bin(0)
    for k in range(500):
        b.states[f"key{k}"] = list(range(k % 20))
    size = len(encode_bin(b, StateCodec(list[int])))
    assert 0.5 * size <= b.estimated_size() <= 2 * size
    assert Bin(1).estimated_size() == 0


@given(st.lists(st.text(max_size=4), max_size=30), st.integers(0, 4))
def test_split_places_column_keys_by_the_column_hash(keys, log2):
    """A ``ts.col`` operator's keys land, after a split, in the bins column_hash gives."""
    from tstate.column_key import column_hash

    bins = 1 << log2
    parts: dict[int, Bin] = {}
    for k in keys:
        parts.setdefault(bin_of(column_hash(k), bins), Bin(bin_of(column_hash(k), bins))).states[k] = 1
    for b in split_all(parts, bins, column_hash).values():
        assert all(bin_of(column_hash(k), 2 * bins) == b.index for k in b.states)
