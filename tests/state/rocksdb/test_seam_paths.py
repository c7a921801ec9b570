"""The whole-bin paths behind the storage seam (snapshot/delta encoding, hand-overs,
splits, fold_bins' whole bin) give a RocksBin's states -- resident or only stored,
with a cache small enough to evict -- exactly what they give for a heap Bin holding
the same states: compared against a heap bin built from a plain dict."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tstate.checkpoint.delta import encode_change
from tstate.migration.handover import encode_handover
from tstate.state.bin import Bin
from tstate.state.payload import decode_bin, encode_bin
from tstate.state.rocksdb.keyed_bin import RocksBin
from tstate.state.rocksdb.settings import RocksDB
from tstate.state.rocksdb.worker import WorkerStore
from tstate.state.split import split_bin
from tstate.types import StateCodec

keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
ops = st.lists(st.tuples(st.sampled_from(["put", "clear", "epoch"]), keys, st.integers(-5, 5)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(ops, st.sets(keys, max_size=5))
def test_whole_bin_paths_read_the_store_like_a_heap_bin(script: list[tuple[str, str, int]], moved: set[str]) -> None:
    codec = StateCodec(int)
    d = tempfile.mkdtemp()
    w = WorkerStore.create(d, RocksDB(d, cache_bytes=256))
    try:
        rb, hb, model = RocksBin(3, w.store("op", codec)), Bin(3), dict[str, int]()
        for op, k, v in script:
            if op == "put":
                rb.put(k, v, track=True), hb.put(k, v, track=True)
                model[k] = v
            elif op == "clear":
                rb.clear_key(k), hb.clear_key(k)
                model.pop(k, None)
            else:  # an epoch ends: the store bin writes back (nothing resident after)
                rb.write_back()
                w.end_epoch()
        assert dict(rb.items()) == dict(hb.items()) == model
        assert decode_bin(encode_bin(rb, codec), codec).states == model
        assert encode_change(rb, codec, snapshot=False) == encode_change(hb, codec, snapshot=False)
        assert encode_handover(rb, moved, codec) == encode_handover(hb, moved, codec)
        r_lo, r_hi = split_bin(rb, 8)
        h_lo, h_hi = split_bin(hb, 8)
        assert (r_lo.states, r_hi.states) == (h_lo.states, h_hi.states)
        whole = rb.all_resident()
        assert whole == model
        whole["zz"] = 9  # fold_bins changes the whole bin in place: written back at the epoch's end
        rb.write_back()
        w.end_epoch()
        assert dict(rb.items()) == {**model, "zz": 9}
    finally:
        w.close()
