"""Checking a value against its declared state type, with the field path of a mismatch.

:func:`compile_checker` turns a :class:`~tstate.types.schema.Schema` into a function
that returns ``None`` for a matching value and raises :class:`Mismatch` otherwise; the
codec calls it before every encode, so a wrongly typed value is never silently encoded.
:func:`check` is the convenience wrapper raising :class:`~tstate.errors.StateTypeError`.

The check is exact, like the encoding: a ``list`` field needs a ``list`` (not a tuple),
an ``Array`` field an ``Array``, a struct field an instance of exactly that class, an
``int`` an ``int`` (not a ``bool``) between -2**63 and 2**64-1 (what msgpack can
store).  A ``float`` field also accepts such an ``int``; it decodes as ``float``.

>>> from tstate.types.schema import analyse
>>> check(analyse(dict[str, list[int]]), {"a": [1, 2, "x"]}, "Route.by_name")
Traceback (most recent call last):
...
tstate.errors.StateTypeError: Route.by_name{'a'}[2]: expected int, got str 'x'
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, Callable, Iterable

from msgspec import ValidationError, convert

from tstate.errors import StateTypeError
from tstate.types.schema import Kind, Schema, by_type, root_label
from tstate.types.tracked import Array, Map

__all__ = ["Mismatch", "Checker", "VectorChecker", "compile_checker", "compile_vector_checker", "check", "INT_MIN", "INT_MAX"]

#: The range of integers msgpack can encode.
INT_MIN = -(1 << 63)
INT_MAX = (1 << 64) - 1

Checker = Callable[[Any], None]


class Mismatch(Exception):
    """A value does not match its declaration.  ``segments`` is the path from the
    mismatching value up to the checked root, innermost first; :meth:`error` turns it
    into the user-facing :class:`~tstate.errors.StateTypeError`."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value
        self.segments: list[str] = []

    def at(self, segment: str) -> Mismatch:
        """Record that the mismatch is inside ``segment`` (``.field``, ``[3]``, ...)."""
        self.segments.append(segment)
        return self

    def path(self, root: str) -> str:
        return root + "".join(reversed(self.segments))

    def error(self, root: str) -> StateTypeError:
        return StateTypeError(f"{self.path(root)}: expected {self.expected}, got {describe_value(self.value)}")


