"""Sink output on Spark: written by the executors, made visible by the batch's commit.

The driver never holds a sink's records.  Every task that produces sink output writes
it to a **part file** in the checkpoint store, through the store's filesystem (so it
works wherever the store does)::

    output/<node>-<sink name>/<batch:06d>/<token>-p<partition>-a<attempt>-<random>.arrow

-- one file per task per micro-batch and sink, in the Arrow IPC file format: a column
``time`` (int64, ascending) and a column ``records`` (binary: the records of that time
as one :func:`~tstate.spark.records.encode_records` cell) -- and hands the driver only a
small reference row: the sink, the path, how many records it holds at each time and
the file's xxHash64 (:class:`Part`; the committed index holds the digest, so a damaged
part is found when read).  A reader takes the times it wants from the file's ``time``
column without decoding the others.  Part files of older runs (``.msgpack``: a sealed
``[[time, cell], ...]``) are still read.  The driver writes the batch's references to an **index file**
(``output/index/<batch:06d>-<token>.msgpack``, which also names the previous index: a
chain through every batch that had output) and its manifest's meta points at it, so the
batch's commit is what makes its output visible.  A retried task or a replayed batch
writes files under other names that no committed index references: they can neither
duplicate nor lose output, and they are deleted (after the commit, in the batch's
directories; at a restart, in every directory of an uncommitted batch).

Records given at a time the batch has not reached (a frontier operator's later output)
stay in their part file; its reference waits in the manifest (``output_pending``) and
joins the index of the batch that reaches the time.  So the output of batch ``b`` is
exactly the records at times in ``[lo, hi)`` of that batch, each in one part.

What reads the committed parts:

- **Driver sinks** (``Sink.on_driver``: ``collect()``, ``sink(fn)``, ``ts.io.stdout()``,
  custom sinks) get ``write(0, time, records)`` after the commit (by the same
  :mod:`tstate.spark.delivery`): they are in-memory or side effects of the driver by
  definition.
- **Epoch-file sinks** (``ts.io.files(dir)``, ``on_driver = False``): the per-epoch view
  is written from the task files in one pass (:func:`finalise`): one Spark job per
  batch whose tasks each take a run of consecutive epochs of a sink, read each part
  holding one of them once (only those times' cells) and write each epoch's
  ``DIR/epoch-<time>.jsonl`` (:meth:`~tstate.io.sinks.FileSink.commit_epochs`:
  temporary files, one durability barrier for the run, renames), so the directory is
  the embedded engine's, file for file; no Spark task, and no read of a part, per
  epoch.  The job runs off the batches' critical path, while the next batch runs
  (:mod:`tstate.spark.delivery`), and the next commit waits for it; a restart
  finalises the last committed batch again (the same bytes), so a driver killed
  between the commit and the files loses nothing.
- :func:`frame` (``Backend.output(op)``): a DataFrame of ``batch``, ``time`` and the
  record's columns, read from the parts by the executors.
- ``ts.io.keep()`` delivers nowhere: its records are only in the parts, for
  ``Backend.output``.

Parts stay in the store (they are the run's output, per batch) until the directory is
deleted.

>>> Part(3, "output/3-out/000007/x.arrow", ((7, 2),), "9e1f").to_builtins()
[3, 'output/3-out/000007/x.arrow', [[7, 2]], '9e1f']
>>> Part.from_builtins([3, "output/3-out/000007/x.msgpack", [[7, 2]]]).digest  # an older run's part
''
>>> epoch_runs([1, 2, 3, 4, 5], 2)
[[1, 2, 3], [4, 5]]
"""

from __future__ import annotations

import json
import re
import secrets
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

import msgpack
from attrs import frozen

from tstate.spark.wire import SINK, BatchInfo, Row

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.plan import Plan

__all__ = [
    "Part", "ROOT", "INDEX", "sink_dir", "write_parts", "read_part", "records_of", "write_index", "read_index",
    "history", "clean", "finalise", "frame", "row_of", "epoch_runs",
]

#: where the parts live in the store, and the batches' index files
ROOT = "output"
INDEX = "output/index"


