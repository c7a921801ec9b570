"""``ts.io.files``: a recovery redoes only the epoch files the sink writes; other files
in its directory (``epoch-backup.jsonl``, notes) are left alone."""

from __future__ import annotations

import json
import os
from typing import Any

import tstate as ts


def build(out: str) -> ts.Dataflow:
    flow = ts.Dataflow("sums")
    src = flow.source(ts.io.from_batches(lambda: [(t, [(t % 3, t)]) for t in range(20)]), name="rows")

    @flow.stateful(src, key=lambda r: r[0], state=int)
    def total(s: int, r: Any, ctx: ts.Context) -> int:
        ctx.emit([ctx.key, s + r[1]])
        return s + r[1]

    flow.sink(total, ts.io.files(out))
    return flow


def test_stray_files_in_the_output_directory_survive_a_resume(tmp_path: Any) -> None:
    ref = str(tmp_path / "ref")
    build(ref).run(workers=2)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    cfg = ts.Checkpoints(ck, every_epochs=3, mode="sync")
    ex = build(out).start(2, checkpoint=cfg)
    while len(ex.coordinator.committed) < 2:
        assert ex.step()
    ex.coordinator.abort()  # "crash"
    strays = {"epoch-backup.jsonl": "keep me\n", "notes.txt": "x", "epoch-000000000001.jsonl.bak": "y", "epoch-.jsonl": ""}
    for name, text in strays.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    with open(os.path.join(out, "epoch-000000000001.jsonl.tmp-0badf00d"), "w") as f:
        f.write("[half")  # a crashed writer's temporary: ours, deleted
    ex2 = build(out).start(2, checkpoint=cfg)
    assert ex2.restored is not None
    ex2.run()
    for name, text in strays.items():
        assert open(os.path.join(out, name)).read() == text
    ours = sorted(n for n in os.listdir(out) if n not in strays)
    assert ours == sorted(os.listdir(ref))
    for n in ours:
        assert [json.loads(x) for x in open(os.path.join(out, n))] == [json.loads(x) for x in open(os.path.join(ref, n))]
