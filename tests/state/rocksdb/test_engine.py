"""``state=ts.RocksDB(...)`` on the embedded engine: the same keyed dataflow (a map of
arrays per key, timers, ``ctx.clear()``) on the heap and on RocksDB against a plain-dict
model, with random worker counts, a crash, a restart from the last checkpoint and a
rescale; state queries give the same on both (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.errors import ConfigurationError

data = st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 20)), max_size=6), min_size=1, max_size=10)


def build(batches):
    flow = ts.Dataflow("lists")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=dict[str, list[int]], bins=8)
    def vals(s, r, ctx):
        ctx.notify_at(ctx.time + 1)
        if r[1] == 0:
            ctx.clear()
            return None
        s.setdefault("odd" if r[1] % 2 else "even", []).append(r[1])
        return s

    @vals.on_notify
    def report(s, time, ctx):
        ctx.emit((ctx.key, time, sum(sum(v) for v in s.values())))

    return flow, vals, vals.collect()


def reference(batches):
    """The model: per key a dict of lists; a timer set at ``t`` fires at ``t + 1`` after
    that time's records."""
    state: dict = defaultdict(dict)
    out, due = [], {}
    for t in range(len(batches) + 2):
        for k, v in batches[t] if t < len(batches) else ():
            if v == 0:
                state.pop(k, None)
            else:
                state[k].setdefault("odd" if v % 2 else "even", []).append(v)
        out.extend((t, (k, t, sum(sum(v) for v in state.get(k, {}).values()))) for k in due.pop(t, ()))
        for k, _ in batches[t] if t < len(batches) else ():
            due.setdefault(t + 1, {})[k] = None
    return sorted(out), {k: s for k, s in state.items() if s}


def run_once(batches, cfg, stop, w1, w2, w3, state):
    flow, op, out1 = build(batches)
    ex = flow.start(w1, checkpoint=cfg, state=state)
    for _ in range(stop):  # then "crash": abandon the execution
        if not ex.step():
            break
    ex.coordinator.abort()
    flow2, op2, out2 = build(batches)
    ex2 = flow2.start(w2, max_workers=6, checkpoint=cfg, state=state)
    t0 = ex2.restored.time if ex2.restored else 0
    ex2.step()
    if not ex2.finished:
        ex2.rescale(w3)
    ex2.run()
    ex.close()
    return flow2, op2, t0, out1, out2, ex2


@settings(max_examples=20, deadline=None)
@given(
    batches=data,
    every=st.integers(1, 3),
    stop=st.integers(0, 25),
    w1=st.integers(1, 4),
    w2=st.integers(1, 4),
    w3=st.integers(1, 6),
    cache=st.sampled_from([1, 512, 1 << 20]),
    mode=st.sampled_from(["sync", "thread", "async"]),
)
def test_heap_and_rocksdb_match_the_model(tmp_path_factory, batches, every, stop, w1, w2, w3, cache, mode):
    exp_out, exp_state = reference(batches)
    results = []
    for state in (None, ts.RocksDB(str(tmp_path_factory.mktemp("db")), cache_bytes=cache)):
        cfg = Checkpoints(str(tmp_path_factory.mktemp("ck")), every_epochs=every, mode=mode)
        flow, op, t0, out1, out2, ex2 = run_once(batches, cfg, stop, w1, w2, w3, state)
        try:
            assert sorted(p for p in out1.items if p[0] < t0) == [p for p in exp_out if p[0] < t0]
            assert sorted(out2.items) == [p for p in exp_out if p[0] >= t0]
            got = flow.state(op, format="dict")
            assert {k: s for k, s in got.items() if s} == exp_state
            for k in exp_state:
                assert flow.read(op, k) == exp_state[k]
            results.append((got, sorted(map(repr, flow.state(op).to_pylist()))))
        finally:
            ex2.close()  # (its databases' files: 20 examples of open ones ran a process out of descriptors)
    assert results[0] == results[1]  # state queries: the same on both backends


def test_rocksdb_setting_is_checked(tmp_path):
    with pytest.raises(ConfigurationError, match="cache_bytes"):
        ts.RocksDB(str(tmp_path), cache_bytes=-1)
    flow, _op, _out = build([[(1, 2)]])
    with pytest.raises(ConfigurationError, match="RocksDB"):
        flow.start(1, state=str(tmp_path))


def test_a_given_backend_takes_state_when_made(tmp_path):
    class NotEmbedded(ts.Backend):  # a backend given to run() takes state= when made (Spark: Backend(..., state=))
        def run(self, flow, reconfigure=()):  # pragma: no cover - refused before
            raise AssertionError

    flow, _op, _out = build([[(1, 2)]])
    with pytest.raises(ConfigurationError, match="state=.*give them when making it"):
        flow.run(NotEmbedded(), state=ts.RocksDB(str(tmp_path)))
