"""A store with a replica: every committed checkpoint is copied, recovery reads whichever
copy is intact and repairs the other (tstate.checkpoint.store, "A replica")."""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tstate.checkpoint.store import (
    CheckpointRepairedWarning,
    CheckpointReplicaWarning,
    CheckpointSkippedWarning,
    CheckpointStore,
)
from tstate.errors import CheckpointError, ConfigurationError

from tests.checkpoint.helpers import SCHEMA, damage, delta, snap
from tests.recovery.test_unusable import tree

BINS = 4


def commit_some(store: CheckpointStore, n: int, start: int = 0) -> dict[int, Any]:
    """``n`` checkpoints: a snapshot of bin ``t % 4``, deltas for the others; returns
    checkpoint id -> the chain bytes of every bin (the expected recovery)."""
    expected = {}
    for t in range(start, start + n):
        w = store.begin(t)
        w.put_operator_schema("op", SCHEMA, bins=BINS)
        w.put_snapshot("op", t % BINS, snap(t % BINS, {f"k{t}": [t]}))
        w.put_delta("op", (t + 1) % BINS, delta((t + 1) % BINS, {f"d{t}": [t, t]}))
        m = w.commit()
        expected[m.id] = {b: store.read_chain(m, "op", b) for b in range(BINS)}
    return expected


def unreachable(real: Any, why: str) -> Any:
    """A filesystem every call of which fails like an unreachable store (it still
    describes paths, for the messages)."""

    class Down:
        def __getattr__(self, name: str) -> Any:
            if name == "describe":
                return real.describe

            def fail(*args: Any, **kw: Any) -> Any:
                raise ConnectionError(why)

            return fail

    return Down()


