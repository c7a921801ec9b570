"""Moving bins as SST files (tstate.state.rocksdb.moving): a bin's states and timers
arrive whole, the source keeps nothing of it, a damaged file changes nothing at the
new owner; in the engine, a rescale with state=RocksDB moves files (not encoded bins)
and gives the plain-dict model's output and state for every strategy (hypothesis)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tests.state.rocksdb.test_engine import build, data, reference
from tstate.errors import StateStoreError
from tstate.state.rocksdb import moving
from tstate.state.rocksdb.keyed_bin import RocksBin
from tstate.state.rocksdb.store import KeyedStore
from tstate.state.rocksdb.worker import WorkerStore
from tstate.types import StateCodec

CODEC = StateCodec(dict[str, list[int]])


def test_a_bin_moves_whole_and_leaves_nothing(tmp_path):
    a, b = WorkerStore.create(str(tmp_path / "a")), WorkerStore.create(str(tmp_path / "b"))
    src, dst = a.store("op", CODEC), b.store("op", CODEC)
    rb = RocksBin(3, src)
    for k in range(100):
        rb.put(k, {"x": [k]}, track=True)
    rb.timers[9] = {5: None}
    other = RocksBin(4, src)
    other.put("stay", {"y": [1]}, track=False)
    other.write_back()
    dst.put(3, "stale", {"z": []})  # what the new owner held of the bin is replaced
    moved, size = moving.ship_bin(rb, src, dst, str(tmp_path / "moves"))
    assert dict(moved.items()) == {k: {"x": [k]} for k in range(100)}
    assert moved.timers == {9: {5: None}} and size > 0
    assert src.count(3) == 0 and dict(src.items(4)) == {"stay": {"y": [1]}}
    assert os.listdir(tmp_path / "moves") == []  # the file went into the new owner's database
    a.close()
    b.close()


def test_a_damaged_export_changes_nothing_at_the_new_owner(tmp_path, monkeypatch):
    a, b = WorkerStore.create(str(tmp_path / "a")), WorkerStore.create(str(tmp_path / "b"))
    src, dst = a.store("op", CODEC), b.store("op", CODEC)
    rb = RocksBin(1, src)
    rb.put("k", {"x": [1]}, track=False)
    dst.put(1, "mine", {"x": [2]})
    b.end_epoch()
    real = KeyedStore.export_bin

    def damaged(self, index, dest):
        exp = real(self, index, dest)
        with open(dest, "r+b") as f:
            f.seek(exp.size // 2)
            f.write(b"\xff\xff\xff")
        return exp

    monkeypatch.setattr(KeyedStore, "export_bin", damaged)
    with pytest.raises(StateStoreError, match="corrupt"):
        moving.ship_bin(rb, src, dst, str(tmp_path / "moves"))
    assert dict(dst.items(1)) == {"mine": {"x": [2]}}
    assert dict(src.items(1)) == {"k": {"x": [1]}}  # nothing lost at the source either
    a.close()
    b.close()


def _run(batches, w1, w2, strategy, steps, ck_dir, db_dir):
    flow, op, out = build(batches)
    ck = ts.Checkpoints(ck_dir, every_epochs=1) if strategy == "precopy" else None
    ex = flow.start(w1, max_workers=6, checkpoint=ck, state=ts.RocksDB(db_dir, cache_bytes=4096))
    for _ in range(steps):
        ex.step()
    if not ex.finished:
        ex.rescale(w2, strategy=strategy)
    ex.run()
    got = flow.state(op, format="dict")
    ex.close()
    return sorted(out.items), {k: s for k, s in got.items() if s}


@settings(max_examples=8, deadline=None)
@given(batches=data, w1=st.integers(1, 3), w2=st.integers(1, 4),
       strategy=st.sampled_from(["all-at-once", "fluid", "batched", "precopy"]), steps=st.integers(0, 6))
def test_rescaling_matches_the_model(tmp_path_factory, batches, w1, w2, strategy, steps):
    exp_out, exp_state = reference(batches)
    got = _run(batches, w1, w2, strategy, steps, str(tmp_path_factory.mktemp("ck")), str(tmp_path_factory.mktemp("db")))
    assert got == (exp_out, exp_state)


def test_rescaling_moves_files(tmp_path, monkeypatch):
    sizes = []
    real = moving.ship_bin

    def counting(*args, **kw):
        out = real(*args, **kw)
        sizes.append(out[1])
        return out

    monkeypatch.setattr(moving, "ship_bin", counting)
    batches = [[(k % 10, k + 1) for k in range(t, t + 5)] for t in range(8)]
    got = _run(batches, 1, 3, "all-at-once", 3, str(tmp_path / "ck"), str(tmp_path / "db"))
    assert got == reference(batches)
    assert sizes and any(sizes)  # bins with state moved as SST files


@settings(max_examples=15, deadline=None)
@given(keys=st.integers(1, 300), churn=st.lists(st.tuples(st.integers(0, 320), st.integers(0, 5)), max_size=30),
       small=st.sampled_from([0, 256]))
def test_precopy_hands_over_only_the_changes(tmp_path_factory, keys, churn, small):
    """(``small``: the hand-over as an SST file (0) or as records in one message)"""
    root = str(tmp_path_factory.mktemp("pre"))
    a, b = WorkerStore.create(os.path.join(root, "a")), WorkerStore.create(os.path.join(root, "b"))
    src, dst = a.store("op", CODEC), b.store("op", CODEC)
    model = {k: {"v": [k]} for k in range(keys)}
    for k, s in model.items():
        src.put(2, k, s)
    dst.put(2, "stale", {"v": []})
    ck = a.checkpoint(os.path.join(root, "ck"))  # the latest checkpoint's files
    copy = WorkerStore.restore(ck.dir, os.path.join(root, "copy"))
    full = moving.preload(copy.store("op", CODEC), dst, 2, os.path.join(root, "moves"))
    rb = RocksBin(2, src)
    changed = set()
    for k, v in churn:  # after the checkpoint: v == 0 clears the key
        changed.add(k)
        if v == 0:
            rb.clear_key(k, track=False)
            model.pop(k, None)
        else:
            rb.put(k, {"v": [v]}, track=False)
            model[k] = {"v": [v]}
    old, moving.SMALL_HAND_OVER = moving.SMALL_HAND_OVER, small
    try:
        moved, size = moving.hand_over(rb, src, dst, changed, os.path.join(root, "moves"))
    finally:
        moving.SMALL_HAND_OVER = old
    assert dict(moved.items()) == model
    assert src.count(2) == 0
    assert size <= full or len(changed) > keys / 4 or small == 0
    copy.close()
    a.close()
    b.close()
