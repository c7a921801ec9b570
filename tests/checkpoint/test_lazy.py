"""Lazy restore (tstate.engine.checkpointing.lazy): what a resumed run decodes, when, and that
everything that touches a bin decodes it first."""

from __future__ import annotations

import shutil
from typing import Any, Iterator
from unittest import mock

import pytest
from attrs import define

import tstate as ts
from tstate.checkpoint.settings import Checkpoints
from tstate.engine.checkpointing.lazy import RestorePacer, bin_timer_times
from tstate.checkpoint.store import CheckpointStore
from tstate.errors import CheckpointError, ConfigurationError, SchemaMismatchError
from tstate.keys import KeyRouter

BINS = 64
KEYS = 400


def batches() -> list[tuple[int, list[tuple[int, int]]]]:
    """Epoch 0 gives every key a state (all bins); later epochs touch two keys, and key 5
    sets a timer at epoch 9."""
    return [(0, [(k, k) for k in range(KEYS)]), (1, []), (2, []), (3, [(7, 1)]), (4, [(5, 1000)]), (5, [(7, 1)]), (6, [])]


def build(state: Any = int, add: Any = None) -> tuple[ts.Dataflow, ts.Stream, ts.Collected]:
    flow = ts.Dataflow("lazy")
    src = flow.source(ts.io.from_batches(batches), name="src")

    def plain(total: int, r: tuple[int, int], ctx: ts.Context) -> int:
        if r[1] == 1000:
            ctx.notify_at(9)
        return total + r[1]

    op = flow.stateful(src, key=lambda r: r[0], state=state, bins=BINS, name="sums")(add or plain)

    @op.on_notify
    def fired(total: Any, time: int, ctx: ts.Context) -> None:
        ctx.emit((ctx.key, time, total))

    return flow, op, op.collect()


def expected_state() -> dict[int, int]:
    state = {k: k for k in range(KEYS)}
    state[7] += 2
    state[5] += 1000
    return state


def bin_of(key: Any) -> int:
    return KeyRouter(BINS).bin(key)


#: the bins holding keys (the others have no chain)
HELD = len({KeyRouter(BINS).bin(k) for k in range(KEYS)})


def checkpoint_at_2(directory: str) -> None:
    """A run stopped right after its checkpoint at epoch 2 committed (every key in it)."""
    flow, op, out = build()
    ex = flow.start(2, checkpoint=Checkpoints(directory, every_epochs=2, mode="sync"))
    while not ex.coordinator.committed:
        assert ex.step()
    ex.coordinator.abort()


@pytest.fixture
def no_background() -> Iterator[None]:
    """Bins are decoded only when something needs them."""
    with mock.patch.object(RestorePacer, "budget", lambda self, since, busy: 0.0):
        yield


def stateful(ex: Any, op: ts.Stream) -> list[Any]:
    return [ex.operators[w][op.node] for w in range(ex.workers)]


def test_resumes_before_decoding_and_decodes_what_records_and_timers_need(tmp_path: Any, no_background: None) -> None:
    checkpoint_at_2(str(tmp_path))
    flow, op, out = build()
    ex = flow.start(3, checkpoint=Checkpoints(str(tmp_path), every_epochs=100))
    restored, lazy = ex.restored, ex.coordinator.lazy
    assert restored.time == 2 and restored.lazy == HELD == lazy.left
    assert all(not rt.bins for rt in stateful(ex, op))  # nothing decoded yet
    ex.step_while(lambda: not out.items)
    # epochs 3-5 touched keys 7 and 5; the timer of key 5 then fired at 9
    assert out.items == [(9, (5, 9, 1005))]
    assert lazy.on_demand == 2 and lazy.left == HELD - 2
    decoded = {b for rt in stateful(ex, op) for b in rt.bins}
    assert decoded == {bin_of(7), bin_of(5)}
    ex.run()
    assert flow.state(op, format="dict") == expected_state()  # a query decodes the rest
    assert lazy.done and all(rt.held.lazy is None for rt in stateful(ex, op))