def test_every_commit_is_copied_and_collected_alike(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    store = CheckpointStore(a, retain=2, fsync=False, replica=b)
    commit_some(store, 6)
    # the replica is a complete store of its own with the same retained checkpoints and files
    assert tree(a) == tree(b)
    replica = CheckpointStore(b, readonly=True)
    m = replica.latest()
    assert m is not None and m.id == 6 and replica.verify(m) == []
    assert [x.id for x in replica.manifests()] == [5, 6]


def test_a_replica_cannot_have_a_replica(tmp_path: Any) -> None:
    inner = CheckpointStore(str(tmp_path / "c"), replica=str(tmp_path / "d"))
    with pytest.raises(ConfigurationError, match="replica cannot have a replica"):
        CheckpointStore(str(tmp_path / "a"), replica=inner)


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
@pytest.mark.parametrize("where", ["primary", "replica"])
@pytest.mark.parametrize("what", ["manifest", "data"])
def test_one_bad_copy_is_read_from_the_other_and_repaired(tmp_path: Any, how: str, where: str, what: str) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    expected = commit_some(CheckpointStore(a, retain=3, fsync=False, replica=b), 5)
    good = tree(a)
    m = CheckpointStore(a, readonly=True).latest()
    assert m is not None
    target = m.name if what == "manifest" else next(iter(m.files())).path
    damage(os.path.join(a if where == "primary" else b, target), how)

    store = CheckpointStore(a, retain=3, fsync=False, replica=b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        latest = store.latest()
    assert latest is not None and latest.id == 5  # not skipped: the other copy is intact
    assert not [w for w in caught if issubclass(w.category, CheckpointSkippedWarning)]
    (w,) = [w for w in caught if issubclass(w.category, CheckpointRepairedWarning)]
    assert target in str(w.message)
    assert store.repaired == [f"{target} (in {a if where == 'primary' else b})"]
    assert {bi: store.read_chain(latest, "op", bi) for bi in range(BINS)} == expected[5]
    # both copies are whole again, byte for byte
    assert tree(a) == good and tree(b) == good


def test_a_file_bad_in_both_copies_makes_the_checkpoint_unusable(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    commit_some(CheckpointStore(a, retain=3, fsync=False, replica=b), 5)
    m = CheckpointStore(a, readonly=True).latest()
    assert m is not None
    own = [r.path for r in m.files() if r.name.startswith(f"{m.id:06d}-")][0]  # only checkpoint 5 has it
    damage(os.path.join(a, own), "flip")
    damage(os.path.join(b, own), "truncate")
    store = CheckpointStore(a, retain=3, fsync=False, replica=b)
    latest = store.latest()
    assert latest is not None and latest.id == 4
    (why,) = store.skipped[5]
    assert own in why and "checksum mismatch" in why and "replica:" in why and "torn" in why


def test_a_lost_primary_is_restored_from_the_replica(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    expected = commit_some(CheckpointStore(a, retain=2, fsync=False, replica=b), 4)
    shutil.rmtree(a)
    store = CheckpointStore(a, retain=2, fsync=False, replica=b)
    with pytest.warns(CheckpointRepairedWarning):
        m = store.latest()
    assert m is not None and m.id == 4
    assert {bi: store.read_chain(m, "op", bi) for bi in range(BINS)} == expected[4]
    # the primary holds checkpoint 4 again, complete, and the run goes on from it
    alone = CheckpointStore(a, readonly=True)
    assert alone.latest() == m and alone.verify(m) == []
    more = commit_some(store, 2, start=10)
    assert sorted(more) == [5, 6] and tree(a) == tree(b)


def test_an_unreachable_replica_never_fails_a_commit_and_catches_up(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    store = CheckpointStore(a, retain=3, fsync=False, replica=b)
    commit_some(store, 2)
    assert store.replica is not None
    real = store.replica.fs
    store.replica.fs = unreachable(real, "replica unreachable")
    with pytest.warns(CheckpointReplicaWarning, match="checkpoint 3 not copied to the replica.*unreachable"):
        commit_some(store, 1, start=2)
    assert CheckpointStore(a, readonly=True).latest().id == 3  # committed all the same
    store.replica.fs = real
    commit_some(store, 1, start=3)  # copies checkpoint 4 and what 3 left missing
    replica = CheckpointStore(b, readonly=True)
    m = replica.latest()
    assert m is not None and m.id == 4 and replica.verify(m) == []


def test_an_unreachable_primary_recovers_from_the_replica(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    expected = commit_some(CheckpointStore(a, retain=2, fsync=False, replica=b), 3)
    store = CheckpointStore(a, retain=2, fsync=False, readonly=True, replica=CheckpointStore(b, readonly=True))
    store.fs = unreachable(store.fs, "store unreachable")
    m = store.latest()
    assert m is not None and m.id == 3
    assert {bi: store.read_chain(m, "op", bi) for bi in range(BINS)} == expected[3]
    assert any("reading the replica's checkpoints" in p for p in store.problems)


@settings(max_examples=25)
@given(
    n=st.integers(2, 6),
    damage_plan=st.lists(st.tuples(st.integers(0, 60), st.booleans(), st.sampled_from(["flip", "truncate", "delete"])), max_size=6),
)
def test_recovery_equals_the_undamaged_store_whenever_each_file_has_one_good_copy(
    tmp_path_factory: Any, n: int, damage_plan: list[tuple[int, bool, str]]
) -> None:
    """Random damage to either copy of random files (never both copies of one file):
    recovery finds the newest checkpoint with the same bytes, and repairs both copies."""
    root = tmp_path_factory.mktemp("replica")
    a, b = str(root / "a"), str(root / "b")
    expected = commit_some(CheckpointStore(a, retain=3, fsync=False, replica=b), n)
    good = tree(a)
    names = sorted(good)
    hit: set[str] = set()
    for i, primary, how in damage_plan:
        name = names[i % len(names)]
        if name in hit:
            continue
        hit.add(name)
        damage(os.path.join(a if primary else b, name), how)
    store = CheckpointStore(a, retain=3, fsync=False, replica=b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = store.latest()
    assert m is not None and m.id == n and not store.skipped
    assert {bi: store.read_chain(m, "op", bi) for bi in range(BINS)} == expected[n]
    for root_dir in (a, b):  # what the newest checkpoint needs is whole in both copies
        alone = CheckpointStore(root_dir, readonly=True)
        assert alone.verify(m) == [] and alone.manifest(m.id) == m


def test_a_readonly_store_reads_the_replica_without_repairing(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    commit_some(CheckpointStore(a, retain=3, fsync=False, replica=b), 2)
    m = CheckpointStore(a, readonly=True).latest()
    assert m is not None
    path = next(iter(m.files())).path
    damage(os.path.join(a, path), "flip")
    store = CheckpointStore(a, readonly=True, replica=b)
    assert store.latest() == m and store.repaired == []
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        CheckpointStore(a, readonly=True).read(next(iter(m.files())))


def test_mirrored_files_follow_the_checkpoints_and_are_restored_both_ways(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    store = CheckpointStore(a, retain=2, fsync=False, replica=b, mirror_dirs=("output",))
    for t in range(3):
        w = store.begin(t)
        w.put_operator_schema("op", SCHEMA, bins=BINS)
        w.put_snapshot("op", 0, snap(0, {"k": [t]}))
        path = f"output/sink/{t:06d}/part.msgpack"
        store.fs.write_atomic(path, f"records of batch {t}".encode(), fsync=False)
        w.mirror(path)
        with pytest.raises(CheckpointError, match="not under the store's mirrored directories"):
            w.mirror("elsewhere/x")
        w.commit()
    # every batch's output is in the replica (kept: output is not garbage-collected)
    assert tree(b) == tree(a) and sum(p.startswith("output") for p in tree(b)) == 3
    os.unlink(os.path.join(a, "output/sink/000001/part.msgpack"))
    os.unlink(os.path.join(b, "output/sink/000002/part.msgpack"))
    again = CheckpointStore(a, retain=2, fsync=False, replica=b, mirror_dirs=("output",))
    with pytest.warns(CheckpointRepairedWarning, match="1 file missing"):
        assert again.latest() is not None
    assert tree(a) == tree(b) and sum(p.startswith("output") for p in tree(a)) == 3
