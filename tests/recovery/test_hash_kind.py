"""A checkpoint records the hash its operators' keys were binned with
(:mod:`tstate.hash_kind`): resuming with a key of the other kind (a key function vs a
``ts.col`` column key) is refused before any record runs; the same kind resumes; a
manifest written before the kind was recorded means ``key_hash`` (key functions)."""

from __future__ import annotations

import glob
import os
from collections import Counter
from typing import Any

import msgpack
import pytest
import xxhash

import tstate as ts
from tstate.checkpoint.manifest import MAGIC, decode_manifest
from tstate.column_key import Col
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.errors import ConfigurationError
from tstate.hash_kind import HashKind

KEYS = "abcdefghij"
BATCHES = [[{"k": KEYS[(t * 7 + i) % len(KEYS)], "v": i} for i in range(6)] for t in range(8)]
BY_FN = lambda r: r["k"]  # noqa: E731


def build(key: Any) -> tuple[ts.Dataflow, Any, Any]:
    flow = ts.Dataflow("hashes")
    src = flow.source(ts.io.from_batches(lambda: list(enumerate(BATCHES))), name="src")

    @flow.stateful(src, key=key, state=int, bins=8, name="count")
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], n + 1))
        return n + 1

    return flow, count, count.collect()


def first_run(directory: str, key: Any, steps: int = 4) -> None:
    """Run part of the input with checkpoints every epoch, then abandon the run."""
    flow, _, _ = build(key)
    ex = flow.start(2, checkpoint=Checkpoints(directory, every_epochs=1, mode="sync"))
    for _ in range(steps):
        ex.step()
    ex.coordinator.abort()
    assert ex.coordinator.store.manifests(), "the first run committed no checkpoint"


def resume(directory: str, key: Any) -> tuple[Any, dict, list]:
    flow, op, out = build(key)
    flow.run(workers=3, checkpoint=Checkpoints(directory, every_epochs=1, mode="sync"))
    return flow.execution.restored, flow.state(op, format="dict"), out.items


EXPECTED = dict(Counter(r["k"] for b in BATCHES for r in b))


@pytest.mark.parametrize(
    "first, then, stored, declared",
    [(BY_FN, ts.col("k"), "key_hash", "spark_xxhash64"), (ts.col("k"), BY_FN, "spark_xxhash64", "key_hash")],
    ids=["function-then-col", "col-then-function"],
)
def test_resuming_with_the_other_hash_kind_is_refused(tmp_path, first, then, stored, declared) -> None:
    first_run(str(tmp_path), first)
    flow, _, out = build(then)
    with pytest.raises(ConfigurationError) as err:
        flow.run(workers=2, checkpoint=Checkpoints(str(tmp_path), every_epochs=1, mode="sync"))
    msg = str(err.value)
    assert "'count'" in msg and repr(stored) in msg and repr(declared) in msg
    assert "start without the checkpoint" in msg
    assert out.items == []  # refused before any record ran


@pytest.mark.parametrize("key", [BY_FN, ts.col("k")], ids=["function", "col"])
def test_the_same_hash_kind_resumes(tmp_path, key) -> None:
    first_run(str(tmp_path), key)
    restored, state, _ = resume(str(tmp_path), key)
    assert restored is not None and restored.time > 0
    assert state == EXPECTED  # every key found again in its bin
    kinds = {e.hash for m in _manifests(str(tmp_path)) for e in m.operators.values()}
    assert kinds == {HashKind.SPARK_XXHASH64 if isinstance(key, Col) else HashKind.KEY_HASH}


def _manifests(directory: str) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "manifests", "ckpt-*.manifest"))):
        with open(path, "rb") as f:
            out.append(decode_manifest(f.read()))
    return out


def _strip_hash_fields(directory: str) -> int:
    """Rewrite every manifest as a version that did not record hash kinds wrote it."""
    n = 0
    for path in glob.glob(os.path.join(directory, "manifests", "ckpt-*.manifest")):
        with open(path, "rb") as f:
            data = f.read()
        body = msgpack.unpackb(data[len(MAGIC) : -8], strict_map_key=False)
        for entry in body["operators"].values():
            n += entry.pop("hash") is not None
        raw = MAGIC + msgpack.packb(body, use_bin_type=True)
        with open(path, "wb") as f:
            f.write(raw + xxhash.xxh64_digest(raw))
    return n


def test_an_old_manifest_without_the_field_means_key_hash(tmp_path) -> None:
    first_run(str(tmp_path), BY_FN)
    assert _strip_hash_fields(str(tmp_path)) > 0
    assert {e.hash for m in _manifests(str(tmp_path)) for e in m.operators.values()} == {HashKind.KEY_HASH}
    flow, _, out = build(ts.col("k"))
    with pytest.raises(ConfigurationError, match="'key_hash'"):
        flow.run(workers=2, checkpoint=Checkpoints(str(tmp_path), every_epochs=1, mode="sync"))
    restored, state, _ = resume(str(tmp_path), BY_FN)
    assert restored is not None and restored.time > 0 and state == EXPECTED