@frozen
class Part:
    """A reference to one part file: sink node, path in the store, ``(time, records)``
    for the times it holds (those of one batch, in a batch's index), and the file's
    xxHash64 (hex; empty for an older run's sealed ``.msgpack`` part, which carries its
    own)."""

    sink: int
    path: str
    times: tuple[tuple[int, int], ...]
    digest: str = ""

    @property
    def records(self) -> int:
        return sum(n for _, n in self.times)

    def to_builtins(self) -> list[Any]:
        out = [self.sink, self.path, [list(t) for t in self.times]]
        return [*out, self.digest] if self.digest else out

    @classmethod
    def from_builtins(cls, v: Any) -> "Part":
        return cls(int(v[0]), str(v[1]), tuple((int(t), int(n)) for t, n in v[2]), str(v[3]) if len(v) > 3 else "")

    def row(self) -> Row:
        """The ``SINK`` row a task hands the driver for this part."""
        return (SINK, 0, self.sink, 0, 0, msgpack.packb(self.to_builtins()))

    @classmethod
    def of_row(cls, payload: bytes) -> "Part":
        """The part of a ``SINK`` row's payload."""
        return cls.from_builtins(msgpack.unpackb(payload))

    def split(self, hi: Optional[int]) -> tuple[Optional["Part"], Optional["Part"]]:
        """The times before ``hi`` (a batch's) and the others (None: nothing there)."""
        now = tuple(p for p in self.times if hi is None or p[0] < hi)
        later = tuple(p for p in self.times if hi is not None and p[0] >= hi)
        return (
            Part(self.sink, self.path, now, self.digest) if now else None,
            Part(self.sink, self.path, later, self.digest) if later else None,
        )


def sink_dir(plan: "Plan", node: int) -> str:
    """The directory of sink ``node``'s parts: ``output/<node>-<name>``."""
    return f"{ROOT}/{node}-{re.sub(r'[^A-Za-z0-9._-]+', '_', plan.nodes[node].name)}"


def _seal(body: bytes) -> bytes:
    import xxhash

    return msgpack.packb([xxhash.xxh64(body).hexdigest(), body], use_bin_type=True)  # type: ignore[no-any-return]


def _open(fs: Any, path: str, what: str) -> Any:
    import xxhash

    from tstate.errors import CheckpointError

    try:
        digest, body = msgpack.unpackb(fs.read_bytes(path), raw=False)
        if xxhash.xxh64(body).hexdigest() != digest:
            raise ValueError("checksum mismatch")
        return msgpack.unpackb(body, raw=False)
    except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointError(f"{fs.describe(path)}: {what} unreadable ({exc})") from None


def write_parts(plan: "Plan", info: BatchInfo, sinks: dict[tuple[int, int], list[Any]], rows: list[Row]) -> None:
    """In a task: write the records that reached each sink (``sinks[(node, time)]``) to
    one part file per sink and add a reference row per file to ``rows`` (kind ``SINK``,
    ``node`` the sink, ``payload`` the :class:`Part`)."""
    from tstate.spark import binstore
    from tstate.spark.records import encode_records

    if not sinks:
        return
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:  # pragma: no cover - pyspark is there wherever tasks run
        ctx = None
    where = f"p{ctx.partitionId()}-a{ctx.attemptNumber()}" if ctx is not None else "driver"
    fs = binstore.store(info.directory).fs
    by_sink: dict[int, list[tuple[int, list[Any]]]] = {}
    for (node, t), recs in sinks.items():
        if recs:
            by_sink.setdefault(node, []).append((t, recs))
    for node, cells in sorted(by_sink.items()):
        cells.sort(key=lambda c: c[0])
        name = plan.nodes[node].name
        body = _arrow_part([t for t, _ in cells], [encode_records(recs, name, plan.records) for _, recs in cells])
        path = f"{sink_dir(plan, node)}/{info.batch:06d}/{info.token}-{where}-{secrets.token_hex(4)}.arrow"
        fs.write_atomic(path, body, fsync=True)
        rows.append(Part(node, path, tuple((t, len(recs)) for t, recs in cells), _digest(body)).row())


