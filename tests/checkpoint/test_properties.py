"""Property: random checkpoint histories (snapshots, deltas, drops, aborts, crashes and
restarts) reconstruct exactly the model, and garbage collection leaks nothing."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tstate.checkpoint.delta import apply_chain
from tstate.checkpoint.store import CheckpointStore

from .helpers import FP, SCHEMA, delta, files_on_disk, snap

OPS = ("a", "b")
BINS = 4

keys = st.one_of(st.integers(-5, 5), st.text("xyz", max_size=2), st.tuples(st.integers(0, 3), st.text("q", max_size=1)))
values = st.lists(st.integers(-100, 100), max_size=3)
states = st.dictionaries(keys, values, max_size=4)
timers = st.dictionaries(st.integers(0, 50), st.lists(keys, max_size=2, unique=True), max_size=2)

action = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, BINS - 1),
    st.sampled_from(["snap", "delta", "drop", "auto"]),
    states,  # snapshot states, or delta upserts
    st.lists(keys, max_size=3),  # delta deletes
    timers,
)
checkpoint = st.tuples(st.lists(action, max_size=6), st.sampled_from(["commit", "commit", "commit", "abort", "crash"]))

Model = dict[tuple[str, int], tuple[dict[Any, Any], dict[Any, Any]]]  # (op, bin) -> (states, timers)


def reconstruct(store: CheckpointStore, m: Any) -> Model:
    out: Model = {}
    for op, entry in m.operators.items():
        for b in entry.chains:
            got = apply_chain(store.read_chain(m, op, b), FP)
            out[op, b] = (got["states"], got["timers"])
    return out


@given(
    history=st.lists(checkpoint, min_size=1, max_size=7),
    retain=st.integers(1, 3),
    compact_after=st.integers(1, 4),
)
def test_random_histories_reconstruct_the_model(history, retain: int, compact_after: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = CheckpointStore(root, retain=retain, compact_after=compact_after, fsync=False)
        committed: Model = {}
        by_id: dict[int, Model] = {}
        known_ops: set[str] = set()
        for t, (actions, finish) in enumerate(history):
            w = store.begin(t)
            pending: dict[tuple[str, int], Any] = dict(committed)
            schemas_put: set[str] = set()
            for op, b, kind, st_, deletes, tm in actions:
                if op not in known_ops and op not in schemas_put:
                    w.put_operator_schema(op, SCHEMA, BINS)
                    schemas_put.add(op)
                if kind == "auto":
                    kind = "snap" if store.needs_snapshot(op, b) else "delta"
                tm_model = {time: list(ks) for time, ks in tm.items()}
                if kind == "snap":
                    w.put_snapshot(op, b, snap(b, st_, tm))
                    pending[op, b] = (dict(st_), tm_model)
                elif kind == "delta":
                    w.put_delta(op, b, delta(b, st_, deletes, tm))
                    old = pending.get((op, b))
                    new_states = dict(old[0]) if old else {}
                    for k in deletes:
                        new_states.pop(k, None)
                    new_states.update(st_)
                    pending[op, b] = (new_states, tm_model)
                else:
                    w.drop_bin(op, b)
                    pending.pop((op, b), None)
            if finish == "commit":
                m = w.commit()
                committed = pending
                known_ops |= schemas_put
                by_id[m.id] = committed
            elif finish == "abort":
                w.abort()
            else:  # the process dies with the writer open: a new one starts on the directory
                store = CheckpointStore(root, retain=retain, compact_after=compact_after, fsync=False)
            latest = store.latest()
            assert store.problems == []
            if not by_id:
                assert latest is None
                continue
            assert latest is not None and latest.id == max(by_id)
            assert reconstruct(store, latest) == committed
            manifests = store.manifests()
            assert 1 <= len(manifests) <= retain
            for old in manifests:  # every retained checkpoint still reads back its own state
                assert reconstruct(store, old) == by_id[old.id]
            if finish == "commit":  # GC leaks nothing: every data file is referenced
                assert files_on_disk(root) == {r.path for mm in manifests for r in mm.files()}
