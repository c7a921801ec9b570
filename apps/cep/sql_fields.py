"""What a MATCH_RECOGNIZE query may read of its rows: their declared fields, resolved
when the query is compiled.

A column in a query (``A.delay``, ``PARTITION BY origin``, ``ORDER BY date``) names a
field of the rows, and nothing else: a query is text a service may take from its users,
so it never reaches an attribute the rows' type does not declare.  :func:`fields_of`
reads the declaration:

* an attrs class, a dataclass or a named tuple: its fields, read as attributes;
* a ``TypedDict`` (the rows ``ts.io.parquet`` / ``ts.io.csv`` give), a ``pyarrow``
  schema or a list of names: those keys of dict rows;
* ``None`` / ``dict`` / ``Any`` (nothing declared): :class:`RowFields`, which checks each
  row when it reads it -- a dict row's keys, an object's declared fields (a class that
  declares none is refused) -- and never looks up anything else.

A name is *plain*: not empty, no ``.``, not starting with ``_``, no control characters.
:meth:`Fields.problem` says why a name cannot be read (``None``: it can);
:meth:`Fields.getter` reads it (``None`` for no row: SQL's NULL).

>>> from attrs import frozen
>>> @frozen
... class Tick:
...     symbol: str
...     price: int
>>> f = fields_of(Tick)
>>> f.getter("price")(Tick("ACME", 12))
12
>>> f.problem("price") is None, f.problem("__class__"), f.problem("volume")
(True, "'__class__' is not a plain column name (no dots, not starting with '_')", "no column 'volume' (the rows' columns: symbol, price)")
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from operator import attrgetter, itemgetter
from typing import Any, Optional

import attrs
from attrs import frozen

from apps.cep.errors import SqlError

__all__ = ["AttrFields", "Fields", "KeyFields", "RowFields", "declared_names", "fields_of", "plain_problem"]

Getter = Callable[[Any], Any]


def plain_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a plain column name, or ``None``."""
    if not name or name.startswith("_") or "." in name or not name.isprintable():
        return f"{name!r} is not a plain column name (no dots, not starting with '_')"
    return None


@frozen
class Fields:
    """The fields rows declare (``names``), and how to read one (see the subclasses)."""

    names: tuple[str, ...]

    def problem(self, name: str) -> Optional[str]:
        """Why column ``name`` cannot be read from these rows (``None``: it can)."""
        bad = plain_problem(name)
        if bad is not None:
            return bad
        if name not in self.names:
            return f"no column {name!r} (the rows' columns: {', '.join(self.names) or 'none'})"
        return None

    def getter(self, name: str) -> Getter:  # pragma: no cover - every subclass overrides it
        """``get(row)``: the value of column ``name`` (``None`` for no row).  Only for a
        name :meth:`problem` accepts."""
        raise NotImplementedError

    def row_getter(self, name: str) -> Getter:
        """:meth:`getter` for a row that is never ``None`` (the row being tested, a
        row's key and time): the same value, read in one C call where the fields are
        declared."""
        return self.getter(name)


@frozen
class KeyFields(Fields):
    """Dict rows with these keys (a ``TypedDict``, an Arrow schema's columns)."""

    def getter(self, name: str) -> Getter:
        def get(row: Any) -> Any:
            return None if row is None else row[name]

        return get

    def row_getter(self, name: str) -> Getter:
        return itemgetter(name)


@frozen
class AttrFields(Fields):
    """Objects with these attributes (an attrs class, a dataclass, a named tuple)."""

    def getter(self, name: str) -> Getter:
        attr = attrgetter(name)  # a declared field: a plain identifier, never a path

        def get(row: Any) -> Any:
            return None if row is None else attr(row)

        return get

    def row_getter(self, name: str) -> Getter:
        return attrgetter(name)  # a declared field: a plain identifier, never a path


@frozen
class RowFields(Fields):
    """Rows whose type declares nothing up front (``names`` is empty): each row is
    checked when read -- a mapping by key, an object by the fields its class declares
    (:func:`declared_names`); anything else raises ``KeyError`` / ``AttributeError``,
    which the matcher reports as :class:`~apps.cep.errors.EventFieldError`."""

    names: tuple[str, ...] = ()

    def problem(self, name: str) -> Optional[str]:
        return plain_problem(name)

    def getter(self, name: str) -> Getter:
        readable: dict[type, bool] = {}  # row class -> whether it declares ``name``
        attr = attrgetter(name)

        def get(row: Any) -> Any:
            if row is None:
                return None
            cls = type(row)  # (not row.__class__: nothing of the row but its declared fields is read)
            if cls is dict:
                return row[name]
            ok = readable.get(cls)
            if ok is None:
                if isinstance(row, Mapping):
                    return row[name]
                declared = declared_names(cls)
                ok = readable[cls] = declared is not None and name in declared
            if not ok:
                declared = declared_names(cls)
                has = "declares no fields" if declared is None else f"has the fields {', '.join(declared)}"
                raise AttributeError(f"{cls.__name__} {has}, not {name!r}", name=name, obj=row)
            return attr(row)

        return get


def declared_names(tp: Any) -> Optional[tuple[str, ...]]:
    """The field names a class declares (attrs, dataclass, named tuple, ``TypedDict``),
    or ``None``."""
    if not isinstance(tp, type):
        return None
    if attrs.has(tp):
        return tuple(f.name for f in attrs.fields(tp))
    if dataclasses.is_dataclass(tp):
        return tuple(f.name for f in dataclasses.fields(tp))
    if issubclass(tp, tuple) and isinstance(getattr(tp, "_fields", None), tuple):
        return tuple(tp._fields)  # type: ignore[attr-defined]
    if typing.is_typeddict(tp):
        return tuple(tp.__annotations__)
    return None


def fields_of(declared: Any) -> Fields:
    """The :class:`Fields` of rows declared as ``declared`` (see the module docstring);
    raises :class:`~apps.cep.errors.SqlError` for a type that declares no fields."""
    if isinstance(declared, Fields):
        return declared
    if declared is None or declared is dict or declared is Any or declared is Mapping:
        return RowFields()
    if isinstance(declared, type):
        names = declared_names(declared)
        if names is None:
            raise SqlError(
                f"the rows' type {declared.__qualname__} declares no fields a query can read: use an attrs class, "
                "a dataclass, a named tuple, a TypedDict or dict rows"
            )
        return KeyFields(names) if typing.is_typeddict(declared) else AttrFields(names)
    names_attr = getattr(declared, "names", None)  # a pyarrow.Schema
    if isinstance(names_attr, list) and all(isinstance(n, str) for n in names_attr):
        return KeyFields(tuple(names_attr))
    if isinstance(declared, (list, tuple)) and all(isinstance(n, str) for n in declared):
        return KeyFields(tuple(declared))
    raise SqlError(f"cannot tell the fields of the rows from {declared!r}: give a type, a pyarrow schema or column names")
