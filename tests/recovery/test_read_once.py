"""An eager restore reads every data file once: the verification's bytes are decoded."""

from __future__ import annotations

from collections import Counter
from typing import Any

import tstate as ts
from tstate.checkpoint.fs import LocalFS
from tstate.checkpoint.settings import Checkpoints


def _flow() -> tuple[ts.Dataflow, Any, Any, Any]:
    flow = ts.Dataflow("read-once")
    inp = flow.input("in")
    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=16, name="acc")(
        lambda v, r, ctx: v.append(r[1]))
    return flow, inp, op, op.probe()


def test_eager_restore_reads_each_data_file_once(tmp_path, monkeypatch) -> None:
    d = str(tmp_path)
    flow, inp, _, probe = _flow()
    ex = flow.start(1, checkpoint=Checkpoints(d, every_epochs=1, mode="sync"))
    for t in range(3):
        inp.send([(k, t) for k in range(50)])
        inp.advance_to(t + 1)
        while probe.less_than(t + 1):
            ex.step()
    inp.close()
    ex.run()
    expected = {k: [0, 1, 2] for k in range(50)}
    reads: Counter[str] = Counter()
    real = LocalFS.read_bytes

    def counting(self: LocalFS, path: str) -> bytes:
        if path.startswith("data/"):
            reads[path] += 1
        return real(self, path)

    monkeypatch.setattr(LocalFS, "read_bytes", counting)
    flow, inp, op, probe = _flow()
    ex = flow.start(1, checkpoint=Checkpoints(d, restore="eager"))
    assert ex.restored is not None
    assert reads and set(reads.values()) == {1}, reads
    assert flow.state(op, format="dict") == expected
    inp.close()
    ex.run()
