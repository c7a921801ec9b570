"""SIGKILL at random instants while a process checkpoints its RocksDB store as files
(flushing, hard-linking, uploading, committing, collecting garbage): the newest usable
checkpoint left in the store verifies, and the store restored from its files holds
exactly what the uninterrupted run held at that checkpoint's time."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("rocksdict", reason="the RocksDB keyed-state store needs rocksdict (the rocksdb extra)")

from tstate.checkpoint.sst_files import restore_worker, worker_files  # noqa: E402
from tstate.checkpoint.store import CheckpointStore  # noqa: E402
from tstate.types import StateCodec  # noqa: E402

CODEC = StateCodec(int)
EPOCHS = 40

CHILD = r"""
import os, sys
sys.path.insert(0, {root!r})
from tstate.checkpoint.sst_files import FileCheckpoints
from tstate.checkpoint.store import CheckpointStore
from tstate.state.rocksdb.worker import WorkerStore
from tstate.types import StateCodec
from tests.checkpoint.test_sst_crash import changes, EPOCHS
d = sys.argv[1]
ws = WorkerStore.create(os.path.join(d, "db"))
s = ws.store("op", StateCodec(int))
store = CheckpointStore(os.path.join(d, "ck"), retain=2, gc_scan_every=3)
fc = FileCheckpoints(store, os.path.join(d, "scratch"))
print("ready", flush=True)
for e in range(1, EPOCHS + 1):
    for b, k, v in changes(e):
        if v is None:
            s.delete(b, k)
        else:
            s.put(b, k, v)
    ws.end_epoch()
    fc.capture(store.begin(e), {{0: ws}}, commit=True)  # uploads and commits on its thread
fc.close()
print("done", flush=True)
"""


def changes(e: int) -> list:
    """Epoch ``e``'s changes: ``(bin, key, value or None to delete)``."""
    rng = random.Random(e)
    return [(k % 8, k, None if rng.random() < 0.1 else e * 1000 + j) for j, k in enumerate(rng.sample(range(3000), 300))]


def model_at(t: int) -> dict:
    state: dict = {}
    for e in range(1, t + 1):
        for b, k, v in changes(e):
            if v is None:
                state.pop((b, k), None)
            else:
                state[b, k] = v
    return state


@pytest.mark.parametrize("seed", range(4))
def test_killed_while_checkpointing_files_recovers_exactly(tmp_path, seed):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=root))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(random.Random(seed).uniform(0.05, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = CheckpointStore(str(tmp_path / "ck"), fsync=False)
    m = store.latest()
    if m is None:  # killed before the first commit
        return
    assert store.verify(m) == []
    back = restore_worker(store, worker_files(m)[0], str(tmp_path / "back"))
    s = back.store("op", CODEC)
    got = {(b, k): v for b in range(8) for k, v in s.items(b)}
    back.close()
    assert got == model_at(m.time)
