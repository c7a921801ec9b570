"""Snapshot processes (``mode="fork"``): the child's outcomes (result, error, lost),
reaping, and the coordinator's fork mode: same checkpoints as the other modes, a killed
child abandons its checkpoint (and the later ones) without committing anything, the run
goes on and the next checkpoint, written whole, restores correctly."""

from __future__ import annotations

import gc
import os
import signal
import time
import warnings

import pytest

import tstate as ts
from tstate.checkpoint import settings
from tstate.engine.checkpointing import forked
from tstate.engine.checkpointing.coordinator import CheckpointLostWarning, Checkpoints, Coordinator
from tstate.checkpoint.delta import apply_chain
from tstate.engine.checkpointing.forked import Snapshot, fork_available
from tstate.checkpoint.store import CheckpointStore
from tstate.errors import CheckpointError, ConfigurationError, StateTypeError

pytestmark = pytest.mark.skipif(not fork_available(), reason="no safe fork on this platform")


def reaped(pid: int) -> bool:
    """``pid`` is no child of ours any more (not running, not a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def wait_done(s: Snapshot, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not s.poll():
        assert time.monotonic() < deadline, "snapshot process did not finish"
        time.sleep(0.005)


# ---------------------------------------------------------------- Snapshot itself


def test_result_large_report_and_reaping() -> None:
    big = {"files": [["op", i, True, f"data/x/{i}", i, "0" * 16] for i in range(20_000)]}  # >> a pipe buffer
    s = Snapshot.start(lambda: big)
    wait_done(s)  # poll() drains the pipe while the child writes
    assert s.result == big and s.error is None and s.lost is None
    assert s.seconds is not None and s.seconds >= 0
    assert reaped(s.pid)
    s2 = Snapshot.start(lambda: [1, 2])
    assert s2.wait(timeout=20) and s2.result == [1, 2] and reaped(s2.pid)


def test_errors_come_back_as_the_same_class() -> None:
    def bad() -> None:
        raise StateTypeError("operator 'op', key 3: state[0]: expected int, got str 'x'")

    s = Snapshot.start(bad)
    s.wait()
    assert isinstance(s.error, StateTypeError) and "key 3" in str(s.error) and s.lost is None
    s = Snapshot.start(lambda: 1 / 0)
    s.wait()
    assert type(s.error) is CheckpointError and "ZeroDivisionError" in str(s.error)
    s = Snapshot.start(lambda: object())  # not msgpack-encodable
    s.wait()
    assert type(s.error) is CheckpointError and "unencodable" in str(s.error)


def test_killed_or_exiting_child_is_lost() -> None:
    s = Snapshot.start(lambda: time.sleep(30))
    assert not s.poll() and not s.done  # poll never blocks
    os.kill(s.pid, signal.SIGKILL)
    wait_done(s)
    assert s.lost is not None and "SIGKILL" in s.lost and s.result is None and s.error is None
    assert reaped(s.pid)
    s = Snapshot.start(lambda: os._exit(3))
    s.wait()
    assert s.lost is not None and "status 3" in s.lost
    s = Snapshot.start(lambda: time.sleep(30))
    assert not s.wait(timeout=0.05)
    s.kill()
    assert s.done and s.lost is not None and reaped(s.pid)


def test_dropped_snapshot_is_killed_and_reaped() -> None:
    s = Snapshot.start(lambda: time.sleep(30))
    pid = s.pid
    del s
    gc.collect()
    assert reaped(pid)


# ---------------------------------------------------------------- modes


def test_modes_are_validated(tmp_path, monkeypatch) -> None:
    with pytest.raises(ConfigurationError, match="'async', 'fork', 'thread', 'sync'"):
        Checkpoints(str(tmp_path), mode="background")
    flow, _, _ = build([[(1, 1)]])
    assert flow.start(checkpoint=Checkpoints(str(tmp_path), mode="async")).coordinator.mode == "async"
    flow, _, _ = build([[(1, 1)]])
    assert flow.start(checkpoint=Checkpoints(str(tmp_path), mode="fork")).coordinator.mode == "fork"
    monkeypatch.setattr(forked, "fork_available", lambda: False)
    monkeypatch.setattr(settings, "fork_available", lambda: False)
    with pytest.raises(ConfigurationError, match="fork safely"):
        Checkpoints(str(tmp_path), mode="fork")
    flow, _, _ = build([[(1, 1)]])
    assert flow.start(checkpoint=Checkpoints(str(tmp_path), mode="async")).coordinator.mode == "async"


# ---------------------------------------------------------------- the coordinator in fork mode


def build(batches, bins=8):
    flow = ts.Dataflow("forked")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=list[int], bins=bins, name="acc")
    def acc(values, r, ctx):
        values.append(r[1])
        if r[1] == 0:
            ctx.clear()
        else:
            ctx.notify_at(ctx.time + 2)

    @acc.on_notify
    def report(values, t, ctx):
        ctx.emit((ctx.key, t, sum(values)))

    out = acc.collect()
    return flow, acc, out


BATCHES = [[(k % 13, (k * 7 + t) % 5) for k in range(t, t + 9)] for t in range(24)]


def expected_state() -> dict:
    """The final state of a run without checkpoints."""
    flow, op, _ = build(BATCHES)
    flow.run(workers=1)
    return flow.state(op, format="dict")


def stored_state(directory) -> tuple[dict, object]:
    store = CheckpointStore(directory, readonly=True)
    m = store.latest()
    out = {}
    for b in m.operators["acc"].chains:
        out.update(apply_chain(store.read_chain(m, "acc", b), None)["states"])
    return out, m


def test_fork_mode_writes_what_sync_mode_writes(tmp_path, monkeypatch) -> None:
    from tstate.engine.checkpointing import slices

    # async: each job encoded at the first step after its capture, so that no checkpoint is
    # skipped on a loaded machine (the times would then differ; tests/checkpoint/test_slices.py)
    monkeypatch.setattr(slices.Pacer, "budget", lambda self, job, since, interval, elapsed=None: float("inf"))
    # ... and none skipped while the previous one's files are still being written
    from tstate.engine.checkpointing.async_capture import AsyncCapture

    monkeypatch.setattr(AsyncCapture, "busy", lambda self: self.active is not None)
    results = {}
    for mode in ("sync", "async", "thread", "fork"):
        d = tmp_path / mode
        flow, op, out = build(BATCHES)
        flow.run(workers=2, checkpoint=Checkpoints(str(d), every_epochs=3, mode=mode, retain=50))
        coord = flow.execution.coordinator
        assert coord.mode == mode and coord.committed and not coord.uncommitted
        store = CheckpointStore(str(d), readonly=True)
        ms = store.manifests()
        chains = [
            {b: [(r.kind, store.read(r)) for r in c] for b, c in m.operators["acc"].chains.items()} for m in ms
        ]
        results[mode] = (sorted(out.items), [m.time for m in ms], chains, flow.state(op, format="dict"))
        if mode == "fork":
            assert len(coord.fork_seconds) == len(coord.capture_seconds) == len(ms)
            assert len(coord.snapshot_seconds) == len(ms) and not coord.lost
    # byte-identical data files, checkpoint by checkpoint
    assert results["fork"] == results["sync"] == results["thread"] == results["async"]
    assert results["fork"][3] == expected_state()


def slow_children(monkeypatch, seconds: float) -> None:
    """Make every snapshot process take at least ``seconds`` (per bin it writes)."""
    from tstate.checkpoint import delta

    real = delta.encode_change

    def slow(*a, **kw):
        time.sleep(seconds)
        return real(*a, **kw)

    monkeypatch.setattr(delta, "encode_change", slow)


def running_children(coord: Coordinator) -> list[int]:
    return [p.snapshot.pid for p in coord.uncommitted if p.snapshot is not None and not p.snapshot.done]


def test_killed_child_loses_its_checkpoints_and_the_run_goes_on(tmp_path, monkeypatch) -> None:
    slow_children(monkeypatch, 0.05)
    flow, op, out = build(BATCHES, bins=4)
    ex = flow.start(2, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="fork", retain=50))
    coord = ex.coordinator
    killed: list[int] = []
    in_flight: list[int] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while ex.step():
            pids = running_children(coord)
            # once two checkpoints are in flight, kill the older child: both are lost
            if not killed and len(pids) >= 2:
                os.kill(pids[0], signal.SIGKILL)
                killed = pids
                in_flight = [p.time for p in coord.uncommitted if p.snapshot.pid in pids]
        ex.run()
    assert killed, "never had two snapshot processes at once"
    lost = [w for w in caught if issubclass(w.category, CheckpointLostWarning)]
    assert len(lost) == 1 and "SIGKILL" in str(lost[0].message) and "captured after it" in str(lost[0].message)
    assert len(coord.lost) == 1
    lost_time = coord.lost[0][0]
    assert lost_time == in_flight[0] and not set(in_flight) & set(coord.committed)
    assert max(coord.committed) > max(in_flight)  # a later checkpoint (written whole) committed
    assert all(reaped(pid) for pid in killed)
    # nothing committed is corrupt, and the latest holds the final state
    store = CheckpointStore(str(tmp_path), readonly=True)
    for m in store.manifests():
        assert store.verify(m) == [] and m.time != lost_time
    state, m = stored_state(str(tmp_path))
    assert state == expected_state() == flow.state(op, format="dict")
    # the checkpoint after the loss carries nothing over: every chain starts with a snapshot
    first_after = min(t for t in coord.committed if t > lost_time)
    m_after = next(m for m in store.manifests() if m.time == first_after)
    assert all(c[0].kind == "snap" for c in m_after.operators["acc"].chains.values())
    # no file of a lost checkpoint is referenced, and a restore from the directory works
    flow2, op2, out2 = build(BATCHES, bins=4)
    flow2.run(workers=3, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="fork"))
    assert flow2.execution.restored is not None
    assert flow2.state(op2, format="dict") == expected_state()


def test_abort_kills_and_reaps_children(tmp_path, monkeypatch) -> None:
    slow_children(monkeypatch, 0.5)
    flow, op, out = build(BATCHES)
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="fork"))
    coord = ex.coordinator
    pids: list[int] = []
    while ex.step() and not pids:
        pids = running_children(coord)
    assert pids
    coord.abort()
    assert all(reaped(pid) for pid in pids)
    assert CheckpointStore(str(tmp_path), readonly=True).latest() is None


def test_a_state_type_error_in_the_child_fails_the_run_like_sync(tmp_path) -> None:
    for mode in ("sync", "fork"):
        flow = ts.Dataflow("bad")
        src = flow.source(ts.io.from_batches(lambda: [(0, [(1, "x")]), (1, [(2, 3)])]), name="src")
        flow.stateful(src, key=lambda r: r[0], state=list[int], bins=4, name="acc")(
            lambda values, r, ctx: values.append(r[1])
        )
        with pytest.raises(StateTypeError, match=r"operator 'acc', key 1"):
            flow.run(checkpoint=Checkpoints(str(tmp_path / mode), every_epochs=1, mode=mode))
        assert CheckpointStore(str(tmp_path / mode), readonly=True).latest() is None
