"""Parallel recovery on Spark: the executors, not the driver, read a checkpoint's state.

After a driver restart or the loss of an executor, the state is nowhere but in the
store.  It is restored by the executors, straight from the store and in parallel: each
task of a micro-batch takes the bins of its partition that it needs
(:func:`tstate.spark.binstore.take` reads and checks their chains), so the first batch
after a restart decodes the state spread over every partition, and a bin no batch
needs is never read.  The driver reads the manifest only (and the few files outside
``data/``, such as the held records).

Choosing the checkpoint to resume from needs one pass over all the state's bytes: every
file's size and xxh64 are checked, so that a damaged checkpoint is skipped for an older
one before anything runs (:meth:`tstate.checkpoint.store.CheckpointStore.recover`).  On
the driver that pass is a serial read of the whole state -- one GET per file on an
object store.  :func:`verify_on_executors` runs it as a Spark job instead: one task per
partition checks the files of the bins that partition owns (attached files go to the
first) and reports what is wrong; the driver only collects the reports.  With a
replica, a checkpoint the executors find damaged is checked again on the driver, which
reads the bad files from the replica and repairs them (as it does without executors).

``Backend(verify=...)``: ``"executors"``, ``"driver"``, or ``"auto"`` (the default):
on an object store the executors when the checkpoint has at least :data:`AUTO_FILES`
files (the driver's pass is one GET after the other); on a local or mounted disk when
it holds at least :data:`AUTO_BYTES` (the driver reads and hashes a local file at
several hundred MB/s, while one Spark job costs a good fraction of a second, seconds on
a busy machine: ``benchmarks/results/recovery.txt``).

>>> from tstate.checkpoint.manifest import FileRef, Manifest, OperatorEntry
>>> ref = lambda b: (FileRef(f"data/op/{b}/000001-aa-snap.bin", 10, "0" * 16),)
>>> m = Manifest(1, 5, 0.0, {"op": OperatorEntry({"kind": "int", "name": "int"}, 4, {b: ref(b) for b in range(4)})}, {})
>>> [[path.split("/")[2] for path, _size, _xxh in g] for g in file_groups(m, {"op": [0, 1, 0, 1]}, 2)]
[['0', '2'], ['1', '3']]
>>> use_executors("auto", m, local=True), use_executors("executors", m, local=True)
(False, True)
>>> use_executors("auto", Manifest(1, 5, 0.0, {"op": OperatorEntry({"kind": "int", "name": "int"}, 64, {b: ref(b) for b in range(64)})}, {}), local=False)
True
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from tstate.checkpoint.manifest import FileRef, Manifest
from tstate.errors import CheckpointError, ConfigurationError

__all__ = ["VERIFY", "AUTO_BYTES", "AUTO_FILES", "check_verify", "use_executors", "file_groups", "check_files", "verify_on_executors"]

#: the values of ``Backend(verify=...)``
VERIFY = ("auto", "executors", "driver")
#: ``"auto"``, on a local disk: the executors check a checkpoint of at least this many bytes
AUTO_BYTES = 1 << 30
#: ``"auto"``, on an object store: ... of at least this many files
AUTO_FILES = 64


def check_verify(value: str) -> str:
    """``value`` if it is one of :data:`VERIFY`, else a ConfigurationError."""
    if value not in VERIFY:
        raise ConfigurationError(f"verify must be one of {', '.join(map(repr, VERIFY))}, got {value!r}")
    return value


def use_executors(mode: str, manifest: Manifest, *, local: bool) -> bool:
    """Whether the executors check ``manifest``'s files (see the module docstring)."""
    if mode != "auto":
        return mode == "executors"
    if local:
        return manifest.total_size >= AUTO_BYTES
    return manifest.file_count >= AUTO_FILES


def file_groups(manifest: Manifest, owners: dict[str, list[int]], partitions: int) -> list[list[tuple[str, int, str]]]:
    """The manifest's files as ``(path, size, xxh64)``, one group per partition: a bin's
    chain with the partition owning it (``owners``: operator name -> bin -> partition;
    bins of an operator the plan does not know spread round-robin), attached files with
    the first."""
    out: list[list[tuple[str, int, str]]] = [[] for _ in range(partitions)]
    for name, entry in manifest.operators.items():
        mine = owners.get(name)
        for b, chain in sorted(entry.chains.items()):
            p = mine[b] if mine is not None and b < len(mine) else b % partitions
            out[p].extend((r.path, r.size, r.xxh64) for r in chain)
    out[0].extend((r.path, r.size, r.xxh64) for r in manifest.attached)
    return out


def check_files(
    directory: str, refs: Iterable[tuple[str, int, str]], check: Callable[[FileRef, bytes], str | None] | None = None
) -> list[str]:
    """On an executor: read every file of ``refs`` from the store and check its size and
    xxh64 (and ``check``, as :meth:`~tstate.checkpoint.store.CheckpointStore.verify`
    runs it); one line per problem (naming the file), as ``verify`` says them.  A few
    reads at a time (an object store's GETs overlap)."""
    from tstate.spark import binstore

    store = binstore.store(directory)

    def one(ref: tuple[str, int, str]) -> str | None:
        r = FileRef(*ref)
        try:
            data = store.read(r)
        except CheckpointError as exc:
            return str(exc)
        return check(r, data) if check is not None else None

    with ThreadPoolExecutor(4, thread_name_prefix="tstate-verify") as pool:
        return [p for p in pool.map(one, list(refs)) if p is not None]


def _check_partition(directory: str, check: Callable[[FileRef, bytes], str | None] | None) -> Any:
    def run(groups: Iterator[list[tuple[str, int, str]]]) -> Iterator[str]:
        for g in groups:
            yield from check_files(directory, g, check)

    return run


def verify_on_executors(
    spark: Any,
    directory: str,
    manifest: Manifest,
    owners: dict[str, list[int]],
    partitions: int,
    check: Callable[[FileRef, bytes], str | None] | None = None,
) -> list[str]:
    """Check every file of ``manifest`` in one Spark job, one task per partition (see
    :func:`file_groups`), with ``check`` too (see :func:`check_files`); what is wrong,
    one line per problem (``[]``: intact)."""
    groups = [g for g in file_groups(manifest, owners, partitions) if g]
    if not groups:
        return []
    sc = spark.sparkContext
    sc.setJobDescription(f"tstate: verify checkpoint {manifest.id} ({manifest.file_count} files)")
    try:
        problems: list[str] = sc.parallelize(groups, len(groups)).mapPartitions(_check_partition(directory, check)).collect()
    finally:
        sc.setJobDescription(None)
    return problems
