"""The Spark backend's held-records file: verified with the checkpoint, a damaged one
falls back to the previous checkpoint (a batch run replays it exactly once; a streaming
query whose Spark checkpoint moved past it is refused), and garbage collection never
deletes it through a symlink.  (The embedded engine's corruption matrix:
``tests/recovery/test_unusable.py``.)"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
from pyspark.sql import functions as F

from tstate.__main__ import main as cli
from tstate.checkpoint.store import CheckpointSkippedWarning, CheckpointStore
from tstate.errors import CheckpointError
from tstate.spark import Backend, Source

from .test_loops import ROW, embedded, walks

ROWS = [{"k": "abcdefg"[i % 7], "hops": i % 4, "t": i // 3} for i in range(15)]  # epochs 0..4


def tree(root: str) -> dict[str, bytes]:
    found = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            found[os.path.relpath(p, root).replace(os.sep, "/")] = open(p, "rb").read()
    return found


def three_batches(spark: Any, ck: str) -> tuple[list, list]:
    """Batches 0, 1, 2 of the walks (each holds the walks repeated an epoch later),
    then the driver "dies"."""
    flow, out, totals = walks(delay=1)
    df = spark.createDataFrame(ROWS, ROW)
    b = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    b._prepare(flow, {"walks": Source(df, time="t")})
    for lo in range(3):
        b._batch({"walks": df.where(F.col("t") == lo)}, {"walks": Source(df, time="t")}, lo, lo, lo + 1, None)
    return out.items, totals.items


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_a_damaged_held_file_falls_back_to_the_previous_checkpoint(spark: Any, tmp_path: Any, how: str) -> None:
    ck = str(tmp_path / "ck")
    out1, tot1 = three_batches(spark, ck)
    store = CheckpointStore(ck, readonly=True)
    ms = store.manifests()
    assert [m.id for m in ms] == [1, 2, 3] and all(m.meta["spark"]["held"] for m in ms)
    held = ms[-1].meta["spark"]["held"]
    assert all(os.path.exists(os.path.join(ck, m.meta["spark"]["held"])) for m in ms)  # each checkpoint keeps its own
    path = os.path.join(ck, held)
    if how == "delete":
        os.unlink(path)
    else:
        data = bytearray(open(path, "rb").read())
        if how == "flip":
            data[len(data) // 2] ^= 0x01
        else:
            data = data[:-5]
        open(path, "wb").write(bytes(data))
    assert cli(["checkpoints", ck, "--verify"]) == 1  # detected
    assert store.latest().id == 2 and any(os.path.basename(held) in p for p in store.problems)
    before = tree(ck)

    flow2, out2, tot2 = walks(delay=1)
    df = spark.createDataFrame(ROWS, ROW)
    b2 = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b2.run(flow2, {"walks": Source(df, time="t")}, epochs_per_batch=1)
    (w,) = [w for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
    assert "resuming from checkpoint 2" in str(w.message) and os.path.basename(held) in str(w.message)
    assert b2.metrics.batches[0].batch == 2  # batch 2 again, from checkpoint 2 (batch 1)
    # exactly once: the first run's output before epoch 2, and the resumed run's
    ref_out, ref_tot = embedded(ROWS, workers=2, delay=1)
    assert sorted([p for p in out1 if p[0] < 2] + out2.items, key=repr) == ref_out
    assert sorted([p for p in tot1 if p[0] < 2] + tot2.items, key=repr) == ref_tot
    # and the durable output (every committed batch's, both runs): each record once
    rows = b2.output(tot2).collect()
    assert sorted(((r["time"], (r["_1"], r["_2"])) for r in rows), key=repr) == ref_tot
    # evidence kept: the damaged checkpoint's manifest, marker and files
    after = tree(ck)
    named = {ms[-1].name} | {r.path for r in ms[-1].files()}
    for p in named:
        if p in before:
            assert after[p] == before[p], p
    assert "manifests/ckpt-000003.unusable" in after
    assert [r.path for r in ms[-1].attached] == [held]  # verified as part of its checkpoint


def test_a_streaming_query_past_the_fallback_is_refused(spark: Any, tmp_path: Any) -> None:
    from .flows import keyed
    from .test_streaming import stream, write_files

    src, ck = str(tmp_path / "in"), str(tmp_path / "ck")
    write_files(src, [[{"k": "a", "v": 1, "t": 5}], [{"k": "b", "v": 2, "t": 6}], [{"k": "a", "v": 3, "t": 9}]])
    flow, *_ = keyed()
    b = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    q = b.start(flow, {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    q.wait()
    head = b.store.latest()
    assert head.meta["spark"]["batch"] == 2 and head.attached
    os.unlink(os.path.join(ck, head.attached[0].path))  # the newest checkpoint is unusable
    write_files(src, [[{"k": "c", "v": 0, "t": 15}]], start=3)
    flow2, *_ = keyed()
    b2 = Backend(spark, checkpoint=ck, partitions=2, progress=False)
    with pytest.warns(CheckpointSkippedWarning, match="resuming from checkpoint 2"):
        q2 = b2.start(flow2, {"events": Source(stream(spark, src), time="t", lateness=2)}, trigger={"availableNow": True})
    with pytest.raises(Exception) as info:
        q2.wait()
    msg = str(info.value)
    assert "streaming query is at micro-batch 3" in msg and "holds batches up to 1" in msg and "would lose it" in msg
    assert b2.store.latest().id == 2  # nothing committed past the fallback


def test_garbage_collection_never_deletes_a_held_file_through_a_symlink(spark: Any, tmp_path: Any) -> None:
    ck, outside = str(tmp_path / "ck"), tmp_path / "outside"
    flow, _out, _tot = walks(delay=1)
    df = spark.createDataFrame(ROWS, ROW)
    b = Backend(spark, checkpoint=ck, partitions=2, progress=False, retain=1)
    b._prepare(flow, {"walks": Source(df, time="t")})
    b._batch({"walks": df.where(F.col("t") == 0)}, {"walks": Source(df, time="t")}, 0, 0, 1, None)
    held = b.store.head.meta["spark"]["held"]
    b.store.wait_gc()  # (batch 0's background GC done: else, on a slow machine, it meets the link below first)
    # someone replaces held/ by a symlink to a directory holding a file of that name
    outside.mkdir()
    os.rename(os.path.join(ck, "held"), outside / "real")
    (outside / "victim").mkdir()
    (outside / "victim" / os.path.basename(held)).write_bytes((outside / "real" / os.path.basename(held)).read_bytes())
    os.symlink(outside / "victim", os.path.join(ck, "held"))
    with warnings.catch_warnings(record=True) as caught:  # (the background GC's warning)
        warnings.simplefilter("always")
        b._batch({"walks": df.where(F.col("t") == 1)}, {"walks": Source(df, time="t")}, 1, 1, 2, None)
        b.store.wait_gc()
    assert any("nothing is deleted through one" in str(w.message) for w in caught)
    assert (outside / "victim" / os.path.basename(held)).exists()  # retention retired it; not deleted through the link
    assert any("not deleted" in p and "a symlink" in p for p in b.store.problems)


def test_fresh_if_unusable_starts_a_batch_run_from_empty_state(spark: Any, tmp_path: Any) -> None:
    ck = str(tmp_path / "ck")
    three_batches(spark, ck)
    store = CheckpointStore(ck, readonly=True)
    snaps = set.intersection(*({r.path for r in m.files() if r.kind == "snap"} for m in store.manifests()))
    target = sorted(snaps)[0]  # a state file every retained checkpoint shares
    os.unlink(os.path.join(ck, target))
    flow, out, totals = walks(delay=1)
    df = spark.createDataFrame(ROWS, ROW)
    with pytest.raises(CheckpointError, match=r"holds 3 checkpoints and none is usable.*" + target.split("/")[-1]):
        Backend(spark, checkpoint=ck, partitions=2, progress=False).run(flow, {"walks": Source(df, time="t")})
    b = Backend(spark, checkpoint=ck, partitions=2, progress=False, fresh_if_unusable=True)
    with pytest.warns(CheckpointSkippedWarning, match="starting from empty state"):
        b.run(flow, {"walks": Source(df, time="t")})
    assert (sorted(out.items, key=repr), sorted(totals.items, key=repr)) == embedded(ROWS, workers=2, delay=1)
    assert all(os.path.exists(os.path.join(ck, f"manifests/ckpt-{i:06d}.manifest")) for i in (1, 2, 3))


@pytest.mark.parametrize("verify", ["driver", "executors"])
def test_an_altered_stored_schema_falls_back_to_the_previous_checkpoint(spark: Any, tmp_path: Any, verify: str) -> None:
    """Issue 26, item 7 on Spark: the newest checkpoint's stored schemas altered (its
    files no longer match them) make it unusable; the run resumes from the previous one,
    exactly once."""
    import attrs

    from tstate.checkpoint.manifest import decode_manifest, encode_manifest

    ck = str(tmp_path / "ck")
    out1, tot1 = three_batches(spark, ck)
    path = os.path.join(ck, "manifests", "ckpt-000003.manifest")
    m = decode_manifest(open(path, "rb").read())
    altered = {n: attrs.evolve(e, schema={"kind": "str", "name": "str"}) for n, e in m.operators.items()}
    open(path, "wb").write(encode_manifest(attrs.evolve(m, operators=altered)))
    flow2, out2, tot2 = walks(delay=1)
    df = spark.createDataFrame(ROWS, ROW)
    b2 = Backend(spark, checkpoint=ck, partitions=2, progress=False, verify=verify)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b2.run(flow2, {"walks": Source(df, time="t")}, epochs_per_batch=1)
    (w,) = [w for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
    assert "resuming from checkpoint 2" in str(w.message) and "the stored schema was altered" in str(w.message)
    ref_out, ref_tot = embedded(ROWS, workers=2, delay=1)
    assert sorted([p for p in out1 if p[0] < 2] + out2.items, key=repr) == ref_out
    assert sorted([p for p in tot1 if p[0] < 2] + tot2.items, key=repr) == ref_tot
