"""Manifests: what one committed checkpoint is made of, and their on-disk encoding.

A :class:`Manifest` lists, for every operator, its stored state schema, its bin count
and, for every non-empty bin, the bin's **chain**: the files whose decoding, in order,
gives the bin's state (a snapshot first, then deltas; see :mod:`tstate.checkpoint.delta`).
Each file is a :class:`FileRef`: its path relative to the checkpoint directory, its size
and its xxHash64 checksum.  Files are shared between manifests: a bin untouched since
the previous checkpoint keeps the very same chain.

**Encoding** (``manifests/ckpt-000042.manifest``)::

    b"TSTCKPT1" + msgpack(body) + xxh64(b"TSTCKPT1" + msgpack(body)) as 8 bytes big-endian

where ``body`` is ``{"id", "time", "created", "format", "operators": {name: {"schema",
"bins", "hash", "chains": {bin: [[path, size, xxh64], ...]}}}, "meta", "attached": [[path, size,
xxh64], ...]}``.  ``hash``: the :class:`~tstate.hash_kind.HashKind` value of the hash
the operator's keys were binned with; an entry without one was written before it was
recorded, when every key used ``key_hash``.  ``format`` is the
checkpoint format of the data files the checkpoint wrote (2: msgspec, see
:mod:`tstate.types.wire`); a manifest without one was written before formats were
recorded (format 1).  Files shared with older checkpoints keep their own format (each
file's envelope names it); this version reads formats 1 and 2 and refuses to resume
from a newer one (:func:`check_format`).  ``attached``: files outside ``data/`` that this
checkpoint alone needs, such as the Spark backend's held-back records under ``held/``;
absent in manifests written before it existed.  The trailing checksum makes a
torn (truncated) or bit-flipped manifest detectable: :func:`decode_manifest` raises
:class:`~tstate.errors.CheckpointError` for it.  No pickle: a manifest is data only.

>>> ref = FileRef("data/op-00000000/0/000001-00aa00bb-snap.bin", 10, "0123456789abcdef")
>>> m = Manifest(1, 5, 0.0, {"op": OperatorEntry({"kind": "int", "name": "int"}, 1, {0: (ref,)})}, {"k": 1})
>>> decode_manifest(encode_manifest(m)) == m
True
>>> m.file_count, m.total_size, ref.kind, m.format
(1, 10, 'snap', 2)
>>> decode_manifest(encode_manifest(m)[:-1])
Traceback (most recent call last):
...
tstate.errors.CheckpointError: torn or corrupt manifest (checksum mismatch)
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import Any, Iterator, Mapping

import msgpack
import xxhash
from attrs import field, frozen

from tstate.errors import CheckpointError
from tstate.hash_kind import HashKind
from tstate.state.payload import decode_time, encode_time
from tstate.types.wire import FORMAT

__all__ = [
    "FileRef",
    "OperatorEntry",
    "Manifest",
    "encode_manifest",
    "decode_manifest",
    "manifest_name",
    "parse_manifest_name",
    "check_format",
    "FORMAT",
]

MAGIC = b"TSTCKPT1"
_SUM = 8  # bytes of the trailing xxh64 digest
_NAME = re.compile(r"^ckpt-(\d+)\.manifest$")
_FILE_KIND = re.compile(r"-(snap|delta|sstd|sst)\d*\.bin$")


def manifest_name(checkpoint_id: int) -> str:
    """The path of checkpoint ``checkpoint_id``'s manifest: ``manifests/ckpt-000042.manifest``."""
    return f"manifests/ckpt-{checkpoint_id:06d}.manifest"


