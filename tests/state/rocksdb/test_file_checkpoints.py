"""A RocksDB run's checkpoints are its databases' files, not encoded bins
(:mod:`tstate.engine.checkpointing.file_capture`): the manifest lists each worker's SST
files (``meta["rocksdb"]``, attached under ``sst/``), holds no bin file of the RocksDB
operator, later checkpoints reference the files already uploaded, and a crash and
restart on another worker count restores from them (timers included)."""

from __future__ import annotations

import os
import time

import pytest

import tstate as ts
from tests.checkpoint.helpers import damage
from tstate.__main__ import main as cli
from tstate.checkpoint.sst_files import META_KEY, SST_DIR, worker_files
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.engine.checkpointing.file_capture import BINS_KEY
from tstate.errors import CheckpointError, CheckpointSkippedWarning

BATCHES = [[(k, t + 1) for k in range(40)] for t in range(6)]


def build():
    flow = ts.Dataflow("files")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(BATCHES))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int, bins=8)
    def total(s, r, ctx):
        ctx.notify_at(ctx.time + 1)
        return (s or 0) + r[1]

    @total.on_notify
    def report(s, time, ctx):
        ctx.emit((ctx.key, time, s))

    return flow, total, total.collect()


def expected():
    # the timer set at t fires at t + 1 after that time's records (values 1..6 at times 0..5)
    return sorted((t, (k, t, sum(range(1, min(t, 5) + 2)))) for t in range(1, 7) for k in range(40))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_checkpoints_are_files_and_restore_on_another_worker_count(tmp_path, mode):
    state = ts.RocksDB(str(tmp_path / "db"))
    cfg = Checkpoints(str(tmp_path / "ck"), every_epochs=1, mode=mode)
    flow, _op, out1 = build()
    ex = flow.start(2, checkpoint=cfg, state=state)
    for _ in range(5):
        ex.step()
        while ex.coordinator.files.cutting():  # (async: a checkpoint due meanwhile would be skipped)
            time.sleep(0.001)
    ex.coordinator.finish()  # (commit what is pending, then "crash")
    m = CheckpointStore(str(tmp_path / "ck")).latest()
    assert m is not None and m.id >= 2
    files = worker_files(m)
    assert sorted(files) == [0, 1] and all(wf.sst for wf in files.values())
    assert all(r.path.startswith(SST_DIR) for r in m.attached)
    assert not m.operators["total"].chains  # nothing encoded for the RocksDB operator
    assert set(m.meta[BINS_KEY]["total"]) == {str(i) for i in range(8)}
    if mode == "sync":  # (async may skip checkpoints: then fewer of them to reference files)
        assert ex.coordinator.files.files.referenced_files > 0  # unchanged SST files only referenced
    t_stop = m.time
    flow2, op2, out2 = build()
    ex2 = flow2.start(3, checkpoint=cfg, state=state)
    assert ex2.restored is not None and ex2.restored.time == t_stop
    ex2.run()
    got = sorted(p for p in out1.items if p[0] < t_stop) + sorted(out2.items)
    assert got == expected()
    assert flow2.state(op2, format="dict") == {k: 21 for k in range(40)}
    ex2.close()
    ex.close()


def test_files_need_the_rocksdb_setting_to_resume(tmp_path):
    cfg = Checkpoints(str(tmp_path / "ck"), every_epochs=1, mode="sync")
    flow, _op, _out = build()
    ex = flow.start(1, checkpoint=cfg, state=ts.RocksDB(str(tmp_path / "db")))
    for _ in range(3):
        ex.step()
    ex.coordinator.finish()
    assert META_KEY in CheckpointStore(str(tmp_path / "ck")).latest().meta
    flow2, _op2, _out2 = build()
    with pytest.raises(CheckpointError, match="state=ts.RocksDB"):
        flow2.start(1, checkpoint=cfg)
    ex.close()


def _crashed_run(tmp_path, steps: int = 5):
    """A 2-worker run checkpointing every epoch (sync), stopped after ``steps`` steps
    with what it captured committed; its output so far and its checkpoints' manifests."""
    cfg = Checkpoints(str(tmp_path / "ck"), every_epochs=1, mode="sync", retain=5)
    flow, _op, out = build()
    ex = flow.start(2, checkpoint=cfg, state=ts.RocksDB(str(tmp_path / "db1")))
    for _ in range(steps):
        ex.step()
    ex.coordinator.finish()
    store = CheckpointStore(str(tmp_path / "ck"))
    ms = [store.manifest(i) for i in store._manifest_ids()]
    ex.close()
    return cfg, list(out.items), sorted(ms, key=lambda m: m.id)


#: the damage tests.checkpoint.helpers.damage does for each case of these tests
_HOW = {"missing": "delete", "corrupt": "flip"}


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_bad_sst_file_of_an_engine_checkpoint_is_detected(tmp_path, how, capsys):
    """An SST file only the newest engine-made checkpoint holds, damaged: ``tstate
    checkpoints --verify`` names it and exits 1; the restart resumes from the previous
    checkpoint with a warning naming it, and its output completes the run exactly."""
    cfg, out1, ms = _crashed_run(tmp_path)
    assert len(ms) >= 2
    newest, previous = ms[-1], ms[-2]
    bad = next(r.path for r in newest.attached if r.path.endswith(".sst") and r not in previous.attached)
    damage(os.path.join(cfg.directory, *bad.split("/")), _HOW[how])
    assert cli(["checkpoints", cfg.directory, "--verify"]) == 1
    assert bad in capsys.readouterr().out
    flow2, op2, out2 = build()
    with pytest.warns(CheckpointSkippedWarning, match=bad):
        ex2 = flow2.start(3, checkpoint=cfg, state=ts.RocksDB(str(tmp_path / "db2")))
    assert ex2.restored is not None and ex2.restored.time == previous.time
    ex2.run()
    t_stop = previous.time
    got = sorted(p for p in out1 if p[0] < t_stop) + sorted(out2.items)
    assert got == expected()
    assert flow2.state(op2, format="dict") == {k: 21 for k in range(40)}
    ex2.close()


def test_a_bad_sst_file_every_checkpoint_holds_raises_listing_it(tmp_path):
    """An SST file every kept checkpoint references, corrupt: no checkpoint can be
    restored -- CheckpointError naming the file (nothing restored, the files kept)."""
    cfg, _out1, ms = _crashed_run(tmp_path)
    shared = set.intersection(*({r.path for r in m.attached if r.path.endswith(".sst")} for m in ms))
    assert shared
    bad = sorted(shared)[0]
    damage(os.path.join(cfg.directory, *bad.split("/")), "flip")
    flow2, _op2, _out2 = build()
    with pytest.raises(CheckpointError, match=bad):
        flow2.start(2, checkpoint=cfg, state=ts.RocksDB(str(tmp_path / "db2")))
    assert os.path.exists(os.path.join(cfg.directory, *bad.split("/")))
