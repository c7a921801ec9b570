"""Garbage collection of a checkpoint store (:class:`GarbageCollection`, a base of
:class:`tstate.checkpoint.store.CheckpointStore`): after each commit, the manifests
beyond ``retain`` and the files nothing kept references are deleted -- never evidence
of a failure, never through a symlink (see the module docstring of
:mod:`tstate.checkpoint.store`).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Iterator

from attrs import define

from tstate.checkpoint.fs import TMP_MARK
from tstate.checkpoint.layout import DATA as _DATA
from tstate.checkpoint.layout import MANIFESTS as _MANIFESTS
from tstate.checkpoint.layout import UNUSABLE as _UNUSABLE
from tstate.checkpoint.layout import parse_attached_name, parse_data_name
from tstate.checkpoint.manifest import ATTACHED_DIRS, Manifest, parse_manifest_name
from tstate.checkpoint.reading import StoreReader
from tstate.errors import CheckpointError

__all__ = ["GarbageCollection"]


@define
class _Sorted:
    """The committed manifests as one collection sees them (:meth:`GarbageCollection._sort`)."""

    names: list[str]  # every name in manifests/
    ids: list[int]  # the ids of the committed manifests
    kept: list[Manifest]  # the newest ``retain`` usable ones
    evidence: list[Manifest]  # the unusable ones (kept)
    doomed: list[Manifest]  # the usable ones beyond ``retain``
    unreadable: list[int]  # manifests that do not parse (kept)


class GarbageCollection(StoreReader):
    """``_collect`` after each commit, and the symlink checks that keep it possible."""

    def _links(self) -> list[str]:
        """The store's own directories (``manifests/``, ``data/`` with its operator and
        bin directories, ``held/``) that are symlinks, each described with where it
        resolves; ``[]`` on a backend without symlinks."""
        linked_dirs = getattr(self.fs, "linked_dirs", None)  # (LocalFS; object stores have no links)
        if linked_dirs is None:
            return []
        tops = {_MANIFESTS: 0, _DATA: 2, **{d.rstrip("/"): 0 for d in ATTACHED_DIRS}}
        root = os.path.realpath(self.directory)
        out = []
        for rel, real in linked_dirs(tops):
            inside = real == root or real.startswith(root.rstrip(os.sep) + os.sep)
            out.append(f"{self.fs.describe(rel)} -> {real}{'' if inside else ' (outside the store)'}")
        return out

    def _refuse_links(self) -> None:
        """Refuse (:class:`~tstate.errors.CheckpointError`) a store whose own
        directories are symlinks: it would write through them, but garbage collection
        never deletes through a symlink, so the store would grow without bound."""
        links = self._links()
        if links:
            raise CheckpointError(
                f"{self._where}: {'; '.join(links)}: a symlinked directory inside a checkpoint store "
                "is written through but never garbage-collected (nothing is deleted through a symlink), "
                "so the store would grow without bound. Replace each link by a real directory (move what "
                "it points to into its place), or make the checkpoint directory itself the link"
            )
        self._linked = False

    def _delete(self, path: str) -> None:
        """Delete one file for garbage collection; a refusal (a path through a symlink)
        or an error is noted in ``problems`` and the file left alone (with a
        ``RuntimeWarning`` the first time a path is refused)."""
        try:
            self.fs.delete(path)
        except (OSError, ValueError) as exc:
            self._linked = self._linked or isinstance(exc, PermissionError)  # (a symlink on the way)
            problem = f"{path}: not deleted ({exc})"
            self.problems.append(problem)
            if path not in self._refused:
                self._refused.add(path)
                warnings.warn(f"{self._where}: garbage collection: {problem}", RuntimeWarning, stacklevel=2)

    def _collect(self, new: Manifest) -> None:
        """Delete manifests beyond ``retain`` and files nothing kept references (module
        docs) -- never evidence of a failure:

        - an *unusable* checkpoint (one :meth:`latest` skipped, in this process or --
          marked ``ckpt-N.unusable`` -- in an earlier one) is kept with all its files,
          and does not count towards ``retain``;
        - an *unreadable* manifest (torn, corrupt) is kept, and since which files it
          names is unknown, so is every file of a checkpoint up to its id.

        Usually *incremental*: only the files of the manifests deleted now are candidates,
        which costs nothing per untouched bin.  A *full scan* of ``data/`` and of the
        attached files' directories (which also finds orphans and temporaries of crashed
        writers) runs on this store's first commit and every ``gc_scan_every`` commits.
        Every deletion checks its path stays in the store (no symlink on the way:
        :meth:`tstate.checkpoint.fs.LocalFS.delete`); a refused one is noted in
        ``problems``."""
        scan = not self._scanned or self._commits_since_scan + 1 >= self.gc_scan_every
        found = self._sort(new)
        for m in found.doomed:
            self._delete(m.name)
        if found.doomed and self.fsync:
            self.fs.fsync_dir(_MANIFESTS)  # manifests are gone for good before their files go
        # files of checkpoints up to an unreadable manifest: it may name any of them
        protect = max(found.unreadable, default=0)
        keep = (*found.kept, *found.evidence)
        referenced = {r.path for m in keep for r in m.files()}
        # a manifest from before attached files were listed names its held file only in
        # its metadata: that keeps it too
        referenced |= {p for m in keep for p in _attached_in(m.meta, ATTACHED_DIRS)}
        # files an open writer shares from an earlier checkpoint (a RocksDB store's
        # unchanged SST files): its manifest will name them (CheckpointWriter.share
        # runs under the store's lock, which this collection holds)
        referenced |= {r.path for w in list(self._active.values()) for r in list(w._attached)}
        if not scan:
            self._commits_since_scan += 1
            self._collect_doomed(found.doomed, referenced, protect)
            return
        self._scanned, self._commits_since_scan = True, 0
        self._warn_links()
        self._sweep_manifests(new, found)
        self._sweep_files(new, referenced, protect)

    def _sort(self, new: Manifest) -> _Sorted:
        """Sort the committed manifests older than ``new`` into kept, evidence, doomed
        and unreadable (newest first; ``new`` is kept)."""
        names = self.fs.list(_MANIFESTS)
        marked = {int(um.group(1)) for n in names if (um := _UNUSABLE.match(n))}
        ids = sorted(i for i in (parse_manifest_name(n) for n in names) if i is not None)
        found = _Sorted(names, ids, [new], [], [], [])
        for i in reversed(ids):
            if i >= new.id:  # new itself, or another process committed meanwhile: not ours to judge
                continue
            try:
                m = self._load(i)
            except CheckpointError as exc:
                self.problems.append(f"kept unreadable {exc} (evidence: garbage collection never deletes it)")
                found.unreadable.append(i)
                continue
            if i in self._bad_ids or i in marked:
                found.evidence.append(m)
                self.problems.append(f"kept unusable checkpoint {i} (evidence: garbage collection never deletes it)")
            elif len(found.kept) >= self.retain:
                found.doomed.append(m)
            else:
                found.kept.append(m)
        return found

    def _collect_doomed(self, doomed: list[Manifest], referenced: set[str], protect: int) -> None:
        """The incremental collection: the files of the ``doomed`` manifests that no kept
        one references, then the directories they leave empty."""
        dirs: set[str] = set()
        for m in doomed:
            for ref in m.files():
                o = _owner(ref.path)
                if ref.path in referenced or o is None or o <= protect:
                    continue
                self._delete(ref.path)
                if ref.path.startswith(_DATA + "/"):
                    dirs.add(ref.path.rsplit("/", 1)[0])
        for d in sorted(dirs):
            self.fs.remove_dir(d)
            self.fs.remove_dir(d.rsplit("/", 1)[0])

    def _warn_links(self) -> None:
        """A listing skips a symlinked directory: say so, and stop writing."""
        for link in self._links():
            self._linked = True
            problem = f"{link}: a symlink, not garbage-collected; the next checkpoint is refused"
            self.problems.append(problem)
            if link not in self._refused:
                self._refused.add(link)
                warnings.warn(f"{self._where}: garbage collection: {problem}", RuntimeWarning, stacklevel=3)

    def _sweep_manifests(self, new: Manifest, found: _Sorted) -> None:
        """Delete the manifests' temporaries, and the markers of checkpoints removed."""
        manifest_ids = set(found.ids)
        for name in found.names:
            if TMP_MARK in name:
                tmp_owner = parse_manifest_name(name.split(TMP_MARK, 1)[0])
                if tmp_owner is not None and tmp_owner <= new.id:
                    self._delete(f"{_MANIFESTS}/{name}")
            elif (u := _UNUSABLE.match(name)) and int(u.group(1)) not in manifest_ids and int(u.group(1)) <= new.id:
                self._delete(f"{_MANIFESTS}/{name}")  # its checkpoint was removed (by hand): the marker goes too

    def _sweep_files(self, new: Manifest, referenced: set[str], protect: int) -> None:
        """The full scan: every file of ``data/`` and the attached directories that is
        garbage (see :meth:`_collect`), then the store's leftover probes."""
        fs = self.fs
        active = set(self._active)

        def garbage(path: str, parsed: tuple[int, str] | None) -> bool:
            if path in referenced or parsed is None:  # None: not a name this store writes, leave it alone
                return False
            o, token = parsed
            if any(token.startswith(a) for a in active) or o > new.id:  # a checkpoint still being written
                return False
            return o > protect

        for op in fs.list_dirs(_DATA):
            op_path = f"{_DATA}/{op}"
            for b in fs.list_dirs(op_path):
                bin_path = f"{op_path}/{b}"
                for name in fs.list(bin_path):
                    path = f"{bin_path}/{name}"
                    if garbage(path, parse_data_name(name)):
                        self._delete(path)
                fs.remove_dir(bin_path)
            fs.remove_dir(op_path)
        for d in ATTACHED_DIRS:
            d = d.rstrip("/")
            for name in fs.list(d):
                path = f"{d}/{name}"
                if garbage(path, parse_attached_name(name)):
                    self._delete(path)
        for name in fs.list(""):
            if name.startswith(".probe" + TMP_MARK):
                self._delete(name)


def _owner(path: str) -> int | None:
    """The id of the checkpoint that wrote ``path`` (a data or attached file), if its
    name is one this store writes."""
    name = path.rsplit("/", 1)[-1]
    parsed = parse_data_name(name) if path.startswith(_DATA + "/") else parse_attached_name(name)
    return parsed[0] if parsed is not None else None


def _attached_in(value: Any, dirs: tuple[str, ...], depth: int = 0) -> Iterator[str]:
    """Strings naming a file of ``dirs`` anywhere in metadata ``value``."""
    if isinstance(value, str):
        if value.startswith(dirs):
            yield value
    elif depth < 4 and (isinstance(value, (list, tuple)) or hasattr(value, "values")):
        items = value.values() if hasattr(value, "values") else value
        for v in items:
            yield from _attached_in(v, dirs, depth + 1)

