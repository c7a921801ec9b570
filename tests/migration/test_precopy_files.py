"""Pre-copy migration of RocksDB state (``strategy="precopy"`` with
``state=ts.RocksDB(...)``, tstate.engine.precopy_files): the bin's files from the
latest committed checkpoint are preloaded into the new owner's database and only the
keys changed since travel at the hand-over.  The output and the final state equal the
sequential reference for random inputs, worker counts, move schedules, checkpoint
cadences and modes; at low churn the hand-overs carry a small fraction of the bins."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tstate as ts
from tests.migration.test_migration import BINS, reference
from tests.migration.test_precopy import _MADE as _CHECKPOINTS_MADE
from tests.migration.test_precopy import _big, _node, checkpoints, epoch_data, pacing, run, schedule
from tstate.migration.commands import Rescale


_MADE: list[str] = []  # the directories this module's examples made


@pytest.fixture(autouse=True, scope="module")
def _remove_made_directories():
    """Hypothesis runs many examples per test: each makes directories, all removed when
    the module ends (a function-scoped fixture would span the examples)."""
    yield
    for made in (_MADE, _CHECKPOINTS_MADE):  # (``checkpoints`` is test_precopy's)
        while made:
            shutil.rmtree(made.pop(), ignore_errors=True)


def rocks() -> ts.RocksDB:
    _MADE.append(tempfile.mkdtemp(prefix="precopy-rocks-"))
    return ts.RocksDB(_MADE[-1])


@pytest.mark.parametrize("kind", ["count", "lists", "clear"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=epoch_data, workers=st.integers(1, 6), sched=schedule, every=st.integers(1, 3),
    mode=st.sampled_from(["async", "sync"]), pace=pacing, steps=st.integers(1, 3), settle=st.booleans(),
)
def test_planned_precopy_of_files_is_invisible(kind, data, workers, sched, every, mode, pace, steps, settle):
    out, state, ex = run(
        kind, data, workers, ckpt=checkpoints(every, mode), reconfigure=sched, window=pace[0], pace=pace[1],
        steps=steps, settle=settle, state=rocks(),
    )
    try:
        assert (out, state) == reference(kind, data)
        st_ = ex.precopy.stats
        assert st_.handovers + st_.fallbacks <= len(ex.metrics.moves)
        assert "RocksDB state" not in st_.fallback_reasons
        assert not ex.precopy.pending and not ex.precopy.files._open
    finally:
        ex.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_files_hand_over_only_the_changes_since_the_checkpoint(mode):
    """3,000 keys, a few changed per epoch, a checkpoint every 2 epochs: every moved
    bin is preloaded from the checkpoint's files and handed over as its changed keys,
    a small fraction of the bytes shipping the bins' files whole moves; nothing falls
    back, the result is exact (timers and cleared keys included: "clear")."""
    data = _big(40, 3000, 12, clear_every=4)
    kind = "clear"
    want = reference(kind, data)
    whole = run(kind, data, 2, ckpt=checkpoints(2, mode), reconfigure=[(20, Rescale(4, strategy="batched"))], state=rocks())
    pre = run(kind, data, 2, ckpt=checkpoints(2, mode), reconfigure=[(20, Rescale(4, strategy="precopy"))], steps=2,
              settle=True, state=rocks())
    try:
        assert whole[:2] == want and pre[:2] == want
        st_ = pre[2].precopy.stats
        moved = len(whole[2].metrics.moves)
        assert moved == BINS // 2 and st_.handovers == moved and st_.fallbacks == 0, st_
        assert st_.preloaded >= moved and st_.preload_bytes > 0
        whole_bytes = whole[2].metrics.bytes_moved  # (the bins' SST exports)
        assert pre[2].metrics.bytes_moved == st_.delta_bytes
        assert st_.delta_bytes < 0.2 * whole_bytes, (st_.delta_bytes, whole_bytes)
        assert all(b.store is not None for w in range(4) for b in pre[2].operators[w][_node(pre[2])].bins.values())
    finally:
        whole[2].close()
        pre[2].close()