def test_a_pending_timer_of_an_undecoded_bin_holds_the_frontier_and_fires(tmp_path: Any, no_background: None) -> None:
    d = str(tmp_path)
    flow, op, out = build()
    ex = flow.start(2, checkpoint=Checkpoints(d, every_epochs=6, mode="sync"))
    while not ex.coordinator.committed:  # the checkpoint at 6 holds key 5's timer at 9
        assert ex.step()
    ex.coordinator.abort()
    flow, op, out = build()
    ex = flow.start(1, checkpoint=Checkpoints(d, every_epochs=100))
    assert ex.restored.time == 6
    rt = stateful(ex, op)[0]
    assert bin_of(5) in rt.held.lazy and 9 in rt.timer_times  # known without decoding the bin
    assert not rt.bins
    ex.run()
    assert out.items == [(9, (5, 9, 1005))]  # decoded by its timer, with its restored state
    assert set(rt.bins) == {bin_of(5)}


def test_a_checkpoint_before_every_bin_is_decoded_is_complete(tmp_path: Any, no_background: None) -> None:
    d = str(tmp_path)
    checkpoint_at_2(d)
    store = CheckpointStore(d, readonly=True)
    first = store.latest()
    flow, op, out = build()
    ex = flow.start(2, checkpoint=Checkpoints(d, every_epochs=4, mode="sync", retain=1))
    while len(ex.coordinator.committed) < 1:  # the checkpoint at 4, on bins 7 and 5 decoded
        assert ex.step()
    assert ex.coordinator.lazy.left == HELD - 1  # (key 5's record at 4 is after the cut)
    ex.coordinator.abort()
    second = CheckpointStore(d, readonly=True).latest()
    assert second.time == 4 and second.id > first.id
    for b, chain in first.operators["sums"].chains.items():
        if b != bin_of(7):  # untouched: the very same files, kept by garbage collection
            assert second.chain("sums", b) == chain
    assert CheckpointStore(d, readonly=True).verify(second) == []
    for restore in ("eager", "lazy"):
        copy = str(tmp_path / restore)
        shutil.copytree(d, copy)
        flow, op, out = build()
        ex = flow.start(3, checkpoint=Checkpoints(copy, every_epochs=100, restore=restore))
        assert ex.restored.time == 4
        ex.run()
        assert flow.state(op, format="dict") == expected_state()
        assert out.items == [(9, (5, 9, 1005))]


def test_migration_point_reads_and_clear_decode_the_bin_first(tmp_path: Any, no_background: None) -> None:
    checkpoint_at_2(str(tmp_path))

    def add(total: int, r: tuple[int, int], ctx: ts.Context) -> Any:
        if r == (7, 1) and ctx.time == 5:
            ctx.clear()  # key 7's second record clears it
            return None
        if r[1] == 1000:
            ctx.notify_at(9)
        return total + r[1]

    flow, op, out = build(add=add)
    ex = flow.start(2, max_workers=4, checkpoint=Checkpoints(str(tmp_path), every_epochs=100))
    assert flow.read(op, 300) == 300 and ex.coordinator.lazy.on_demand == 1  # a point read decodes its bin
    ex.rescale(4, at=3)  # at 3 half the bins move, undecoded ones too
    ex.run()
    assert ex.metrics.moves and ex.metrics.bytes_moved > 0
    want = expected_state()
    del want[7]
    assert flow.state(op, format="dict") == want
    assert out.items == [(9, (5, 9, 1005))]


def test_eager_restore_and_the_option(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="restore must be one of 'lazy', 'eager', got 'later'"):
        Checkpoints(str(tmp_path), restore="later")
    assert Checkpoints(str(tmp_path)).restore == "lazy"
    checkpoint_at_2(str(tmp_path))
    flow, op, out = build()
    ex = flow.start(2, checkpoint=Checkpoints(str(tmp_path), restore="eager"))
    assert ex.restored.lazy == 0 and ex.coordinator.lazy is None
    assert sum(len(rt.bins) for rt in stateful(ex, op)) == HELD