def describe_value(value: Any) -> str:
    """``str 'x'``: the type and a shortened repr, for error messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__qualname__} {text}"


def check(schema: Schema, value: Any, path_prefix: str | None = None) -> None:
    """Raise :class:`~tstate.errors.StateTypeError` unless ``value`` matches ``schema``.
    Paths start with ``path_prefix`` (default: the struct's name, or ``state``)."""
    try:
        compile_checker(schema)(value)
    except Mismatch as m:
        raise m.error(root_label(schema) if path_prefix is None else path_prefix) from None


_CACHE: dict[tuple[Any, bool], Checker] = {}


def compile_checker(schema: Schema, ranges: bool = True) -> Checker:
    """The checker of ``schema`` (cached by declared type).

    With ``ranges=False`` it skips the range check of ints, which is all a
    caller needs that encodes right away: msgpack raises ``OverflowError`` for an int
    out of range, and the caller can then run the full checker to find it."""
    return by_type(_CACHE, (schema.tp, ranges), lambda: _compile(schema, ranges))


# Kinds that are valid exactly when the value's type is one of a fixed set of classes.
_EXACT: dict[Kind, frozenset[type]] = {
    Kind.STR: frozenset({str}),
    Kind.BYTES: frozenset({bytes}),
    Kind.BOOL: frozenset({bool}),
    Kind.NONE: frozenset({type(None)}),
}
_NUMBERS: dict[Kind, frozenset[type]] = {Kind.INT: frozenset({int}), Kind.FLOAT: frozenset({float, int})}


def exact_types(schema: Schema, ranges: bool = True) -> frozenset[type]:
    """The classes whose instances always match ``schema`` by type alone; empty when a
    type check is not enough (containers need their items checked, and ints -- unless
    ``ranges`` is false -- their range)."""
    k = schema.kind
    if k in _EXACT:
        return _EXACT[k]
    if k in (Kind.DATETIME, Kind.DATE, Kind.ENUM):
        return frozenset({schema.py_type})
    if not ranges and k in _NUMBERS:
        return _NUMBERS[k]
    if not ranges and k is Kind.UNION:
        return frozenset().union(*(exact_types(a, False) for a in schema.args))
    if k is Kind.OPTIONAL:
        inner = exact_types(schema.args[0], ranges)
        return inner | {type(None)} if inner else frozenset()
    return frozenset()


def _index_of(items: Any, item: Any) -> int:
    for i, x in enumerate(items):
        if x is item:
            return i
    return -1  # pragma: no cover


_INT_ONLY = {int}


def _check_int(v: Any) -> None:
    if type(v) is not int:
        raise Mismatch("int", v)
    if not INT_MIN <= v <= INT_MAX:
        raise Mismatch("int between -2**63 and 2**64-1", v)


def _check_float(v: Any) -> None:
    t = type(v)
    if t is not float and (t is not int or not INT_MIN <= v <= INT_MAX):
        raise Mismatch("float", v)


def _compile(schema: Schema, ranges: bool) -> Checker:
    k = schema.kind
    if k is Kind.INT and ranges:
        return _check_int
    if k is Kind.FLOAT and ranges:
        return _check_float
    exact = exact_types(schema, ranges)
    if exact:
        expected = schema.name

        def check_exact(v: Any) -> None:
            if type(v) not in exact:
                raise Mismatch(expected, v)

        return check_exact
    if k is Kind.OPTIONAL:
        inner = compile_checker(schema.args[0], ranges)
        inner_name, name = schema.args[0].name, schema.name

        def check_optional(v: Any) -> None:
            if v is not None:
                try:
                    inner(v)
                except Mismatch as m:
                    if not m.segments and m.expected == inner_name:  # the value's own type
                        m.expected = name
                    raise

        return check_optional
    if k is Kind.UNION:
        return _union(schema)
    if k in (Kind.LIST, Kind.TUPLE, Kind.SET, Kind.FROZENSET, Kind.ARRAY):
        return _sequence(schema, ranges)
    if k is Kind.FIXED_TUPLE:
        return _fixed_tuple(schema, ranges)
    if k in (Kind.DICT, Kind.MAP):
        return _mapping(schema, ranges)
    if k is Kind.STRUCT:
        return _struct(schema, ranges)
    if k is Kind.RECORD:
        return _record(schema, ranges)
    raise AssertionError(f"no checker for {k}")  # pragma: no cover


def _union(schema: Schema) -> Checker:
    kinds = {a.kind for a in schema.args}
    allowed = {a.py_type for a in schema.args}
    if Kind.FLOAT in kinds:
        allowed.add(int)
    ints = int in allowed
    expected = schema.name

    def check_union(v: Any) -> None:
        t = type(v)
        if t not in allowed or (ints and t is int and not INT_MIN <= v <= INT_MAX):
            raise Mismatch(expected, v)

    return check_union


def _sequence(schema: Schema, ranges: bool) -> Checker:
    """list, tuple[T, ...], set, frozenset and Array: a container type, then items."""
    k = schema.kind
    container = schema.py_type
    item = schema.args[0]
    indexed = k is not Kind.SET and k is not Kind.FROZENSET
    expected = schema.name
    exact = exact_types(item, ranges)
    item_check = compile_checker(item, ranges)

    def where(items: Any, x: Any) -> str:
        return f"[{_index_of(items, x)}]" if indexed else "[]"

    ints = item.kind is Kind.INT and ranges

    def check_sequence(v: Any) -> None:
        if type(v) is not container:
            raise Mismatch(expected, v)
        items = v._data if container is Array else v
        if ints:  # the common list[int]: type test per item, range by min/max (both in C)
            if not items or (set(map(type, items)) == _INT_ONLY and INT_MIN <= min(items) and max(items) <= INT_MAX):
                return
            for x in items:
                try:
                    _check_int(x)
                except Mismatch as m:
                    raise m.at(where(items, x)) from None
            return  # pragma: no cover - the fast test failed, so one item fails
        if exact:
            if set(map(type, items)) <= exact:  # in C; then find the culprit
                return
            for x in items:
                if type(x) not in exact:
                    raise Mismatch(item.name, x).at(where(items, x))
        else:
            for x in items:
                try:
                    item_check(x)
                except Mismatch as m:
                    raise m.at(where(items, x)) from None

    return check_sequence


def _fixed_tuple(schema: Schema, ranges: bool) -> Checker:
    checks = [compile_checker(a, ranges) for a in schema.args]
    n = len(checks)
    expected = schema.name

    def check_fixed_tuple(v: Any) -> None:
        if type(v) is not tuple or len(v) != n:
            raise Mismatch(expected, v)
        for i, (x, item_check) in enumerate(zip(v, checks)):
            try:
                item_check(x)
            except Mismatch as m:
                raise m.at(f"[{i}]") from None

    return check_fixed_tuple


def _mapping(schema: Schema, ranges: bool) -> Checker:
    container = schema.py_type
    key_schema, value_schema = schema.args
    key_exact, value_exact = exact_types(key_schema, ranges), exact_types(value_schema, ranges)
    key_check, value_check = compile_checker(key_schema, ranges), compile_checker(value_schema, ranges)
    expected = schema.name

    def check_mapping(v: Any) -> None:
        if type(v) is not container:
            raise Mismatch(expected, v)
        items = v._data if container is Map else v
        for key, value in items.items():
            if type(key) not in key_exact:
                try:
                    key_check(key)
                except Mismatch as m:
                    raise m.at("{key}") from None
            if type(value) not in value_exact:
                try:
                    value_check(value)
                except Mismatch as m:
                    raise m.at(f"{{{key!r}}}") from None

    return check_mapping


def _guard(schema: Schema, ranges: bool, var: str, ns: dict[str, Any], n: int) -> str | None:
    """A Python condition, true when ``var`` surely matches ``schema`` (the checker then
    need not be called), or ``None`` when there is no cheap one."""
    if ranges and schema.kind is Kind.INT:
        return f"type({var}) is int and {INT_MIN} <= {var} <= {INT_MAX}"
    if ranges and schema.kind is Kind.FLOAT:
        return f"type({var}) is float"
    exact = exact_types(schema, ranges)
    if len(exact) == 1:
        ns[f"t{n}"] = next(iter(exact))
        return f"type({var}) is t{n}"
    if exact:
        ns[f"t{n}"] = exact
        return f"type({var}) in t{n}"
    return None


def _struct(schema: Schema, ranges: bool) -> Checker:
    """A generated function: one guard per field inline, the field's checker called
    only when the guard fails (it raises) or when there is no guard (containers)."""
    ns: dict[str, Any] = {"Mismatch": Mismatch, "cls": schema.py_type, "expected": schema.name}
    lines = ["def check_struct(v):", "    if type(v) is not cls:", "        raise Mismatch(expected, v)"]
    for n, f in enumerate(schema.fields):
        ns[f"c{n}"] = compile_checker(f.schema, ranges)
        ns[f"s{n}"] = "." + f.name
        guard = _guard(f.schema, ranges, "x", ns, n)
        call = ["try:", f"    c{n}(x)", "except Mismatch as m:", f"    raise m.at(s{n}) from None"]
        lines.append(f"    x = v.{f.name}")  # attrs field names are identifiers
        if guard is None:
            lines += ["    " + line for line in call]
        else:
            lines += [f"    if not ({guard}):"] + ["        " + line for line in call]
    if len(lines) == 3:
        lines.append("    return None")
    exec(compile("\n".join(lines), f"<tstate check {schema.name}>", "exec"), ns)
    fn: Checker = ns["check_struct"]
    return fn


def _record(schema: Schema, ranges: bool) -> Checker:
    """A TypedDict: a ``dict`` with the required keys, no unknown key, each value of its
    key's type (segment ``{'key'}``)."""
    fields = [(f.name, exact_types(f.schema, ranges), compile_checker(f.schema, ranges)) for f in schema.fields]
    required = frozenset(f.name for f in schema.fields if not f.has_default)
    known = frozenset(f.name for f in schema.fields)
    expected = schema.name

    def check_record(v: Any) -> None:
        if type(v) is not dict:
            raise Mismatch(expected, v)
        keys = v.keys()
        if not (required <= keys and keys <= known):
            missing = sorted(required - v.keys())
            if missing:
                raise Mismatch(f"{expected} with key {missing[0]!r}", v)
            extra = sorted((k for k in v if k not in known), key=repr)
            if extra:
                raise Mismatch(f"{expected} without key {extra[0]!r} (its keys: {', '.join(sorted(known))})", v)
        for name, exact, fn in fields:
            if name not in v:
                continue
            x = v[name]
            if type(x) in exact:
                continue
            try:
                fn(x)
            except Mismatch as m:
                raise m.at(f"{{{name!r}}}") from None

    return check_record


# ---------------------------------------------------------------------- many values at once

VectorChecker = Callable[[Iterable[Any]], bool]
_VCACHE: dict[Any, VectorChecker] = {}


def compile_vector_checker(schema: Schema) -> VectorChecker:
    """A function telling whether *every* value of an iterable matches ``schema``, with
    ints not range-checked (like ``compile_checker(schema, ranges=False)``: what an
    encoder needs, msgspec refuses ints beyond 64 bits itself).

    It answers without a Python call per value where it can: it compares the *set of
    types* of all values (``set(map(type, values))``, in C), then checks the parts of
    all values together -- a struct field across all structs, the items of all lists
    chained -- so a bin of a million structs is checked in a few passes over C
    iterators.  It only says *whether*; the per-value checker of :func:`compile_checker`
    then finds *where* (the field path).

    >>> from tstate.types.schema import analyse
    >>> ok = compile_vector_checker(analyse(dict[str, list[int]]))
    >>> ok([{"a": [1, 2]}, {"b": []}]), ok([{"a": [1, "2"]}])
    (True, False)
    """
    return by_type(_VCACHE, schema.tp, lambda: _vector(schema))


def _types_within(allowed: frozenset[type]) -> VectorChecker:
    def check_types(values: Iterable[Any]) -> bool:
        return set(map(type, values)) <= allowed

    return check_types


def _vector(schema: Schema) -> VectorChecker:
    k = schema.kind
    exact = exact_types(schema, ranges=False)
    if exact:
        return _types_within(exact)
    if k is Kind.OPTIONAL:
        inner = compile_vector_checker(schema.args[0])

        def check_optional(values: Iterable[Any]) -> bool:
            return inner([v for v in values if v is not None])

        return check_optional
    if k in (Kind.LIST, Kind.TUPLE, Kind.SET, Kind.FROZENSET, Kind.ARRAY):
        return _sequences(schema)
    if k in (Kind.DICT, Kind.MAP):
        return _mappings(schema)
    if k is Kind.FIXED_TUPLE:
        n = len(schema.args)
        parts = [(itemgetter(i), compile_vector_checker(a)) for i, a in enumerate(schema.args)]

        def check_tuples(values: Iterable[Any]) -> bool:
            vs = values if type(values) is list else list(values)
            if not set(map(type, vs)) <= _TUPLE or not set(map(len, vs)) <= {n}:
                return False
            return all(part(map(get, vs)) for get, part in parts)

        return check_tuples
    if k is Kind.STRUCT:
        return _structs(schema)
    one = compile_checker(schema, ranges=False)  # pragma: no cover - every kind is above

    def check_each(values: Iterable[Any]) -> bool:  # pragma: no cover
        try:
            for v in values:
                one(v)
        except Mismatch:
            return False
        return True

    return check_each  # pragma: no cover


def _sequences(schema: Schema) -> VectorChecker:
    """A vector checker of lists, tuples, sets, frozensets or ``Array`` values of one item
    type: the container types, then every item."""
    k = schema.kind
    container = frozenset({schema.py_type})
    items = compile_vector_checker(schema.args[0])
    tracked = k is Kind.ARRAY
    convert_to = _convertible(schema.args[0])

    def check_sequences(values: Iterable[Any]) -> bool:
        vs = values if type(values) is list else list(values)
        if not set(map(type, vs)) <= container:
            return False
        seqs = list(map(_DATA, vs)) if tracked else vs
        if convert_to is not None:
            # scalar items: msgspec validates them in C (2-3x a set of their types)
            try:
                convert(seqs, convert_to)
            except ValidationError:
                return False
            return True
        return items(chain.from_iterable(seqs))

    return check_sequences


def _mappings(schema: Schema) -> VectorChecker:
    """A vector checker of dicts or ``Map`` values: the container types, then every key and
    value."""
    k = schema.kind
    container = frozenset({schema.py_type})
    keys, items = compile_vector_checker(schema.args[0]), compile_vector_checker(schema.args[1])
    tracked = k is Kind.MAP
    key_tp, value_tp = _scalar_annotation(schema.args[0]), _scalar_annotation(schema.args[1])
    whole = _convert_target(dict[key_tp, value_tp]) if key_tp is not None and value_tp is not None else None  # type: ignore[valid-type]

    def check_mappings(values: Iterable[Any]) -> bool:
        vs = values if type(values) is list else list(values)
        if not set(map(type, vs)) <= container:
            return False
        ds = list(map(_DATA, vs)) if tracked else vs
        if whole is not None:
            # scalar keys and values: msgspec validates every entry in C (no Python call per entry)
            try:
                convert(ds, whole)
            except ValidationError:
                return False
            return True
        return keys(chain.from_iterable(ds)) and items(chain.from_iterable(map(dict.values, ds)))

    return check_mappings


_DATA = attrgetter("_data")
_TUPLE = frozenset({tuple})


# Scalar kinds whose values msgspec.convert (strict) accepts exactly when the checker
# does (ranges aside): not enums (convert takes their values), dates or datetimes (it
# parses strings), nor bytes (convert takes a bytearray or memoryview, and so does the
# encoder).  A subclass of str / int / float is accepted by convert, refused by the
# encoder (TypeError): the encoding path then runs the checker, which names it -- except
# an enum member deriving from int or str (``IntEnum``, ``StrEnum``), which the encoder
# writes as its value: it *is* an int / str, and is stored as the value it equals.
_CONVERTIBLE = {Kind.INT, Kind.FLOAT, Kind.STR, Kind.BOOL, Kind.NONE}


def _scalar_annotation(item: Schema) -> Any:
    """The annotation msgspec validates values of a scalar ``item`` schema with (see
    ``_CONVERTIBLE``), else ``None``."""
    k = item.kind
    ok = k in _CONVERTIBLE or (k in (Kind.UNION, Kind.OPTIONAL) and all(a.kind in _CONVERTIBLE for a in item.args))
    if not ok:
        return None
    return type(None) if k is Kind.NONE else item.tp


def _convert_target(tp: Any) -> Any:
    """``list[tp]`` if ``msgspec.convert`` can validate against it, else ``None``."""
    target = list[tp]  # type: ignore[valid-type]
    try:
        convert([], target)
    except TypeError:  # a union msgspec cannot express (str | bytes)
        return None
    return target


def _convertible(item: Schema) -> Any:
    """``list[list[T]]`` for an item schema that msgspec can validate, else ``None``."""
    tp = _scalar_annotation(item)
    return None if tp is None else _convert_target(list[tp])  # type: ignore[valid-type]


def _structs(schema: Schema) -> VectorChecker:
    """Structs: a generated loop testing the class and every scalar field's type
    inline (no call per struct), then each other field across all structs."""
    ns: dict[str, Any] = {"cls": schema.py_type}
    lines = ["def check_structs(vs):", "    for v in vs:", "        if type(v) is not cls:", "            return False"]
    others: list[tuple[Any, VectorChecker]] = []
    for n, f in enumerate(schema.fields):
        exact = exact_types(f.schema, ranges=False)
        if not exact:
            others.append((attrgetter(f.name), compile_vector_checker(f.schema)))
            continue
        if len(exact) == 1:
            ns[f"t{n}"] = next(iter(exact))
            lines += [f"        if type(v.{f.name}) is not t{n}:", "            return False"]
        else:
            ns[f"t{n}"] = exact
            lines += [f"        if type(v.{f.name}) not in t{n}:", "            return False"]
    lines.append("    return True")
    exec(compile("\n".join(lines), f"<tstate vector check {schema.name}>", "exec"), ns)
    inline: Callable[[list[Any]], bool] = ns["check_structs"]

    def check_structs(values: Iterable[Any]) -> bool:
        vs = values if type(values) is list else list(values)
        return inline(vs) and all(part(map(get, vs)) for get, part in others)

    return check_structs
