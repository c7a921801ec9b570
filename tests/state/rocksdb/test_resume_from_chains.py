"""A run with RocksDB state that resumed from encoded chains (a heap run's checkpoint)
checkpoints its bins as its databases' files, while the manifest still carries the
chains it resumed from (nothing rewrote them); restoring that checkpoint takes those
bins from the files only (tstate/engine/checkpointing/restore.py).  Before, a lazy
restore installed the old chains as undecoded bins too and decoded them between steps
over the bins the files had restored: the state went back to the first checkpoint's."""

from __future__ import annotations

import pytest

import tstate as ts
from tstate.checkpoint.store import CheckpointStore
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.engine.checkpointing.file_capture import BINS_KEY

pytest.importorskip("rocksdict", reason="the RocksDB state needs the rocksdb extra")

KEYS = 40
BATCHES = [[(k, t + 1) for k in range(KEYS)] for t in range(8)]


def build() -> tuple[ts.Dataflow, object, ts.Collected]:
    flow = ts.Dataflow("chains")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(BATCHES))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=int, bins=8)
    def total(s, r, ctx):  # type: ignore[no-untyped-def]
        ctx.notify_at(ctx.time + 1)
        return (s or 0) + r[1]

    @total.on_notify
    def report(s, time, ctx):  # type: ignore[no-untyped-def]
        ctx.emit((ctx.key, time, s))

    return flow, total, total.collect()


def expected() -> list:
    # the timer set at t fires at t + 1 after that time's records (values 1..8 at times 0..7)
    return sorted((t, (k, t, sum(range(1, min(t, 7) + 2)))) for t in range(1, 9) for k in range(KEYS))


def _leg(cfg: Checkpoints, workers: int, steps: int, state: object) -> tuple[list, float]:
    """Resume (or start) on ``workers``, take ``steps`` steps, commit what was captured
    and stop; its output and the time of the checkpoint it resumed from (0: none)."""
    flow, _op, out = build()
    ex = flow.start(workers, checkpoint=cfg, **({} if state is None else {"state": state}))
    start = ex.restored.time if ex.restored is not None else 0
    for _ in range(steps):
        ex.step()
    ex.coordinator.finish()
    ex.close()
    return list(out.items), start


@pytest.mark.parametrize("restore", ["lazy", "eager"])
def test_a_rocksdb_run_resumed_from_chains_restores_its_own_files(tmp_path, restore):  # type: ignore[no-untyped-def]
    cfg = Checkpoints(str(tmp_path / "ck"), every_epochs=1, mode="sync", restore=restore)
    out1, _ = _leg(cfg, 2, 3, None)  # heap state: encoded chains
    first = CheckpointStore(cfg.directory).latest()
    assert first is not None and first.operators["total"].chains
    out2, t1 = _leg(cfg, 3, 3, ts.RocksDB(str(tmp_path / "db1")))
    second = CheckpointStore(cfg.directory).latest()
    assert second is not None and second.time > t1 == first.time
    # the bins are in its databases' files; the chains it resumed from are still listed
    assert set(second.meta[BINS_KEY]["total"]) == {str(i) for i in range(8)}
    assert second.operators["total"].chains == first.operators["total"].chains
    flow3, op3, out3 = build()
    ex3 = flow3.start(2, checkpoint=cfg, state=ts.RocksDB(str(tmp_path / "db2")))
    t2 = ex3.restored.time
    assert t2 == second.time
    ex3.run()
    got = sorted(p for p in out1 if p[0] < t1) + sorted(p for p in out2 if p[0] < t2) + sorted(out3.items)
    assert sorted(got) == expected()
    assert flow3.state(op3, format="dict") == {k: 36 for k in range(KEYS)}
    ex3.close()