@define
class V1:
    total: int = 0


@define
class V2:
    total: int = 0
    count: int = 0  # added with a default: compatible


def test_a_changed_schema_is_restored_eagerly_and_rewritten(tmp_path: Any) -> None:
    def add(s: Any, r: tuple[int, int], ctx: ts.Context) -> None:
        s.total += r[1]

    flow, op, out = build(state=V1, add=add)
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path), every_epochs=2, mode="sync"))
    while not ex.coordinator.committed:
        assert ex.step()
    ex.coordinator.abort()
    flow, op, out = build(state=V2, add=add)
    ex = flow.start(1, checkpoint=Checkpoints(str(tmp_path)))
    rt = stateful(ex, op)[0]
    assert ex.restored.lazy == 0 and len(rt.bins) == HELD and all(b.full for b in rt.bins.values())


def test_a_lost_snapshot_process_decodes_every_bin_before_the_whole_checkpoint(tmp_path: Any, no_background: None) -> None:
    """Fork mode: after a lost snapshot process the next checkpoint writes every bin whole
    on no earlier one, so the undecoded bins are decoded first (else they would vanish
    from it)."""
    from tstate.engine.checkpointing import forked

    if not forked.fork_available():
        pytest.skip("no safe fork on this platform")
    d = str(tmp_path)
    checkpoint_at_2(d)
    start = forked.Snapshot.start
    calls = []

    def failing_once(job: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise CheckpointError("cannot fork (test)")
        return start(job)

    flow, op, out = build()
    with mock.patch.object(forked.Snapshot, "start", staticmethod(failing_once)), pytest.warns(Warning, match="abandoned"):
        ex = flow.start(2, checkpoint=Checkpoints(d, every_epochs=2, mode="fork", retain=1))
        ex.run()
    lost, committed = [t for t, _why in ex.coordinator.lost], ex.coordinator.committed
    assert len(lost) == 1 and committed and committed[0] > lost[0]
    assert ex.coordinator.lazy.done
    flow, op, out = build()
    ex = flow.start(1, checkpoint=Checkpoints(d, restore="eager"))
    assert ex.restored.time == committed[-1]
    ex.run()
    assert flow.state(op, format="dict") == expected_state()


def test_idle_steps_decode_the_rest_in_the_background(tmp_path: Any) -> None:
    checkpoint_at_2(str(tmp_path))
    flow, op, out = build()
    ex = flow.start(2, checkpoint=Checkpoints(str(tmp_path)))
    lazy = ex.coordinator.lazy
    for _ in range(10 * BINS):  # no operator activated in between: idle, whole slices
        if lazy.done:
            break
        ex.coordinator.after_step()
    assert lazy.done and lazy.background == HELD and lazy.on_demand == 0
    assert sum(len(rt.bins) for rt in stateful(ex, op)) == HELD
    ex.run()
    assert flow.state(op, format="dict") == expected_state()


def test_busy_steps_take_only_a_share_of_the_time() -> None:
    p = RestorePacer(share=0.2, max_slice=0.005)
    assert p.budget(0.0, busy=True) == 0.0  # the first steps go to processing
    p.spent = 0.002
    assert p.budget(0.010, busy=True) == 0.0 and p.budget(0.020, busy=True) == pytest.approx(0.002)


def test_bin_timer_times_reads_deltas_and_refuses_another_schema() -> None:
    from tstate.checkpoint.delta import encode_delta
    from tstate.progress.timestamp import Product
    from tstate.types import StateCodec

    codec = StateCodec(list[int])
    data = encode_delta(3, [("a", [1])], ["b"], {Product(2, 1): ["a"], 8: ["a", "c"]}, codec.fingerprint)
    assert bin_timer_times(data, codec, codec.fingerprint) == (3, [Product(2, 1), 8])
    with pytest.raises(SchemaMismatchError):
        bin_timer_times(data, codec, "0" * 16)
