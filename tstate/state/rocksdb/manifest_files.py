"""The SST files a RocksDB MANIFEST names: the version its records end in.

A RocksDB MANIFEST is a log (RocksDB's ``db/log_format.h``: 32 KiB blocks of records,
each with a 7-byte header -- CRC, length, type -- a logical record split into
FIRST / MIDDLE / LAST pieces across blocks) of ``VersionEdit``s (``db/version_edit.cc``,
``VersionEdit::DecodeFrom``): each edit adds files (``kNewFile*``) to and deletes files
(``kDeletedFile``) from a column family's levels, adds or drops column families.  The
live files are what replaying every edit leaves.  :class:`ManifestFiles` replays a
MANIFEST's bytes and says which file numbers its last version holds, so that
:mod:`tstate.state.rocksdb.hard_links` can check that the MANIFEST it copied describes
exactly the files it linked (a compaction's edit appended to the MANIFEST before its
new version is installed would otherwise name output files that were not linked).

It reads incrementally: a MANIFEST only grows (RocksDB appends; a new one gets a new
name), so the replay of a prefix is kept and only the bytes appended since are
decoded (a few hundred bytes per flush or compaction) -- this runs on the thread of a
checkpoint's cut, holding the GIL while it decodes.

Anything it does not know -- a record type other than FULL/FIRST/MIDDLE/LAST (e.g.
recyclable or compressed logs), an atomic group (``kInAtomicGroup``: the group's edits
apply together or not at all), blob files, an edit it cannot decode, a record cut off
at the end -- makes :meth:`ManifestFiles.files` answer ``None`` ("cannot tell"), never
a guess: the caller then does not trust its copy.  Checksums are not verified: the
caller reads bytes RocksDB wrote (and synced) before it looked, and checks the size did
not change meanwhile.

>>> m = ManifestFiles()
>>> m.files("MANIFEST-000001", b"") == frozenset()
True
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ManifestFiles"]

_BLOCK = 32768
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4

# VersionEdit tags (db/version_edit.h)
_COMPARATOR, _LOG_NUMBER, _NEXT_FILE, _LAST_SEQUENCE, _COMPACT_CURSOR = 1, 2, 3, 4, 5
_DELETED_FILE, _NEW_FILE, _PREV_LOG_NUMBER, _MIN_LOG_TO_KEEP = 6, 7, 9, 10
_NEW_FILE2, _NEW_FILE3, _NEW_FILE4 = 100, 102, 103
_CF, _CF_ADD, _CF_DROP, _MAX_CF = 200, 201, 202, 203
_SAFE_IGNORE = 1 << 13  # a tag from the future, length-prefixed: skipped
_TERMINATE = 1  # the end of kNewFile4's custom fields


class _Undecodable(Exception):
    """A MANIFEST this reader cannot replay (see the module docstring)."""


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def more(self) -> bool:
        return self.pos < len(self.buf)

    def varint(self) -> int:
        shift = result = 0
        buf, pos = self.buf, self.pos
        while True:
            if pos >= len(buf) or shift > 63:
                raise _Undecodable("varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7

    def sliced(self) -> bytes:
        n = self.varint()
        if self.pos + n > len(self.buf):
            raise _Undecodable("length-prefixed slice")
        self.pos += n
        return self.buf[self.pos - n: self.pos]


class ManifestFiles:
    """The file numbers a MANIFEST's last version holds, replayed incrementally (see
    the module docstring).  One per database: it keeps the replay of the MANIFEST it
    read last."""

    def __init__(self) -> None:
        self._name: Optional[str] = None
        self._offset = 0  # the end of the last whole logical record replayed
        self._families: dict[int, set[int]] = {}

    def files(self, name: str, data: bytes, start: int = 0) -> Optional[frozenset[int]]:
        """The numbers of the files the MANIFEST ``name`` holds at its end, given its
        bytes from offset ``start`` on (``data``; ``start`` at most what an earlier call
        for the same ``name`` replayed: :meth:`resume_at`), or ``None`` if it cannot
        tell (see the module docstring)."""
        if name != self._name or start > self._offset:
            if start != 0:
                return None
            self._name, self._offset, self._families = name, 0, {}
        skip = self._offset - start
        if skip > len(data):
            return None
        families = {cf: set(files) for cf, files in self._families.items()}
        try:
            end = self._replay(data, start + skip, data[skip:], families)
        except _Undecodable:
            return None
        if end != start + len(data):  # (a record cut off at the end)
            return None
        self._offset, self._families = end, families
        return frozenset(n for files in families.values() for n in files)

    def resume_at(self, name: str) -> int:
        """Where to start reading MANIFEST ``name`` for :meth:`files` (0 unless it was
        replayed before)."""
        return self._offset if name == self._name else 0

    @staticmethod
    def _replay(data: bytes, offset: int, buf: bytes, families: dict[int, set[int]]) -> int:
        """Apply the whole logical records of ``buf`` (the MANIFEST from ``offset``) to
        ``families``; the offset after the last one."""
        pos, done = 0, offset
        pieces: list[bytes] = []
        while pos < len(buf):
            left = _BLOCK - (offset + pos) % _BLOCK
            if left < _HEADER:  # a block's trailer
                pos += left
                if not pieces:
                    done = offset + min(pos, len(buf))
                continue
            if pos + _HEADER > len(buf):
                break
            length = buf[pos + 4] | buf[pos + 5] << 8
            kind = buf[pos + 6]
            if pos + _HEADER + length > len(buf):
                break
            payload = buf[pos + _HEADER: pos + _HEADER + length]
            pos += _HEADER + length
            if kind == _FULL and not pieces:
                _apply(payload, families)
            elif kind == _FIRST and not pieces:
                pieces.append(payload)
                continue
            elif kind == _MIDDLE and pieces:
                pieces.append(payload)
                continue
            elif kind == _LAST and pieces:
                pieces.append(payload)
                _apply(b"".join(pieces), families)
                pieces = []
            else:
                raise _Undecodable(f"record type {kind}")
            done = offset + pos
        return done


def _apply(edit: bytes, families: dict[int, set[int]]) -> None:
    """Apply one VersionEdit to ``families`` (column family id: file numbers)."""
    r = _Reader(edit)
    cf, added, deleted, add_cf, drop_cf = 0, [], [], False, False
    while r.more():
        tag = r.varint()
        if tag in (_LOG_NUMBER, _NEXT_FILE, _LAST_SEQUENCE, _PREV_LOG_NUMBER, _MIN_LOG_TO_KEEP, _MAX_CF):
            r.varint()
        elif tag == _COMPARATOR:
            r.sliced()
        elif tag == _COMPACT_CURSOR:
            r.varint()
            r.sliced()
        elif tag == _DELETED_FILE:
            r.varint()
            deleted.append(r.varint())
        elif tag in (_NEW_FILE, _NEW_FILE2, _NEW_FILE3, _NEW_FILE4):
            added.append(_new_file(r, tag))
        elif tag == _CF:
            cf = r.varint()
        elif tag == _CF_ADD:
            r.sliced()
            add_cf = True
        elif tag == _CF_DROP:
            drop_cf = True
        elif tag & _SAFE_IGNORE:
            r.sliced()
        else:  # an atomic group, blob files, or a tag unknown here
            raise _Undecodable(f"tag {tag}")
    if add_cf:
        families[cf] = set()
    if drop_cf:
        families.pop(cf, None)
        return
    files = families.setdefault(cf, set())
    files.difference_update(deleted)
    files.update(added)


def _new_file(r: _Reader, tag: int) -> int:
    """Read one added file's entry; its number."""
    r.varint()  # level
    number = r.varint()
    if tag == _NEW_FILE3:
        r.varint()  # path id
    r.varint()  # size
    r.sliced()  # smallest key
    r.sliced()  # largest key
    if tag != _NEW_FILE:
        r.varint()  # smallest sequence number
        r.varint()  # largest sequence number
    if tag == _NEW_FILE4:
        while True:
            custom = r.varint()
            if custom == _TERMINATE:
                break
            r.sliced()
    return number
