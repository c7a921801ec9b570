"""Checkpoints written by the previous release (format 1) are read correctly.

``tests/fixtures/checkpoint-format1`` was written by tstate before the msgspec codec
(see :mod:`tests.checkpoint.format1_flow`).  Resuming from it must give exactly the
state a run without checkpoints has at the checkpoint's time, and a resumed run must
end exactly like an uninterrupted one."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from typing import Any

import pytest

from tests.checkpoint import format1_flow as f1
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.checkpoint.store import CheckpointStore

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "checkpoint-format1")


def _copy(tmp_path: Any) -> str:
    d = str(tmp_path / "ckpt")
    shutil.copytree(FIXTURE, d)
    return d


def _states(flow: Any, ops: dict[str, Any]) -> dict[str, Any]:
    return {name: flow.state(op, format="dict") for name, op in ops.items()}


def test_the_fixture_is_format_1() -> None:
    m = CheckpointStore(FIXTURE).latest()
    assert m is not None and m.time == f1.EPOCHS_RUN
    assert m.format == 1  # written before manifests carried a format
    kinds = {r.kind for e in m.operators.values() for c in e.chains.values() for r in c}
    assert kinds == {"snap", "delta"}


@pytest.mark.parametrize("workers", [1, 3])
def test_a_format_1_checkpoint_restores_the_state_it_holds(tmp_path: Any, workers: int) -> None:
    ref_flow, ref_ops, _ = f1.build(epochs=f1.EPOCHS_RUN)
    ref_flow.run(workers=1)
    expected = _states(ref_flow, ref_ops)
    assert all(expected.values())

    flow, ops, _ = f1.build()
    ex = flow.start(workers, checkpoint=Checkpoints(_copy(tmp_path), mode="sync"))
    assert ex.restored is not None and ex.restored.time == f1.EPOCHS_RUN
    got = _states(flow, ops)
    assert got == expected
    # what equality does not show: types and offsets came back exactly
    routes = got["routes"]
    some = next(iter(routes.values()))
    assert some.when.utcoffset() == dt.timedelta(hours=-5, minutes=-30)
    assert some.naive.tzinfo is None and type(some.tags) is frozenset and type(some.pair) is tuple
    assert some.counts.has_base and not some.counts.dirty and some.log.has_base
    assert any(type(k) is dt.datetime and k.utcoffset() == dt.timedelta(hours=2) for k in got["odd"])
    assert 2**70 in got["odd"] and frozenset({1, 2}) in got["odd"] and ("x", dt.date(2024, 1, 1)) in got["odd"]
    ex.run()


def test_a_run_resumed_from_format_1_ends_like_an_uninterrupted_one(tmp_path: Any) -> None:
    ref_flow, ref_ops, ref_out = f1.build()
    ref_flow.run(workers=2)
    d = _copy(tmp_path)
    flow, ops, out = f1.build()
    flow.run(workers=2, checkpoint=Checkpoints(d, every_epochs=f1.EVERY, mode="async"))
    t0 = flow.execution.restored.time
    assert t0 == f1.EPOCHS_RUN
    assert _states(flow, ops) == _states(ref_flow, ref_ops)
    assert sorted(map(repr, out.items)) == sorted(repr(p) for p in ref_out.items if p[0] >= t0)
    # the new checkpoints are written in the current format, the old chains rewritten whole
    m = CheckpointStore(d).latest()
    assert m is not None and m.time > t0 and m.format >= 2


def test_a_checkpoint_of_a_newer_format_is_refused_naming_it(tmp_path: Any) -> None:
    import attrs

    from tstate.checkpoint.manifest import encode_manifest
    from tstate.errors import CheckpointError

    d = _copy(tmp_path)
    store = CheckpointStore(d)
    m = store.latest()
    assert m is not None
    with open(os.path.join(d, m.name), "wb") as f:
        f.write(encode_manifest(attrs.evolve(m, format=3)))
    assert CheckpointStore(d).latest().format == 3  # still a readable manifest (never collected as garbage)
    flow, _ops, _ = f1.build()
    with pytest.raises(CheckpointError, match=r"checkpoint 3 in .* was written in checkpoint format 3 by a newer tstate"):
        flow.start(1, checkpoint=Checkpoints(d))
