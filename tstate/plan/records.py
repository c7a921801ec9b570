"""Record classes a dataflow registers: which classes qualify.

``flow.record_types(...)`` registers classes whose instances may cross a Spark exchange
by class path (:mod:`tstate.spark.record_types` builds the allow-list from them, the
state types and the functions' type hints).  A class qualifies when it is an attrs
class or a named tuple defined at a module's top level; anything else is refused when
it is registered.

>>> from tstate.progress.timestamp import Product
>>> class_path(Product), is_record_class(Product), is_record_class(dict)
('tstate.progress.timestamp:Product', True, False)
"""

from __future__ import annotations

from typing import Any, Iterable

from tstate.errors import ConfigurationError

__all__ = ["class_path", "is_record_class", "check_registrable"]


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
