"""``state=ts.RocksDB(...)`` against the heap and a plain-dict model with a struct state
(``stateful``) and ``fold_bins`` in one dataflow, a crash, a restart on another worker
count from the last checkpoint, and a rescale by a random strategy (``precopy``
included) -- the same output and the same state on both backends (hypothesis)."""

from __future__ import annotations

from attrs import define
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints

data = st.lists(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)), max_size=8), min_size=1, max_size=8)


@define
class Tally:
    n: int = 0
    total: int = 0
    last: int = -1


def build(batches):
    flow = ts.Dataflow("structs")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=Tally, bins=8)
    def tally(s, r, ctx):
        if r[1] == 0:
            ctx.clear()
            return None
        s.n += 1
        s.total += r[1]
        s.last = r[1]
        ctx.emit((ctx.key, s.n, s.total))
        return s

    @flow.fold_bins(src, key=lambda r: r[0] % 5, state=int, bins=4, name="folded")
    def folded(states, recs, ctx):
        for r in recs:
            k = r[0] % 5
            states[k] = states.get(k, 0) + r[1]
        ctx.emit((ctx.time, sorted(states.items())))

    return flow, tally, folded, tally.collect()


def reference(batches):
    state: dict = {}
    out = []
    folded: dict = {}
    for _t, batch in enumerate(batches):
        for k, v in batch:
            folded[k % 5] = folded.get(k % 5, 0) + v
            if v == 0:
                state.pop(k, None)
                continue
            s = state.setdefault(k, [0, 0, -1])
            s[0] += 1
            s[1] += v
            s[2] = v
            out.append((k, s[0], s[1]))
    return sorted(out), {k: Tally(*s) for k, s in state.items()}, folded


@settings(max_examples=10, deadline=None)
@given(batches=data, stop=st.integers(0, 20), w1=st.integers(1, 3), w2=st.integers(1, 3), w3=st.integers(1, 4),
       strategy=st.sampled_from(["all-at-once", "fluid", "batched", "precopy"]), cache=st.sampled_from([1, 1 << 20]))
def test_structs_and_fold_bins_match_on_both_backends(tmp_path_factory, batches, stop, w1, w2, w3, strategy, cache):
    exp_out, exp_state, exp_fold = reference(batches)
    for state in (None, ts.RocksDB(str(tmp_path_factory.mktemp("db")), cache_bytes=cache)):
        cfg = Checkpoints(str(tmp_path_factory.mktemp("ck")), every_epochs=1, mode="sync")
        flow, _op, _f, out1 = build(batches)
        ex = flow.start(w1, checkpoint=cfg, state=state)
        for _ in range(stop):  # then "crash": abandon the execution
            if not ex.step():
                break
        ex.coordinator.abort()
        flow2, op2, fold2, out2 = build(batches)
        ex2 = flow2.start(w2, max_workers=6, checkpoint=cfg, state=state)
        t0 = ex2.restored.time if ex2.restored else 0
        ex2.step()
        if not ex2.finished:
            ex2.rescale(w3, strategy=strategy)
        ex2.run()
        ex.close()
        got = sorted(r for t, r in out1.items if t < t0) + sorted(r for t, r in out2.items if t >= t0)
        assert sorted(got) == exp_out
        assert flow2.state(op2, format="dict") == exp_state
        assert flow2.state(fold2, format="dict") == exp_fold
        ex2.close()