#: a part file's columns: the time, and that time's records as one cell
def _part_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("time", pa.int64()), ("records", pa.binary())])


def _arrow_part(times: list[int], cells: list[bytes]) -> bytes:
    """A part file's bytes: one Arrow IPC record batch of ``(time, records)`` rows."""
    import pyarrow as pa

    from tstate.spark.arrays import binaries, ints

    schema = _part_schema()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_batch(pa.record_batch([ints(times), binaries(cells)], schema=schema))  # (no pandas: tstate.spark.arrays)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def _digest(body: bytes) -> str:
    import xxhash

    return xxhash.xxh64(body).hexdigest()  # type: ignore[no-any-return]


def part_cells(fs: Any, part: Part, want: Optional[set[int]] = None) -> Iterator[tuple[int, bytes]]:
    """The ``(time, cell)`` pairs of ``part``'s file for the times in ``want`` (None:
    the part's own times), in time order, checked against the part's digest; only
    those times' cells are taken from the file.  A damaged or missing file raises
    :class:`~tstate.errors.CheckpointError` naming it."""
    from tstate.errors import CheckpointError

    if want is None:
        want = {t for t, _ in part.times}
    if not part.path.endswith(".arrow"):  # an older run's sealed msgpack part
        for t, cell in _open(fs, part.path, "sink output"):
            if t in want:
                yield t, cell
        return
    import pyarrow as pa

    try:
        data = fs.read_bytes(part.path)
        if part.digest and _digest(data) != part.digest:
            raise ValueError("checksum mismatch")
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        times = table.column("time").to_pylist()
        cells = table.column("records")
        picked = [(t, i) for i, t in enumerate(times) if t in want]
        out = [(t, cells[i].as_py()) for t, i in picked]
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException) as exc:
        raise CheckpointError(f"{fs.describe(part.path)}: sink output unreadable ({exc})") from None
    yield from out


def read_part(fs: Any, part: Part, types: Any = None) -> Iterator[tuple[int, list[Any]]]:
    """The ``(time, records)`` of ``part``'s times, in time order; ``types``: the
    dataflow's record classes (:mod:`tstate.spark.record_types`; None: built-ins only)."""
    from tstate.spark.record_types import BUILTIN
    from tstate.spark.records import decode_records

    for t, cell in part_cells(fs, part):
        yield t, decode_records(cell, types or BUILTIN, f"{fs.describe(part.path)} (sink output, time {t})")


def records_of(fs: Any, parts: Iterable[Part], types: Any = None) -> dict[int, list[Any]]:
    """time -> records of ``parts`` (on the driver: for driver sinks only)."""
    out: dict[int, list[Any]] = {}
    for p in parts:
        for t, recs in read_part(fs, p, types):
            out.setdefault(t, []).extend(recs)
    return out


def lazy_records_of(fs: Any, parts: Iterable[Part], types: Any = None) -> dict[int, Any]:
    """time -> the records of ``parts`` as :class:`~tstate.spark.lazy_records.LazyRecords`:
    the cells are read from the files now, decoded only when a sink reads them (their
    count comes from the parts' index entries)."""
    from tstate.spark.lazy_records import LazyRecords

    cells: dict[int, list[bytes]] = {}
    counts: dict[int, int] = {}
    files: dict[int, list[str]] = {}
    for p in parts:
        n = dict(p.times)
        for t, cell in part_cells(fs, p):
            cells.setdefault(t, []).append(cell)
            counts[t] = counts.get(t, 0) + n[t]
            files.setdefault(t, []).append(p.path)
    return {
        t: LazyRecords(cs, counts[t], types, f"{', '.join(fs.describe(f) for f in files[t])} (sink output, time {t})")
        for t, cs in cells.items()
    }


def write_index(fs: Any, batch: int, token: str, lo: int, hi: Optional[int], prev: Optional[str], parts: list[Part]) -> str:
    """The batch's output references, durable before its manifest commits."""
    path = f"{INDEX}/{batch:06d}-{token}.msgpack"
    body = msgpack.packb(
        {"batch": batch, "lo": lo, "hi": hi, "prev": prev, "parts": [p.to_builtins() for p in parts]}, use_bin_type=True
    )
    fs.write_atomic(path, _seal(body), fsync=True)
    return path


