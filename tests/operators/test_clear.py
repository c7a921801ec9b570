"""``ctx.clear()`` frees what the key held: memory follows live state, and so do
checkpoints (no tombstones for keys no checkpoint holds, no files for emptied bins).
Restores stay exact (a hypothesis test against a dict model, crashing anywhere)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.engine.checkpointing.forked import fork_available
from tstate.checkpoint.store import CheckpointStore
from tstate.operators.stateful import StatefulRuntime

MODES = ["thread", "sync"] + (["fork"] if fork_available() else [])


def churn(epochs: int, per_epoch: int, clear: bool) -> tuple[ts.Dataflow, Any]:
    """Every record is a new key; with ``clear`` its state is dropped at once."""
    flow = ts.Dataflow("churn")
    src = flow.source(
        ts.io.from_batches(lambda: [(t, [(t, i) for i in range(per_epoch)]) for t in range(epochs)]), name="src"
    )

    @flow.stateful(src, key=lambda r: r, state=int, bins=16)
    def seen(n: int, r: Any, ctx: ts.Context) -> int:
        if clear:
            ctx.clear()
        return n + 1

    return flow, seen


def stateful_ops(ex: Any) -> list[StatefulRuntime]:
    return [op for ops in ex.operators for op in ops if isinstance(op, StatefulRuntime)]


def test_clear_drops_the_key_from_every_runtime_map() -> None:
    flow, _ = churn(epochs=4, per_epoch=2000, clear=True)
    ex = flow.start(2)
    ex.run()
    for op in stateful_ops(ex):
        assert sum(len(b.states) for b in op.bins.values()) == 0
        assert op.held.memo == {}  # the key -> bin memo (shared by the workers) keeps no cleared key
        # nothing accumulates for a checkpoint that will never come
        assert all(not b.removed and not b.dirty for b in op.bins.values())


def test_clear_with_checkpoints_writes_no_tombstones_for_keys_never_checkpointed(tmp_path: Any) -> None:
    flow, _ = churn(epochs=12, per_epoch=500, clear=True)
    cfg = ts.Checkpoints(str(tmp_path), every_epochs=2, mode="sync", retain=1)
    ex = flow.start(2, checkpoint=cfg)
    ex.run()
    assert len(ex.coordinator.committed) >= 4
    store = CheckpointStore(str(tmp_path), readonly=True)
    (m,) = store.manifests()
    # no live key: no file (each key was created and cleared between two checkpoints)
    assert m.file_count == 0 and m.total_size == 0
    assert sum(ex.coordinator.written_bytes) == 0
    for op in stateful_ops(ex):
        assert op.held.memo == {}  # the key -> bin memo (shared by the workers) keeps no cleared key
        assert all(not b.removed and not b.added for b in op.bins.values())


def test_a_cleared_key_a_checkpoint_holds_is_deleted_and_an_emptied_bin_dropped(tmp_path: Any) -> None:
    from tstate.checkpoint.delta import decode_delta

    def build() -> tuple[ts.Dataflow, Any]:
        flow = ts.Dataflow("once")
        batches = {0: ["a", "b"], 5: ["a"], 10: ["b"]}
        src = flow.source(ts.io.from_batches(lambda: [(t, batches.get(t, [])) for t in range(16)]), name="src")

        @flow.stateful(src, key=lambda r: r, state=int, bins=1)
        def count(n: int, r: str, ctx: ts.Context) -> int:
            if n:  # the second record of a key clears it
                ctx.clear()
            return n + 1

        return flow, count

    flow, _ = build()
    ex = flow.start(1, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=1, mode="sync", retain=10))
    ex.run()
    store = CheckpointStore(str(tmp_path), readonly=True)
    ms = store.manifests()
    kinds = [[r.kind for r in m.chain("count", 0)] for m in ms]
    # a and b; then a cleared: a tombstone (a checkpoint held it); then b: no chain at all
    assert {"snap"} == {k[0] for k in kinds if k} and ["snap", "delta"] in kinds and kinds[-1] == []
    m = ms[kinds.index(["snap", "delta"])]
    fp = m.operators["count"].fingerprint
    assert decode_delta(store.read(m.chain("count", 0)[1]), fp)["deletes"] == ["a"]
    assert ms[-1].file_count == 0
    flow2, count2 = build()
    ex2 = flow2.start(1, checkpoint=ts.Checkpoints(str(tmp_path), every_epochs=1, mode="sync"))
    ex2.run()
    assert ex2.restored is not None and flow2.state(count2, format="dict") == {}


def test_router_key_memo_is_bounded() -> None:
    flow = ts.Dataflow("many")
    inp = flow.input("keys")

    @flow.stateful(inp, key=lambda r: r, state=int, bins=16)
    def seen(n: int, r: Any, ctx: ts.Context) -> None:
        ctx.clear()

    ex = flow.start(2)
    for t in range(3):
        inp.send(range(t * 50_000, (t + 1) * 50_000))
        inp.advance_to(t + 1)
        ex.step_while(lambda: True)
    inp.close()
    ex.run()
    routers = list(ex._routers.values())
    assert routers
    for r in routers:
        assert 0 < len(r.bins._memo) <= 1 << 16
    for op in stateful_ops(ex):
        assert len(op.keys._memo) <= 1 << 16


ops_st = st.lists(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.one_of(st.integers(1, 5), st.just(0))), max_size=8),
    min_size=1,
    max_size=10,
)


@settings(max_examples=30)
@given(epochs=ops_st, every=st.integers(1, 3), stop=st.integers(0, 25), mode=st.sampled_from(MODES))
def test_restore_after_clears_equals_the_model(tmp_path_factory: Any, epochs: list, every: int, stop: int, mode: str) -> None:
    """``(key, v)``: add ``v``; ``(key, 0)``: clear.  Crash anywhere, resume: the state
    equals a dict model of every epoch applied in order."""
    d = str(tmp_path_factory.mktemp("ck"))

    def build() -> tuple[ts.Dataflow, Any]:
        flow = ts.Dataflow("model")
        src = flow.source(ts.io.from_batches(lambda: list(enumerate(epochs))), name="src")

        @flow.stateful(src, key=lambda r: r[0], state=int, bins=4)
        def acc(n: int, r: Any, ctx: ts.Context) -> int:
            if r[1] == 0:
                ctx.clear()
            return n + r[1]

        return flow, acc

    cfg = ts.Checkpoints(d, every_epochs=every, mode=mode, compact_after=3)
    flow, _ = build()
    ex = flow.start(2, checkpoint=cfg)
    for _ in range(stop):
        if not ex.step():
            break
    ex.coordinator.abort()
    flow2, acc2 = build()
    ex2 = flow2.start(3, checkpoint=cfg)
    ex2.run()
    model: dict[str, int] = {}
    for recs in epochs:
        for k, v in recs:
            if v == 0:
                model.pop(k, None)
            else:
                model[k] = model.get(k, 0) + v
    assert flow2.state(acc2, format="dict") == model


timer_ops = st.lists(
    st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from(["add", "clear", "timer", "timer+clear"])), max_size=6),
    min_size=1,
    max_size=10,
)


@settings(max_examples=40)
@given(epochs=timer_ops, every=st.integers(1, 3), stop=st.integers(0, 30), mode=st.sampled_from(MODES))
def test_timers_of_cleared_keys_survive_a_restore_exactly_once(
    tmp_path_factory: Any, epochs: list, every: int, stop: int, mode: str
) -> None:
    """A timer set by a call that then clears its key (and a timer whose handler clears
    a key it created) is checkpointed like any other: after a crash anywhere, the
    output before the restored time plus the resumed run's equals an uninterrupted run."""
    d = str(tmp_path_factory.mktemp("ck"))

    def build() -> tuple[ts.Dataflow, Any]:
        flow = ts.Dataflow("timers")
        src = flow.source(ts.io.from_batches(lambda: list(enumerate(epochs))), name="src")

        @flow.stateful(src, key=lambda r: r[0], state=int, bins=4)
        def acc(n: int, r: Any, ctx: ts.Context) -> int:
            if "timer" in r[1]:
                ctx.notify_at(ctx.time + 2)
            if "clear" in r[1]:
                ctx.clear()
            return n + 1

        @acc.on_notify
        def fire(n: int, t: Any, ctx: ts.Context) -> None:
            ctx.emit((ctx.key, t, n))
            if n == 0:  # a fresh state made for the timer: drop it again
                ctx.clear()

        return flow, acc.collect()

    ref_flow, ref = build()
    ref_flow.run(workers=2)
    cfg = ts.Checkpoints(d, every_epochs=every, mode=mode, compact_after=3)
    flow, out1 = build()
    ex = flow.start(2, checkpoint=cfg)
    for _ in range(stop):
        if not ex.step():
            break
    ex.coordinator.abort()
    flow2, out2 = build()
    ex2 = flow2.start(3, checkpoint=cfg)
    t0 = ex2.restored.time if ex2.restored else 0
    ex2.run()
    assert sorted([p for p in out1.items if p[0] < t0] + out2.items) == sorted(ref.items)
