"""Checkpoints in an object store (a moto S3 server on 127.0.0.1): the conditional
manifest commit, outages (retried, then a clear error, never a half-committed
checkpoint), missing write permission reported before anything runs, garbage collection
confined to the store's prefix, and the embedded engine killed and resumed from s3://.
The store's ordinary behaviour on S3 is tested in test_store.py (``where``)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from tests.objectstore import BUCKET, LOCKED, free_port
from tstate.checkpoint.location import open_filesystem, resolve
from tstate.checkpoint.objectfs import ObjectFS
from tstate.checkpoint.store import CheckpointStore
from tstate.errors import CheckpointError

from .helpers import SCHEMA, files_on_disk, snap


def _commit(store: CheckpointStore, t: int, bins=(0, 1)):
    w = store.begin(t)
    w.put_operator_schema("op", SCHEMA, bins=4)
    for b in bins:
        w.put_snapshot("op", b, snap(b, {t: [t, b]}))
    return w.commit()


def test_locations_resolve_to_their_filesystems(tmp_path, s3) -> None:
    url = s3.url("loc")
    assert resolve(url + "/") == url and isinstance(open_filesystem(url), ObjectFS)
    assert resolve("file://" + str(tmp_path)) == str(tmp_path)
    with pytest.raises(CheckpointError, match=r"ftp://h/x: unsupported scheme ftp://"):
        resolve("ftp://h/x")
    import importlib.util

    if importlib.util.find_spec("gcsfs") is None:  # a scheme whose client is missing: named
        with pytest.raises(CheckpointError, match=r"checkpoint location gs://b/p: gs:// needs the gcsfs package"):
            CheckpointStore("gs://b/p")
    fs = open_filesystem(url)
    for bad in ("../x", "/x", "a/../../x", "a//b"):
        with pytest.raises(ValueError, match="not a relative path"):
            fs.read_bytes(bad)


def test_manifest_commit_is_a_conditional_put(s3) -> None:
    """Two writers of one store that both got id 2 (the second's listing did not show the
    first's commit): the second's manifest PUT is refused -- If-None-Match -- instead of
    overwriting a committed checkpoint."""
    url = s3.url("cond")
    a = CheckpointStore(url, fsync=False)
    _commit(a, 0)
    b = CheckpointStore(url, fsync=False)
    wa, wb = a.begin(1), b.begin(1)
    assert wa.id == wb.id == 2
    wa.put_snapshot("op", 0, snap(0, {"a": [1]}))
    wb.put_snapshot("op", 0, snap(0, {"b": [2]}))
    ma = wa.commit()
    b.fs.list = lambda d, real=b.fs.list: [] if d == "manifests" else real(d)  # a stale listing
    with pytest.raises(CheckpointError, match=r"s3://.*/manifests/ckpt-000002.manifest: committed by another writer"):
        wb.commit()
    wb.abort()
    assert CheckpointStore(url, readonly=True).latest() == ma
    # the same bytes again (a PUT retried after its answer was lost) is success
    fs = open_filesystem(url)
    data = fs.read_bytes(ma.name)
    fs.write_new(ma.name, data)
    with pytest.raises(FileExistsError):
        fs.write_new(ma.name, data + b"x")


def test_outage_is_retried_then_the_commit_succeeds(s3) -> None:
    url = s3.url("outage")
    store = CheckpointStore(url, fsync=False)
    store.fs.retry_seconds = 30
    _commit(store, 0)
    w = store.begin(1)
    w.put_operator_schema("op", SCHEMA, bins=4)
    w.put_snapshot("op", 2, snap(2, {"x": [1]}))
    s3.stop()
    restart = threading.Timer(1.5, s3.start)
    restart.start()
    try:
        t0 = time.monotonic()
        m = w.commit()  # the manifest PUT fails until the server is back
        assert time.monotonic() - t0 >= 1.0
    finally:
        restart.join()
    assert store.fs.retries > 0
    fresh = CheckpointStore(url, readonly=True)
    assert fresh.latest() == m and fresh.problems == []
    assert sorted(m.operators["op"].chains) == [0, 1, 2]


def test_outage_longer_than_the_budget_fails_clearly_and_commits_nothing(s3) -> None:
    url = s3.url("down")
    store = CheckpointStore(url, fsync=False)
    store.fs.retry_seconds = 1.0
    m1 = _commit(store, 0)
    w = store.begin(1)
    w.put_operator_schema("op", SCHEMA, bins=4)
    w.put_snapshot("op", 3, snap(3, {"y": [2]}))
    s3.stop()
    try:
        with pytest.raises(CheckpointError, match=r"s3://.*/manifests: cannot be listed .*unreachable"):
            w.commit()
        with pytest.raises(CheckpointError, match=r"s3://.*/data/.*unreachable"):
            w.put_snapshot("op", 1, b"z")
    finally:
        s3.start()
    # the server goes away exactly at the manifest PUT
    real = store.fs.write_new

    def put_while_down(*a, **kw):
        s3.stop()
        return real(*a, **kw)

    store.fs.write_new = put_while_down
    try:
        with pytest.raises(CheckpointError, match=r"s3://.*ckpt-000002.manifest: cannot be written .*unreachable"):
            w.commit()
    finally:
        s3.start()
    # nothing half-committed: the store still ends at checkpoint 1, which verifies
    store2 = CheckpointStore(url, fsync=False)
    assert store2.latest() == m1 and store2.problems == []
    w.abort()
    m2 = _commit(store2, 1, bins=(2,))  # and it goes on; the orphan of the failed one is collected
    assert files_on_disk(url) == {r.path for r in m2.files()} | {r.path for r in m1.files()}


def test_unreachable_store_fails_before_anything_runs() -> None:
    url = f"s3://{BUCKET}/nowhere"
    port = free_port()  # nothing listens there
    env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", TSTATE_STORE_RETRY_SECONDS="0.5",
               AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    code = (
        "from tstate.checkpoint.store import CheckpointStore\n"
        "from tstate.errors import CheckpointError\n"
        f"try:\n    CheckpointStore({url!r})\nexcept CheckpointError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert f"checkpoint location {url}: not writable" in out.stdout and "unreachable" in out.stdout, out


@pytest.mark.parametrize("who", ["read-only user", "wrong credentials"])
def test_bucket_without_write_permission_fails_before_processing(s3_locked, tmp_path, who) -> None:
    """The engine checks the store before its first step: a run against a bucket it may
    not write raises CheckpointError naming the URL, and no record is processed."""
    endpoint, key, secret = s3_locked
    if who == "wrong credentials":
        key, secret = "AKIAWRONGWRONGWRONG0", "not-the-secret"
    url = f"s3://{LOCKED}/ckpt"
    code = f"""
import tstate as ts
from tstate.engine.checkpointing.coordinator import Checkpoints
from tstate.errors import CheckpointError
seen = []
flow = ts.Dataflow("locked")
src = flow.source(ts.io.from_batches(lambda: iter([(0, [1, 2, 3])])), name="events")
flow.sink(src.map(lambda r: seen.append(r) or r), ts.io.files({str(tmp_path / 'out')!r}), name="out")
try:
    flow.run(workers=1, checkpoint=Checkpoints({url!r}))
except CheckpointError as e:
    print("ERROR", e, "processed", len(seen))
"""
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
               TSTATE_STORE_RETRY_SECONDS="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert f"ERROR checkpoint location {url}: not writable" in out.stdout, out
    assert "processed 0" in out.stdout


def test_gc_never_deletes_outside_the_store_prefix(s3) -> None:
    """Garbage collection scans lists only below the store's own prefix: objects under a
    sibling prefix that merely starts with the same characters survive."""
    url = s3.url("gc")
    sibling = url + "2"
    neighbour = open_filesystem(sibling)
    stray = "data/op-1234abcd/0/000001-deadbeef-snap.bin"
    neighbour.write_atomic(stray, b"someone else's")
    neighbour.write_atomic("manifests/ckpt-000001.manifest", b"someone else's manifest")
    store = CheckpointStore(url, retain=1, gc_scan_every=1, fsync=False)
    for t in range(3):
        _commit(store, t)
    assert s3.keys(sibling) == ["data/op-1234abcd/0/000001-deadbeef-snap.bin", "manifests/ckpt-000001.manifest"]
    assert len(s3.keys(url)) == 3  # one manifest and its two files


def _job(ckpt: str, out, *extra: str, kill_after=None) -> int:
    from tests.recovery.killable import run_killable

    code, _ = run_killable("tests.recovery.job", ckpt, str(out), "--epochs", "40", *extra, kill_after=kill_after)
    return code


def test_embedded_engine_killed_and_resumed_from_s3(s3, tmp_path) -> None:
    """SIGKILL a job checkpointing to s3:// at random instants and inside a commit, restart
    it from the same URL: the exactly-once output equals an uninterrupted run's."""
    from tests.recovery.killable import outputs

    assert _job(str(tmp_path / "ref-ckpt"), tmp_path / "ref") == 0
    reference = outputs(tmp_path / "ref")
    url, out = s3.url("engine"), tmp_path / "out"
    assert _job(url, out, "--crash-commit=2", "--mode", "sync") in (9, -9)
    rng = random.Random(7)
    for mode in ("async", "fork"):  # fork writes from a thread on an object store
        _job(url, out, "--workers", str(rng.randint(1, 3)), "--mode", mode, kill_after=rng.uniform(1.0, 2.0))
    assert _job(url, out, "--workers", "2") == 0
    assert outputs(out) == reference
    store = CheckpointStore(url, readonly=True)
    assert store.latest() is not None and store.problems == []


def test_cli_inspects_a_store_in_s3(s3, capsys) -> None:
    from tstate.__main__ import main

    url = s3.url("cli")
    store = CheckpointStore(url, fsync=False)
    for t in range(2):
        _commit(store, t)
    assert main(["checkpoints", url, "--verify", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("id,") and [line.split(",")[0] for line in lines[1:]] == ["1", "2"]