def read_index(fs: Any, path: str) -> tuple[int, Optional[str], list[Part]]:
    """``(batch, previous index, parts)`` of an index file."""
    d = _open(fs, path, "output index")
    return int(d["batch"]), d["prev"], [Part.from_builtins(p) for p in d["parts"]]


def history(fs: Any, index: Optional[str]) -> Iterator[tuple[int, list[Part]]]:
    """``(batch, parts)`` of every committed batch with output, newest first, from the
    index a manifest names."""
    while index is not None:
        batch, index, parts = read_index(fs, index)  # noqa: PLW2901
        yield batch, parts


def clean(fs: Any, dirs: Iterable[str], first: int, keep: set[str]) -> int:
    """Delete the part files of batches ``>= first`` in the sink directories ``dirs``
    and the index files of those batches that are not in ``keep`` (uncommitted: a failed
    task attempt, a batch the driver did not commit).  Returns how many went."""
    gone = 0
    for d in [*dirs, INDEX]:
        if d == INDEX:
            names = [(f"{INDEX}/{n}", n[:6]) for n in fs.list(INDEX)]
        else:
            names = [
                (f"{d}/{b}/{n}", b) for b in fs.list_dirs(d) if b.isdigit() and int(b) >= first for n in fs.list(f"{d}/{b}")
            ]
        for path, b in names:
            if b.isdigit() and int(b) >= first and path not in keep:
                fs.delete(path)
                gone += 1
        if d != INDEX:
            for b in fs.list_dirs(d):
                if b.isdigit() and int(b) >= first:
                    fs.remove_dir(f"{d}/{b}")
    return gone


