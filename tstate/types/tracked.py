"""Tracked containers: a dict and a list that remember what changed, for delta checkpoints.

:class:`Map` behaves like a ``dict`` and :class:`Array` like a ``list``, and both can be
used in state declarations (``Map[str, int]``, ``Array[Leg]``).  Each records which
entries changed since its last :meth:`~Map.mark_clean` (or :meth:`~Map.take_changes`),
so a checkpoint can store only those.  A container that was never marked clean has no
known base: its changes are relative to *empty*.

**In-place mutation of a value.**  A container cannot see ``m["a"].append(1)``.  So
handing out a *mutable* value -- anything but ``int``, ``float``, ``str``, ``bytes``,
``bool``, ``None``, ``datetime``, ``date``, enum members and tuples / frozensets of
these -- through ``m[k]``, ``get``, ``values()``, ``items()``, ``setdefault``, iteration
over an ``Array`` or a slice of it, marks that entry changed.  :meth:`Map.peek` and
:meth:`Array.peek` read without marking (do not mutate what they return), and ``touch``
marks an entry explicitly.

>>> m = Map({"a": 1})
>>> m.mark_clean()
>>> m["b"] = 2; del m["a"]
>>> m.changes()
MapChanges(changed=frozenset({'b'}), deleted=frozenset({'a'}))
>>> a = Array([1, 2, 3])
>>> a.mark_clean()
>>> a.append(4); a[0] = 0
>>> a.changes()
ArrayChanges(base_len=3, keep=3, overwritten=(0,), length=4)
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, MutableSequence
from typing import Any, Generic, NamedTuple, TypeVar, overload

from attrs import frozen

__all__ = ["Map", "Array", "MapChanges", "ArrayChanges", "is_immutable"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

_IMMUTABLE_TYPES = frozenset({int, float, str, bytes, bool, type(None), _dt.datetime, _dt.date})
_MISSING: Any = object()


def is_immutable(value: Any) -> bool:
    """Whether ``value`` cannot be changed in place (see the module docstring)."""
    t = type(value)
    if t in _IMMUTABLE_TYPES or isinstance(value, enum.Enum):
        return True
    if t is tuple or t is frozenset:
        return all(is_immutable(v) for v in value)
    return False


class MapChanges(NamedTuple):
    """The keys of a :class:`Map` set (added or assigned, or possibly mutated) and the
    keys deleted since its last clean point.  The two sets are disjoint."""

    changed: frozenset[Any]
    deleted: frozenset[Any]


class Map(MutableMapping[K, V], Generic[K, V]):
    """A ``dict`` that records per-key changes since :meth:`mark_clean`.

    >>> m: Map[str, list[int]] = Map(a=[1])
    >>> m.take_changes()
    MapChanges(changed=frozenset({'a'}), deleted=frozenset())
    >>> m["a"].append(2)          # reading a mutable value marks it changed
    >>> m.changes().changed, m == {"a": [1, 2]}
    (frozenset({'a'}), True)
    """

    __slots__ = ("_data", "_changed", "_deleted", "_new", "_has_base")

    def __init__(self, data: Mapping[K, V] | Iterable[tuple[K, V]] = (), /, **kwargs: V) -> None:
        self._data: dict[K, V] = dict(data, **kwargs)
        self._changed: set[K] = set(self._data)
        self._deleted: set[K] = set()
        self._new: set[K] = set(self._data)  # changed keys that are not in the base
        self._has_base = False

    @classmethod
    def _clean(cls, data: dict[K, V]) -> Map[K, V]:
        """A map owning ``data``, already clean (used when decoding)."""
        m = cls.__new__(cls)
        m._data = data
        m._changed, m._deleted, m._new = set(), set(), set()
        m._has_base = True
        return m

    # ---------------------------------------------------------------- change log

    def changes(self) -> MapChanges:
        """Keys changed or added, and keys deleted, since the last clean point."""
        return MapChanges(frozenset(self._changed), frozenset(self._deleted))

    def mark_clean(self) -> None:
        """Forget the changes: the current value becomes the base."""
        self._changed.clear()
        self._deleted.clear()
        self._new.clear()
        self._has_base = True

    def take_changes(self) -> MapChanges:
        """:meth:`changes`, then :meth:`mark_clean`."""
        out = self.changes()
        self.mark_clean()
        return out

    @property
    def has_base(self) -> bool:
        """Whether the map was ever marked clean (else its changes are relative to ``{}``)."""
        return self._has_base

    @property
    def dirty(self) -> bool:
        """Whether anything changed since the last clean point."""
        return bool(self._changed or self._deleted)

    def touch(self, key: K) -> None:
        """Mark ``key`` changed (after mutating a value obtained with :meth:`peek`)."""
        if key not in self._data:
            raise KeyError(key)
        self._changed.add(key)

    def peek(self, key: K, default: Any = None) -> Any:
        """``get`` without marking the key changed: do not mutate the result."""
        return self._data.get(key, default)

    # ---------------------------------------------------------------- dict protocol

    def _read(self, key: K, value: V) -> V:
        if type(value) not in _IMMUTABLE_TYPES and not is_immutable(value):
            self._changed.add(key)
        return value

    def __getitem__(self, key: K) -> V:
        return self._read(key, self._data[key])

    def get(self, key: K, default: Any = None) -> Any:
        data = self._data
        if key in data:
            return self._read(key, data[key])
        return default

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self._data:
            if key in self._deleted:
                self._deleted.discard(key)
            else:
                self._new.add(key)
        self._data[key] = value
        self._changed.add(key)

    def __delitem__(self, key: K) -> None:
        del self._data[key]
        self._changed.discard(key)
        if key in self._new:
            self._new.discard(key)
        else:
            self._deleted.add(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        if key in self._data:
            value = self._data[key]
            del self[key]
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[K, V]:
        if not self._data:
            raise KeyError("popitem(): map is empty")
        key = next(reversed(self._data))
        return key, self.pop(key)

    def setdefault(self, key: K, default: Any = None) -> Any:
        if key in self._data:
            return self[key]
        self[key] = default
        return default

    def clear(self) -> None:
        for key in list(self._data):
            del self[key]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Map):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Map({self._data!r})"

    def copy(self) -> Map[K, V]:
        """A new, unclean map with the same entries (values are shared)."""
        return Map(self._data)

    # ---------------------------------------------------------------- deltas

    def _apply(self, changed: Iterable[tuple[K, V]], deleted: Iterable[K]) -> None:
        """Apply a decoded delta, then mark clean."""
        data = self._data
        for key in deleted:
            data.pop(key, None)
        data.update(changed)
        self.mark_clean()


@frozen
class ArrayChanges:
    """What happened to an :class:`Array` since its last clean point, as a log that
    rebuilds it from the base: keep the first ``keep`` items of the base (``keep <
    base_len`` means it was truncated), replace the items at ``overwritten`` (all below
    ``keep``), then append the items ``keep .. length``."""

    base_len: int
    keep: int
    overwritten: tuple[int, ...]
    length: int

    @property
    def truncated(self) -> bool:
        """Whether items of the base were removed (or shifted)."""
        return self.keep < self.base_len

    @property
    def appended(self) -> range:
        """The indexes of the items appended after the kept prefix."""
        return range(self.keep, self.length)

    def __bool__(self) -> bool:
        return bool(self.truncated or self.overwritten or self.length != self.keep)


class Array(MutableSequence[T], Generic[T]):
    """A ``list`` that records appends, overwrites and truncation since :meth:`mark_clean`.

    Appending is the cheap, common case; deleting or inserting before the end shortens
    the kept prefix (everything after it counts as appended); ``sort`` and ``reverse``
    rewrite the whole array.

    >>> a: Array[int] = Array([5, 6, 7])
    >>> a.mark_clean()
    >>> a.pop(); a.extend([8, 9]); a[0] = 1
    7
    >>> c = a.take_changes()
    >>> c.truncated, c.overwritten, list(c.appended), a
    (True, (0,), [2, 3], Array([1, 6, 8, 9]))
    """

    __slots__ = ("_data", "_base_len", "_keep", "_overwritten", "_has_base")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._data: list[T] = list(items)
        self._base_len = 0
        self._keep = 0
        self._overwritten: set[int] = set()
        self._has_base = False

    @classmethod
    def _clean(cls, data: list[T]) -> Array[T]:
        """An array owning ``data``, already clean (used when decoding)."""
        a = cls.__new__(cls)
        a._data = data
        a._overwritten = set()
        a._base_len = a._keep = len(data)
        a._has_base = True
        return a

    # ---------------------------------------------------------------- change log

    def changes(self) -> ArrayChanges:
        """The change log since the last clean point."""
        return ArrayChanges(self._base_len, self._keep, tuple(sorted(self._overwritten)), len(self._data))

    def mark_clean(self) -> None:
        """Forget the changes: the current value becomes the base."""
        self._base_len = self._keep = len(self._data)
        self._overwritten.clear()
        self._has_base = True

    def take_changes(self) -> ArrayChanges:
        """:meth:`changes`, then :meth:`mark_clean`."""
        out = self.changes()
        self.mark_clean()
        return out

    @property
    def has_base(self) -> bool:
        """Whether the array was ever marked clean (else its changes are relative to ``[]``)."""
        return self._has_base

    @property
    def dirty(self) -> bool:
        """Whether anything changed since the last clean point."""
        return bool(self._overwritten) or not (self._keep == self._base_len == len(self._data))

    def touch(self, index: int) -> None:
        """Mark the item at ``index`` changed (after mutating what :meth:`peek` returned)."""
        i = self._index(index)
        if i < self._keep:
            self._overwritten.add(i)

    def peek(self, index: int) -> T:
        """``self[index]`` without marking it changed: do not mutate the result."""
        return self._data[index]

    def _index(self, index: int) -> int:
        n = len(self._data)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("Array index out of range")
        return i

    def _cut(self, at: int) -> None:
        """Items from ``at`` on moved or vanished: they count as appended now."""
        if at < self._keep:
            self._keep = at
            self._overwritten = {i for i in self._overwritten if i < at}

    def _mark_read(self, i: int, value: T) -> T:
        if i < self._keep and type(value) not in _IMMUTABLE_TYPES and not is_immutable(value):
            self._overwritten.add(i)
        return value

    # ---------------------------------------------------------------- list protocol

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        data = self._data
        if isinstance(index, slice):
            out = data[index]
            for i in range(*index.indices(len(data))):
                self._mark_read(i, data[i])
            return out
        value = data[index]
        if type(value) in _IMMUTABLE_TYPES:
            return value
        return self._mark_read(self._index(index), value)

    @overload
    def __setitem__(self, index: int, value: T) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[T]) -> None: ...

    def __setitem__(self, index: int | slice, value: Any) -> None:
        data = self._data
        if isinstance(index, slice):
            values = list(value)
            span = range(*index.indices(len(data)))
            data[index] = values
            if len(values) == len(span):
                keep = self._keep
                self._overwritten.update(i for i in span if i < keep)
            else:  # a plain slice changed length (list allows it only for step 1)
                self._cut(span.start)
            return
        i = self._index(index)
        data[i] = value
        if i < self._keep:
            self._overwritten.add(i)

    def __delitem__(self, index: int | slice) -> None:
        if isinstance(index, slice):
            span = range(*index.indices(len(self._data)))
            del self._data[index]
            if span:
                self._cut(min(span[0], span[-1]))
            return
        i = self._index(index)
        del self._data[i]
        self._cut(i)

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[T]:
        keep = self._keep
        for i, value in enumerate(self._data):
            if i < keep and type(value) not in _IMMUTABLE_TYPES and not is_immutable(value):
                self._overwritten.add(i)
            yield value

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __reversed__(self) -> Iterator[T]:
        for i in range(len(self._data) - 1, -1, -1):
            yield self[i]

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        return self._data.index(value, start, len(self._data) if stop is None else stop)

    def count(self, value: Any) -> int:
        return self._data.count(value)

    def insert(self, index: int, value: T) -> None:
        n = len(self._data)
        i = max(0, index + n) if index < 0 else min(index, n)
        self._data.insert(i, value)
        self._cut(i)

    def append(self, value: T) -> None:
        self._data.append(value)

    def extend(self, values: Iterable[T]) -> None:
        self._data.extend(list(values) if values is self else values)

    def __iadd__(self, values: Iterable[T]) -> Array[T]:
        self.extend(values)
        return self

    def pop(self, index: int = -1) -> T:
        i = self._index(index)
        value = self._data.pop(i)
        self._cut(i)
        return value

    def remove(self, value: T) -> None:
        del self[self._data.index(value)]

    def clear(self) -> None:
        self._data.clear()
        self._cut(0)

    def reverse(self) -> None:
        self._data.reverse()
        self._cut(0)

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        """Sort in place, like ``list.sort`` (the whole array counts as rewritten)."""
        self._data.sort(key=key, reverse=reverse)
        self._cut(0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Array):
            return self._data == other._data
        if isinstance(other, list):
            return self._data == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Array({self._data!r})"

    def copy(self) -> Array[T]:
        """A new, unclean array with the same items (items are shared)."""
        return Array(self._data)

    # ---------------------------------------------------------------- deltas

    def _apply(self, keep: int, overwritten: Iterable[tuple[int, T]], appended: Iterable[T]) -> None:
        """Apply a decoded delta (see :class:`ArrayChanges`), then mark clean."""
        data = self._data
        del data[keep:]
        for i, value in overwritten:
            data[i] = value
        data.extend(appended)
        self.mark_clean()
