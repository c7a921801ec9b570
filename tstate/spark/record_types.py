"""Which classes a record may be rebuilt as after crossing a Spark exchange: the
dataflow's allow-list, so that bytes in the store never choose code.

A record that is an attrs instance or a named tuple crosses an exchange (a shuffle cell,
a held-back records file in the checkpoint directory) as its class's *path*
(``module:QualName``) and its fields' values (:mod:`tstate.spark.records`).  Those
bytes may sit in a shared bucket, so the reader never imports a module a path names:
it rebuilds only classes in the :class:`RecordTypes` the dataflow itself registered,
and refuses any other path with a :class:`~tstate.errors.RecordClassError` naming the
path and the cell or file it came from.  The writer refuses an unregistered class too
(naming the operator and the record), so a missing registration shows up where the
record is made, not in another executor.

The allow-list is built when the plan is lowered (:meth:`RecordTypes.of`, called by
:meth:`tstate.spark.plan.Plan.of`) and shipped to every task with the plan (records
made inside executors are encoded there).  It holds

- tstate's own record classes (:class:`~tstate.progress.timestamp.Product`);
- the state types of stateful operators and every attrs class or named tuple nested in
  them (``state=Route``, ``dict[str, Route]``);
- the classes named by the type hints of the operators' functions (parameters and
  return types, also nested: ``def apply(st: Sizes, c: Change, ctx)``,
  ``def parse(r) -> Iterable[Flight]``);
- what the user registered: ``flow.record_types(Change, Flight)``, for classes no
  hint names.

>>> from tstate.progress.timestamp import Product
>>> types = RecordTypes.from_classes([Product])
>>> types.get("tstate.progress.timestamp:Product") is Product
True
>>> types.get("os:system") is None
True
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Iterable, Mapping, Optional

from attrs import field, frozen

from tstate.errors import ConfigurationError
from tstate.plan import Graph, Stateful

__all__ = ["RecordTypes", "class_path", "is_record_class", "BUILTIN"]


def class_path(cls: type) -> str:
    """The path a record's class travels as: ``module:QualName``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def is_record_class(tp: Any) -> bool:
    """Whether instances of ``tp`` can cross an exchange as a class path: an attrs class
    or a named tuple defined at a module's top level (not inside a function)."""
    if not isinstance(tp, type) or "<locals>" in tp.__qualname__:
        return False
    if issubclass(tp, tuple):
        return hasattr(tp, "_fields")
    return getattr(tp, "__attrs_attrs__", None) is not None


def _hints(obj: Any) -> list[Any]:
    """The resolved type hints of a function, a callable object or a class (best effort:
    hints that do not resolve are skipped; the user can register those classes)."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    target = obj if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj).__call__
    try:
        return list(typing.get_type_hints(target).values())
    except Exception:  # an unresolvable forward reference, a builtin without hints
        raw = getattr(target, "__annotations__", None)
        return [v for v in raw.values() if not isinstance(v, str)] if isinstance(raw, dict) else []


def _collect(tp: Any, found: dict[str, type], seen: set[int]) -> None:
    """Add ``tp`` and the record classes nested in it (generic arguments, fields)."""
    if id(tp) in seen:
        return
    seen.add(id(tp))
    for arg in typing.get_args(tp):
        _collect(arg, found, seen)
    origin = typing.get_origin(tp)
    if origin is not None:
        _collect(origin, found, seen)
        return
    if not is_record_class(tp):
        return
    found.setdefault(class_path(tp), tp)
    if issubclass(tp, tuple):
        hints: Iterable[Any] = _hints(tp)
    else:
        hints = _hints(tp) or [a.type for a in tp.__attrs_attrs__ if a.type is not None and not isinstance(a.type, str)]
    for h in hints:
        _collect(h, found, seen)


@frozen
class RecordTypes:
    """The classes records of one dataflow may be rebuilt as, by path (see the module
    docstring).  Shipped to every task with the plan."""

    classes: Mapping[str, type] = field(factory=dict)

    @classmethod
    def from_classes(cls, classes: Iterable[Any]) -> "RecordTypes":
        """The allow-list of ``classes`` (and the record classes nested in their fields),
        plus tstate's own."""
        found: dict[str, type] = {}
        seen: set[int] = set()
        for c in (*_builtin(), *classes):
            _collect(c, found, seen)
        return cls(found)

    @classmethod
    def of(cls, graph: Graph, registered: Iterable[type] = ()) -> "RecordTypes":
        """The allow-list of a dataflow's plan ``graph``: its state types, the classes
        its functions' type hints name, and the classes ``registered`` with
        ``flow.record_types``."""
        roots: list[Any] = list(registered)
        for _, node in graph:
            if isinstance(node, Stateful):
                roots.append(node.state)
            for fn in node.functions():
                roots.extend(_hints(fn))
        return cls.from_classes(roots)

    def get(self, path: str) -> Optional[type]:
        """The registered class at ``path`` (None: not registered; nothing is imported)."""
        return self.classes.get(path)

    def __contains__(self, cls: Any) -> bool:
        return isinstance(cls, type) and self.classes.get(class_path(cls)) is not None

    def names(self) -> list[str]:
        """The registered paths, sorted (for error messages)."""
        return sorted(self.classes)


def _builtin() -> list[type]:
    from tstate.progress.timestamp import Product

    return [Product]


#: tstate's own record classes only (what a cell is decoded with when no dataflow's
#: allow-list is given)
BUILTIN = RecordTypes.from_classes(())


def check_registrable(classes: Iterable[Any]) -> list[type]:
    """``classes`` as given to ``flow.record_types``: each must be a top-level attrs
    class or named tuple (raises :class:`~tstate.errors.ConfigurationError`)."""
    out = []
    for c in classes:
        if not is_record_class(c):
            raise ConfigurationError(
                f"record_types: {c!r} is not an attrs class or named tuple defined at a module's top level; only "
                "those cross a Spark exchange by class (map other records to tuples, dicts or such a class)"
            )
        out.append(c)
    return out
