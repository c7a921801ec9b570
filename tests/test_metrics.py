"""Epoch latencies (tstate/metrics.py): a jump of the frontiers over many epochs costs
nothing proportional to its length (issue 26, finding 3: a far-future row made the
embedded engine mark every hourly epoch up to the year 9999, 50 s)."""

from __future__ import annotations

import time

from tstate.metrics import Metrics


def test_a_jump_over_a_trillion_epochs_is_one_entry() -> None:
    m = Metrics()
    t0 = time.perf_counter()
    for t, done in ((0, 0), (1, 0), (2, 1), (10**12, 2), (10**12 + 1, 10**12 + 1), (None, None)):
        m.inputs_at(t)
        m.outputs_at(done)
    assert time.perf_counter() - t0 < 0.5
    # epochs 0 and 1 closed one by one; 2 .. 10**12 - 1 closed at once: one entry, at 2
    assert [e for e, _ in m.latencies()] == [0, 1, 2, 10**12, 10**12 + 1]
    assert all(s >= 0 for _, s in m.latencies())


def test_latencies_pair_each_epoch_with_the_runs_that_closed_and_finished_it() -> None:
    m = Metrics()
    m.closed_at = {0: 1.0, 1: 2.0, 5: 3.0}
    m.done_at = {0: 1.5, 3: 4.0}
    m._closed_upto, m._done_upto = 7, 6
    # 0: closed 1.0, done 1.5; 1: closed 2.0, done (run from 0) 1.5 -> 0; 3: closed (run from 1) 2.0,
    # done 4.0; 5: closed 3.0, done (run from 3) 4.0
    assert m.latencies() == [(0, 0.5), (1, 0.0), (3, 2.0), (5, 1.0)]
