"""Item 5 of issue 28, end to end: a ``list`` state appended to is written in the
checkpoint deltas as what was appended (:mod:`tstate.state.appends`), and every
restore -- on random worker counts, after random stops, with moves of bins -- gives the
value plain lists give (appends, extends, pops, item assignments, assignments of another
list, ``ctx.clear``)."""

from __future__ import annotations

import glob
import os
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from tstate.checkpoint.delta import decode_delta
from tstate.checkpoint.settings import Checkpoints
from tstate.engine.checkpointing.forked import fork_available
from tstate.state import appends
from tstate.types.codec import StateCodec

MODES = ["async", "thread", "sync"] + (["fork"] if fork_available() else [])

# (key, op, argument): what one record does to its key's list
op = st.tuples(
    st.integers(0, 5),
    st.sampled_from(["append", "append", "append", "extend", "pop", "set", "assign", "clear"]),
    st.integers(-50, 50),
)
data = st.lists(st.lists(op, max_size=8), min_size=2, max_size=12)


def apply(values: list[int], kind: str, x: int) -> Any:
    """One record's change to a plain list; returns a list that replaces it, or None."""
    if kind == "append":
        values.append(x)
    elif kind == "extend":
        values.extend(range(x, x + abs(x) % 5))
    elif kind == "pop":
        if values:
            values.pop()
    elif kind == "set":
        if values:
            values[abs(x) % len(values)] = x
    elif kind == "assign":
        return [x] * (abs(x) % 4)
    return None


def build(batches: list[list[tuple[int, str, int]]]) -> tuple[ts.Dataflow, Any, Any]:
    flow = ts.Dataflow("lists")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(batches))), name="src")

    @flow.stateful(src, key=lambda r: r[0], state=list[int], bins=8)
    def lists(values: list[int], r: tuple[int, str, int], ctx: ts.Context) -> Any:
        if r[1] == "clear":
            ctx.clear()
            return None
        ctx.emit((ctx.key, ctx.time, len(values)))
        return apply(values, r[1], r[2])

    return flow, lists, lists.collect()


def reference(batches: list[list[tuple[int, str, int]]]) -> dict[int, list[int]]:
    model: dict[int, list[int]] = {}
    for batch in batches:
        for k, kind, x in batch:
            if kind == "clear":
                model.pop(k, None)
                continue
            new = apply(model.setdefault(k, []), kind, x)
            if new is not None:
                model[k] = new
    return model


@settings(max_examples=30, deadline=None)
@given(
    batches=data,
    every=st.integers(1, 3),
    runs=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 25), st.sampled_from(MODES)), min_size=1, max_size=4),
    rescale=st.one_of(st.none(), st.tuples(st.integers(1, 4), st.integers(0, 4))),
)
def test_list_states_restore_as_plain_lists(tmp_path_factory: Any, batches, every, runs, rescale) -> None:
    d = str(tmp_path_factory.mktemp("ck"))
    with mock.patch.object(appends, "MIN_BYTES", 0):  # every list is logged, however short
        for workers, steps, mode in runs:  # each stops ("crashes") after `steps` steps
            flow, lst, _ = build(batches)
            ex = flow.start(workers, max_workers=4, checkpoint=Checkpoints(d, every_epochs=every, mode=mode))
            if rescale is not None:
                ex.rescale(rescale[0], at=(ex.restored.time if ex.restored else 0) + rescale[1])
            for _ in range(steps):
                if not ex.step():
                    break
            ex.coordinator.abort()
        flow, lst, _ = build(batches)
        flow.run(workers=runs[-1][0], checkpoint=Checkpoints(d, every_epochs=every, mode="async"))
    want = {k: v for k, v in reference(batches).items()}
    assert flow.state(lst, format="dict") == want


def _deltas(root: str) -> list[dict[str, Any]]:
    fp = StateCodec(list[int]).fingerprint
    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*-delta.bin"), recursive=True)):
        with open(path, "rb") as f:
            out.append((os.path.getsize(path), decode_delta(f.read(), fp)))
    return out


def test_a_long_list_appended_to_writes_the_appended_items(tmp_path: Any) -> None:
    """20,000 items, one appended per epoch: each delta after the first holds that item
    (under 200 bytes), not the list (about 60 kB); the restored list is the list."""
    epochs = 12
    batches = [[(0, "extend", 0)] + [(0, "append", i) for i in range(20_000)]] + [[(0, "append", -t)] for t in range(1, epochs)]
    cfg = Checkpoints(str(tmp_path), every_epochs=1, mode="sync", compact_after=100, retain=100)
    flow, lst, _ = build(batches)
    flow.run(workers=1, checkpoint=cfg)
    deltas = _deltas(str(tmp_path))
    whole = [d for _, d in deltas if d["upserts"]]
    appended = [(size, d) for size, d in deltas if d.get("appends")]
    assert not whole  # the snapshot logged the list
    assert len(appended) >= 3 and len(appended) == len(deltas) - len(whole)
    for size, d in appended:
        assert size < 200 and len(d["appends"]) == 1 and 1 <= len(d["appends"][0][1]) <= 3  # (a checkpoint may be skipped)
    flow2, lst2, _ = build(batches)
    flow2.run(workers=2, checkpoint=cfg)  # resumes from the last checkpoint
    assert flow2.execution.restored is not None
    assert flow2.state(lst2, format="dict") == reference(batches)