def epoch_runs(epochs: list[int], n: int) -> list[list[int]]:
    """``epochs`` (sorted) cut into at most ``n`` runs of consecutive ones, as even as
    possible: what the tasks of :func:`finalise` take."""
    n = max(1, min(n, len(epochs)))
    size, extra = divmod(len(epochs), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (k < extra)
        out.append(epochs[i:j])
        i = j
    return [r for r in out if r]


def finalise(
    spark: Any, directory: str, sinks: dict[int, Any], parts: list[Part], types: Any = None, tasks: Optional[int] = None
) -> int:
    """Write the epoch files of the file sinks ``sinks`` (node -> sink with
    ``commit_epoch(time, records)``) from the committed ``parts`` in one pass: one Spark
    job whose tasks (``tasks`` per sink, default Spark's parallelism) each take a run
    of consecutive epochs of one sink, read each part holding any of them once (only
    their cells) and write their files in time order.  Returns the epochs written."""
    epochs: dict[int, set[int]] = {}
    for p in parts:
        if p.sink in sinks:
            epochs.setdefault(p.sink, set()).update(t for t, _n in p.times)
    if not epochs:
        return 0
    per = tasks if tasks is not None else max(1, spark.sparkContext.defaultParallelism)
    items: list[tuple[int, list[int], list[list[Any]]]] = []
    for node, ts_ in sorted(epochs.items()):
        for run in epoch_runs(sorted(ts_), per):
            lo, hi = run[0], run[-1]
            refs = [p.to_builtins() for p in parts if p.sink == node and any(lo <= t <= hi for t, _n in p.times)]
            items.append((node, run, refs))
    targets = dict(sinks)

    def write(item: tuple[int, list[int], list[list[Any]]]) -> None:
        from tstate.spark import binstore
        from tstate.spark.record_types import BUILTIN
        from tstate.spark.records import decode_records

        node, run, refs = item
        fs = binstore.store(directory).fs
        want = set(run)
        cells: dict[int, list[tuple[str, bytes]]] = {}
        for ref in refs:  # each part read once, only the run's cells
            part = Part.from_builtins(ref)
            for t, cell in part_cells(fs, part, want & {t for t, _n in part.times}):
                cells.setdefault(t, []).append((part.path, cell))

        def records(t: int) -> Iterator[Any]:
            for path, cell in cells.pop(t, ()):
                yield from decode_records(cell, types or BUILTIN, f"{fs.describe(path)} (sink output, time {t})")

        sink = targets[node]
        if hasattr(sink, "commit_epochs"):  # one durability barrier for the run's files
            sink.commit_epochs((t, records(t)) for t in run)
        else:
            for t in run:
                sink.commit_epoch(t, records(t))

    spark.sparkContext.parallelize(items, len(items)).foreach(write)
    return sum(len(run) for _n, run, _r in items)


def row_of(record: Any) -> dict[str, Any]:
    """A record as a row's columns: a dict as is, a named tuple or attrs instance by its
    fields, a tuple as ``_1, _2, ...``, anything else as ``value``."""
    import attrs

    if isinstance(record, dict):
        return record
    if isinstance(record, tuple) and hasattr(record, "_fields"):
        return record._asdict()  # type: ignore[attr-defined,no-any-return]
    if attrs.has(type(record)):
        return attrs.asdict(record, recurse=False)
    if isinstance(record, (tuple, list)):
        return {f"_{i + 1}": v for i, v in enumerate(record)}
    return {"value": record}


def _infer(spark: Any, directory: str, found: list[tuple[int, Part]], types: Any = None) -> Any:
    """The records' columns, inferred by the executors from every record of ``found``
    (each task merges its records' types; the driver merges the tasks')."""
    from pyspark.sql.types import StructType, _infer_schema, _merge_type

    refs = [p.to_builtins() for _b, p in found]
    if not refs:
        return StructType([])

    def infer(items: Iterable[list[Any]]) -> Iterator[str]:
        from tstate.spark import binstore

        fs_ = binstore.store(directory).fs
        merged = None
        for ref in items:
            for _t, recs in read_part(fs_, Part.from_builtins(ref), types):
                for r in recs:
                    one = _infer_schema(row_of(r))
                    merged = one if merged is None else _merge_type(merged, one)
        if merged is not None:
            yield merged.json()

    merged = None
    for js in spark.sparkContext.parallelize(refs, max(1, min(len(refs), 64))).mapPartitions(infer).collect():
        one = StructType.fromJson(json.loads(js))
        merged = one if merged is None else _merge_type(merged, one)
    return merged if merged is not None else StructType([])


def frame(
    spark: Any, directory: str, fs: Any, found: list[tuple[int, Part]], schema: Any = None, types: Any = None
) -> Any:
    """A DataFrame (``batch``, ``time``, then the records' columns: :func:`row_of`) of
    the parts ``found`` (``(batch, part)``), read by the executors.  ``schema``: the
    records' columns as a Spark DDL string or ``StructType`` (default: inferred from
    every record by a Spark job, as ``createDataFrame`` infers a list of rows; giving it
    saves that pass)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StructField, StructType

    head = [StructField("batch", LongType(), False), StructField("time", LongType(), False)]
    if schema is None:
        cols = _infer(spark, directory, found, types)
    elif isinstance(schema, str):
        cols = spark.createDataFrame([], schema).schema
    else:
        cols = schema
    full = StructType(head + list(cols.fields))
    if not found:
        return spark.createDataFrame([], full)
    arrow = to_arrow_schema(full)
    names = [f.name for f in cols.fields]
    refs = [(b, p.path, [t for t, _ in p.times], p.digest) for b, p in found]

    def read(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from tstate.spark import binstore

        fs_ = binstore.store(directory).fs
        for rb in batches:
            for b, path, times, digest in zip(*(rb.column(i).to_pylist() for i in range(4))):
                rows = []
                for t, recs in read_part(fs_, Part(0, path, tuple((t, 0) for t in times), digest), types):
                    for r in recs:
                        d = row_of(r)
                        rows.append({"batch": b, "time": t, **{k: d.get(k) for k in names}})
                yield pa.RecordBatch.from_pylist(rows, schema=arrow)

    src = spark.createDataFrame(refs, "batch long, path string, times array<long>, digest string")
    return src.repartition(max(1, min(len(refs), spark.sparkContext.defaultParallelism))).mapInArrow(read, full)