def parse_manifest_name(name: str) -> int | None:
    """The checkpoint id of a manifest file name (``ckpt-000042.manifest`` → 42), else None."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


@frozen
class FileRef:
    """One data file of a checkpoint: ``path`` relative to the checkpoint directory
    (``/``-separated), ``size`` in bytes and ``xxh64`` (hex digest of its bytes)."""

    path: str
    size: int
    xxh64: str

    @property
    def kind(self) -> str:
        """``"snap"`` or ``"delta"`` (from the file name; ``"sst"``: the whole bin as a
        RocksDB SST file, ``"sstd"``: the records of the keys changed since as one,
        written by the Spark backend's RocksDB state, :mod:`tstate.spark.rocks_bins`),
        ``"?"`` for a foreign name."""
        m = _FILE_KIND.search(self.path)
        return m.group(1) if m else "?"

    @property
    def name(self) -> str:
        """The file name (the last path component)."""
        return self.path.rsplit("/", 1)[-1]


def _freeze_chains(chains: Mapping[int, tuple[FileRef, ...]]) -> Mapping[int, tuple[FileRef, ...]]:
    return MappingProxyType({int(b): tuple(c) for b, c in sorted(chains.items())})


@frozen
class OperatorEntry:
    """One operator in a manifest: its state ``schema`` (``Schema.to_builtins()``), its
    ``bins`` count, ``chains`` (bin → files, snapshot first; empty bins are absent) and
    the ``hash`` its keys were binned with (:class:`~tstate.hash_kind.HashKind`)."""

    schema: Mapping[str, Any]
    bins: int
    chains: Mapping[int, tuple[FileRef, ...]] = field(converter=_freeze_chains, factory=dict)
    hash: HashKind = HashKind.KEY_HASH

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the stored schema (what its files' envelopes carry)."""
        from tstate.types.schema import Schema

        return Schema.from_builtins(self.schema).fingerprint


def _tuple_of_refs(refs: Any) -> tuple[FileRef, ...]:
    return tuple(refs)


@frozen(repr=False)
class Manifest:
    """One committed checkpoint (see the module docstring).

    ``id`` increases with every commit; ``time`` is the checkpoint's logical time (the
    state of every bin after all times ``< time``); ``created`` the wall-clock unix time
    of the commit; ``operators`` name → :class:`OperatorEntry`; ``meta`` the engine's
    metadata (source positions, sink progress, worker count...) as msgpack returns it
    (tuples come back as lists); ``format`` the checkpoint format of the files it wrote
    (see the module docstring)."""

    id: int
    time: Any
    created: float
    operators: Mapping[str, OperatorEntry] = field(converter=lambda d: MappingProxyType(dict(sorted(d.items()))))
    meta: Mapping[str, Any] = field(factory=dict, converter=lambda d: MappingProxyType(dict(d)))
    format: int = FORMAT
    #: files outside ``data/`` that belong to this checkpoint only (``held/...``): verified
    #: with the data files, deleted with the manifest
    attached: tuple[FileRef, ...] = field(default=(), converter=_tuple_of_refs)

    def __repr__(self) -> str:
        ops = ", ".join(f"{n}: {len(e.chains)}/{e.bins} bins" for n, e in self.operators.items())
        return (
            f"Manifest(id={self.id}, time={self.time!r}, {{{ops}}}, files={self.file_count}, "
            f"meta={sorted(self.meta)})"
        )

    @property
    def name(self) -> str:
        """The manifest's path relative to the checkpoint directory."""
        return manifest_name(self.id)

    def files(self) -> Iterator[FileRef]:
        """Every file referenced (data files, then :attr:`attached` ones), once each
        (chains may share files)."""
        seen: set[str] = set()
        for entry in self.operators.values():
            for chain in entry.chains.values():
                for ref in chain:
                    if ref.path not in seen:
                        seen.add(ref.path)
                        yield ref
        for ref in self.attached:
            if ref.path not in seen:
                seen.add(ref.path)
                yield ref

    @property
    def file_count(self) -> int:
        """How many distinct data files the checkpoint references."""
        return sum(1 for _ in self.files())

    @property
    def total_size(self) -> int:
        """Total bytes of the distinct data files referenced (the manifest excluded)."""
        return sum(r.size for r in self.files())

    def chain(self, operator: str, bin: int) -> tuple[FileRef, ...]:
        """The chain of one bin (``()`` if the operator or bin has none)."""
        entry = self.operators.get(operator)
        if entry is None:
            return ()
        return entry.chains.get(bin, ())


def encode_manifest(m: Manifest) -> bytes:
    """The bytes of a manifest file (see the module docstring)."""
    body = {
        "id": m.id,
        "time": encode_time(m.time),
        "created": m.created,
        "format": m.format,
        "operators": {
            name: {
                "schema": dict(e.schema),
                "bins": e.bins,
                "hash": e.hash.value,
                "chains": {b: [[r.path, r.size, r.xxh64] for r in c] for b, c in e.chains.items()},
            }
            for name, e in m.operators.items()
        },
        "meta": dict(m.meta),
    }
    if m.attached:
        body["attached"] = [[r.path, r.size, r.xxh64] for r in m.attached]
    data = MAGIC + msgpack.packb(body, use_bin_type=True)
    return data + xxhash.xxh64_digest(data)


def _data_path(p: Any) -> str:
    """A data file path from a manifest: relative, below ``data/``, no ``..``."""
    if type(p) is not str or not p.startswith("data/") or ".." in p.split("/") or "\\" in p:
        raise ValueError(f"data file path {p!r} outside data/")
    return p


#: the directories an attached file may live in (``sst/``: the files of RocksDB
#: keyed-state stores, :mod:`tstate.checkpoint.sst_files`)
ATTACHED_DIRS = ("held/", "sst/")


def _attached_path(p: Any) -> str:
    """An attached file path from a manifest: relative, below one of
    :data:`ATTACHED_DIRS`, no ``..``."""
    if type(p) is not str or not p.startswith(ATTACHED_DIRS) or ".." in p.split("/") or "\\" in p:
        raise ValueError(f"attached file path {p!r} outside {', '.join(ATTACHED_DIRS)}")
    return p


def _hash_kind(value: Any) -> HashKind:
    """A :class:`HashKind` from its stored value (a ValueError naming it if unknown)."""
    try:
        return HashKind(value)
    except ValueError:
        known = ", ".join(repr(k.value) for k in HashKind)
        raise ValueError(f"unknown key hash {value!r} (this version knows {known})") from None


def decode_manifest(data: bytes) -> Manifest:
    """Parse :func:`encode_manifest` bytes; :class:`~tstate.errors.CheckpointError` (with
    the reason, not the file name: callers add it) for anything torn, corrupt or foreign."""
    if not data.startswith(MAGIC) and not MAGIC.startswith(data):
        raise CheckpointError("corrupt manifest (bad magic: not a tstate checkpoint manifest)")
    if len(data) < len(MAGIC) + _SUM:
        raise CheckpointError(f"torn manifest (only {len(data)} bytes)")
    body, digest = data[:-_SUM], data[-_SUM:]
    if xxhash.xxh64_digest(body) != digest:
        raise CheckpointError("torn or corrupt manifest (checksum mismatch)")
    try:
        obj = msgpack.unpackb(body[len(MAGIC) :], strict_map_key=False)
        operators = {}
        for name, e in obj["operators"].items():
            chains = {}
            for b, c in e["chains"].items():
                chains[int(b)] = tuple(FileRef(_data_path(p), int(s), str(h)) for p, s, h in c)
            bins = e["bins"]
            if type(bins) is not int or type(e["schema"]) is not dict or type(name) is not str:
                raise TypeError("malformed operator entry")
            operators[name] = OperatorEntry(e["schema"], bins, chains, _hash_kind(e.get("hash", HashKind.KEY_HASH.value)))
        created = float(obj["created"])
        fmt = obj.get("format", 1)
        if type(obj["id"]) is not int or not math.isfinite(created) or type(obj["meta"]) is not dict:
            raise TypeError("malformed header")
        if type(fmt) is not int or fmt < 1:
            raise TypeError(f"malformed format {fmt!r}")
        attached = tuple(FileRef(_attached_path(p), int(s), str(h)) for p, s, h in obj.get("attached", ()))
        return Manifest(obj["id"], decode_time(obj["time"]), created, operators, obj["meta"], fmt, attached)
    except (KeyError, TypeError, ValueError, AttributeError, msgpack.UnpackException) as exc:
        raise CheckpointError(f"malformed manifest ({exc})") from None


def check_format(m: Manifest, where: str) -> None:
    """Refuse to resume from a checkpoint written in a newer format than this version
    reads (:class:`~tstate.errors.CheckpointError` naming it and ``where`` it is)."""
    if m.format > FORMAT:
        raise CheckpointError(
            f"checkpoint {m.id} in {where} was written in checkpoint format {m.format} by a newer tstate; "
            f"this one reads formats 1 to {FORMAT}: resume with that version, or start without it"
        )
