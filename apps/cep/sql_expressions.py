"""DEFINE conditions and MEASURES of a MATCH_RECOGNIZE query, compiled to Python closures.

:mod:`apps.cep.sql` parses the query (lark); this module turns one parsed expression
into a function, with Flink's semantics (``MatchCodeGenerator``):

* **Rows of a variable.**  In ``DEFINE V``, ``X.col`` reads the rows mapped so far to
  ``X``, *plus the current row when* ``X`` *is* ``V``; a bare ``col`` is the default
  variable ``*``: every row mapped so far plus the current row.  In ``MEASURES`` the
  rows are the match's (``m[X]``, ``m.events()``).
* **Navigation.**  ``X.col`` (and ``LAST(X.col)``) is the last of those rows --
  in ``DEFINE V``, ``V.col`` and ``col`` are the current row; ``LAST(X.col, n)`` the
  n-th from the last, ``FIRST(X.col, n)`` the n-th from the first (0-based), NULL when
  there is no such row.  ``PREV(expr, n)`` is the row ``n`` rows before the one
  ``expr`` refers to, counted over every row of the match -- the rows of a match are
  contiguous (MATCH_RECOGNIZE's concatenation is strict), so within a match this is
  SQL's physical offset; a row before the match's first is NULL.  (Flink accepts
  only ``PREV(expr, 0)``: it rejects physical offsets.)  ``NEXT`` (MEASURES only) looks
  forward the same way.  The argument of FIRST/LAST/PREV/NEXT and of an aggregate
  references one variable only, as in Flink (``LAST(A.price * A.tax)``).
* **Aggregates** ``COUNT``/``SUM``/``AVG``/``MIN``/``MAX`` over the rows of one
  variable (``SUM(A.price)``, ``COUNT(*)``, ``COUNT(A.*)``); NULLs are skipped, an
  empty set gives NULL (``COUNT``: 0).  ``AVG`` divides exactly (14.5, as the
  documentation's example shows; Flink's ``AVG`` of a ``BIGINT`` column truncates).
* **NULL** is ``None``, with SQL's three-valued logic: comparisons and arithmetic with
  NULL give NULL, ``NULL AND FALSE`` is FALSE, ``NOT NULL`` is NULL, a condition holds
  only when TRUE.  ``/`` of two integers truncates toward zero, ``%`` takes the sign of
  the dividend (SQL's ``MOD``).
* Scalars: literals (``1``, ``2.5``, ``'text'``, ``TRUE``, ``NULL``), ``INTERVAL '10'
  MINUTE`` (a ``timedelta``, to add to datetimes), ``+ - * / %``, ``||``, comparisons,
  ``IS [NOT] NULL``, ``[NOT] BETWEEN``, ``[NOT] IN (...)``, ``CASE WHEN``, ``AND``/``OR``/
  ``NOT``, ``ABS``, ``COALESCE``, ``UPPER``, ``LOWER``, and in MEASURES
  ``MATCH_ROWTIME()`` (the time of the match's last row).

Rows are dicts (``row[col]``) or objects (``row.col``).  A column the row lacks raises
``KeyError`` / ``AttributeError``, which the matcher reports as
:class:`~apps.cep.errors.EventFieldError`; a type mismatch or a division by zero raises
:class:`~apps.cep.errors.ExpressionError` naming the clause and the expression.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, Optional

from attrs import frozen

from apps.cep.errors import ExpressionError, SqlError

__all__ = ["Compiled", "ExprCompiler", "field_getter", "interval_value", "sql_error"]

#: the default pattern variable (every row)
ALL = "*"
_AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX")
_NAVIGATION = ("FIRST", "LAST", "PREV", "NEXT")
_SCALARS = ("ABS", "COALESCE", "UPPER", "LOWER")
Fn = Callable[[Any, Any], Any]


def sql_error(text: str, line: int, column: int, message: str) -> SqlError:
    """A :class:`SqlError` whose message names the position and shows the line."""
    lines = text.splitlines() or [""]
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    caret = " " * (max(column, 1) - 1) + "^"
    return SqlError(f"line {line}, column {column}: {message}\n  {src}\n  {caret}", line=line, column=column)


def field_getter(name: str) -> Callable[[Any], Any]:
    """Read column ``name`` of a row: ``row[name]`` for a dict, else ``row.name``
    (``None`` for no row)."""
    item = itemgetter(name)
    attr = attrgetter(name)

    def get(row: Any) -> Any:
        if row is None:
            return None
        return item(row) if row.__class__ is dict else attr(row)

    return get


_UNIT_SECONDS = {"DAY": 86400, "HOUR": 3600, "MINUTE": 60, "SECOND": 1}
_UNITS = ("DAY", "HOUR", "MINUTE", "SECOND")


def interval_value(literal: str, start: str, end: Optional[str]) -> dt.timedelta:
    """``INTERVAL '<literal>' start [TO end]`` as a ``timedelta``: ``'3' HOUR``,
    ``'1:30' HOUR TO MINUTE``, ``'2 03:04:05.5' DAY TO SECOND``.  Raises ``ValueError``."""
    s = literal.strip()
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-").strip()
    units = _UNITS[_UNITS.index(start) : _UNITS.index(end) + 1] if end else (start,)
    if end is not None and _UNITS.index(end) <= _UNITS.index(start):
        raise ValueError(f"{start} TO {end}: the second unit must be smaller than the first")
    parts = s.replace(" ", ":").split(":") if end else [s]
    if len(parts) != len(units) or not all(parts):
        raise ValueError(f"{literal!r} does not fit {start}{' TO ' + end if end else ''}")
    seconds = 0.0
    limits = {"HOUR": 24, "MINUTE": 60, "SECOND": 60}
    for i, (p, u) in enumerate(zip(parts, units)):
        try:
            v = float(p)
        except ValueError:
            raise ValueError(f"{literal!r}: {p!r} is not a number of {u.lower()}s") from None
        if v < 0 or (u != "SECOND" and not p.isdigit()):
            raise ValueError(f"{literal!r}: {p!r} is not a whole number of {u.lower()}s")
        if i and v >= limits[u]:
            raise ValueError(f"{literal!r}: {p!r} {u.lower()}s is out of range (< {limits[u]})")
        seconds += v * _UNIT_SECONDS[u]
    return dt.timedelta(seconds=sign * seconds)


# ---- SQL operators on Python values (None is NULL) ----------------------------------------


def _div(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        q = abs(a) // abs(b)  # ZeroDivisionError for b == 0
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _mod(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    import math

    return math.fmod(a, b)


def _concat(a: Any, b: Any) -> Any:
    return f"{a}{b}"  # SQL casts both sides to strings


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
    "%": _mod,
    "||": _concat,
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _agg(name: str, values: list[Any]) -> Any:
    vals = [v for v in values if v is not None]
    if name == "COUNT":
        return len(vals)
    if not vals:
        return None
    if name == "SUM":
        total = vals[0]
        for v in vals[1:]:
            total = total + v
        return total
    if name == "AVG":
        total = vals[0]
        for v in vals[1:]:
            total = total + v
        return total / len(vals)
    return min(vals) if name == "MIN" else max(vals)


@frozen
class Compiled:
    """A compiled expression: ``fn(event, ctx)`` (in MEASURES: ``fn(None, match)``);
    ``uses_ctx`` is false when it reads only the current row (a simple condition)."""

    fn: Fn
    uses_ctx: bool


class _RowScope:
    """While compiling the argument of a navigation or aggregate: collects the one
    variable its columns reference."""

    def __init__(self, where: Any) -> None:
        self.var: Optional[str] = None
        self.where = where


class ExprCompiler:
    """Compiles expressions of one clause: ``DEFINE current`` (``current`` set,
    ``variables`` the pattern's) or ``MEASURES`` (``current`` None).  ``text`` is the
    whole query (for error positions); ``clause`` names the clause in errors."""

    def __init__(self, text: str, variables: Sequence[str], current: Optional[str], clause: str) -> None:
        self.text = text
        self.variables = tuple(variables)
        self.current = current
        self.clause = clause
        self.define = current is not None

    # -- errors and positions --------------------------------------------------------------
    def error(self, node: Any, message: str) -> SqlError:
        line, column = _pos(node)
        return sql_error(self.text, line, column, message)

    def source(self, node: Any) -> str:
        """The text of ``node`` in the query."""
        meta = getattr(node, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            return self.text[meta.start_pos : meta.end_pos]
        return str(node)

    # -- entry points ------------------------------------------------------------------------
    def condition(self, node: Any) -> Callable[..., Any]:
        """A DEFINE condition for the matcher: ``cond(event)`` when it reads only the
        current row, else ``cond(event, ctx)``; errors other than a missing column
        become :class:`ExpressionError`."""
        c = self.compile(node)
        fn = c.fn
        line, column = _pos(node)
        what = f"DEFINE {self.current} (line {line}, column {column}): {self.source(node)}"

        if not c.uses_ctx:

            def cond(e: Any) -> Any:
                try:
                    return fn(e, None)
                except (TypeError, ArithmeticError) as exc:
                    raise ExpressionError(f"{what}: {type(exc).__name__}: {exc} (row {e!r})") from exc

            return cond

        def cond_ctx(e: Any, ctx: Any) -> Any:
            try:
                return fn(e, ctx)
            except (TypeError, ArithmeticError) as exc:
                raise ExpressionError(f"{what}: {type(exc).__name__}: {exc} (row {e!r})") from exc

        return cond_ctx

    def measure(self, node: Any, name: str) -> Callable[[Any], Any]:
        """A measure: ``fn(match) -> value``."""
        fn = self.compile(node).fn
        line, column = _pos(node)
        what = f"MEASURES {name} (line {line}, column {column}): {self.source(node)}"

        def measure(m: Any) -> Any:
            try:
                return fn(None, m)
            except (TypeError, ArithmeticError) as exc:
                raise ExpressionError(f"{what}: {type(exc).__name__}: {exc} (match {m!r})") from exc

        return measure

    # -- the compiler ------------------------------------------------------------------------
    def compile(self, node: Any, rows: Optional[_RowScope] = None) -> Compiled:
        """``node`` as a :class:`Compiled`; inside a navigation / aggregate argument
        (``rows`` given) the function is ``fn(row, None)`` of the one row it reads."""
        kind = getattr(node, "data", None)
        if kind is None:  # a bare token (cannot happen with this grammar)
            raise self.error(node, f"unexpected {node!r}")
        method = getattr(self, "_" + str(kind), None)
        if method is None:
            raise self.error(node, f"{kind} is not supported in {self.clause}")
        result: Compiled = method(node, rows)
        return result

    # literals
    def _int_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(int(node.children[0]))

    def _dec_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(float(node.children[0]))

    def _str_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(_unquote_string(str(node.children[0])))

    def _true_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(True)

    def _false_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(False)

    def _null_lit(self, node: Any, rows: Any) -> Compiled:
        return _const(None)

    def _interval(self, node: Any, rows: Any) -> Compiled:
        return _const(interval_of(self, node))

    # columns
    def _column(self, node: Any, rows: Optional[_RowScope]) -> Compiled:
        return self._field(ALL, name_of(node.children[0]), node, rows)

    def _var_column(self, node: Any, rows: Optional[_RowScope]) -> Compiled:
        var = name_of(node.children[0])
        if var not in self.variables:
            raise self.error(
                node, f"{var!r} is not a pattern variable (the pattern's variables: {', '.join(self.variables)})"
            )
        return self._field(var, name_of(node.children[1]), node, rows)

    def _field(self, var: str, col: str, node: Any, rows: Optional[_RowScope]) -> Compiled:
        get = field_getter(col)
        if rows is not None:  # inside FIRST/LAST/PREV/aggregate: read the row given
            if rows.var is None:
                rows.var = var
            elif rows.var != var:
                raise self.error(
                    node,
                    f"{self.source(rows.where)} references the variables {rows.var} and {var}: the argument of a "
                    "navigation function or aggregate must reference one pattern variable (as in Flink)",
                )
            return Compiled(lambda r, _c: get(r), False)
        sel, uses = self.selector(var, False, 0, 0, node)
        return Compiled(lambda e, c: get(sel(e, c)), uses)

    # rows of a variable and navigation -----------------------------------------------------
    def rows_of(self, var: str) -> Fn:
        """``(e, ctx) -> list`` of the rows of ``var`` (see the module docstring)."""
        if not self.define:
            if var == ALL:
                return lambda _e, m: m.events()
            return lambda _e, m: m[var]
        if var == ALL:
            return lambda e, c: [*c.all_events(), e]
        if var == self.current:
            return lambda e, c: [*c.events(var), e]
        return lambda _e, c: c.events(var)

    def selector(self, var: str, first: bool, offset: int, prev: int, node: Any) -> tuple[Fn, bool]:
        """``(e, ctx) -> row or None`` for ``FIRST/LAST(var, offset)`` moved ``prev`` rows
        back (forward if negative), and whether it needs the context."""
        cur = self.define and var in (ALL, self.current)
        if self.define and not first and not prev:
            if offset == 0 and cur:
                return (lambda e, _c: e), False
            if offset == 1 and var == ALL:
                return (lambda _e, c: c.previous()), True
            if offset == 1 and var == self.current:
                return (lambda _e, c: c.last(var)), True
            if offset == 0 and not cur:
                return (lambda _e, c: c.last(var)), True
        rows = self.rows_of(var)

        def pick(e: Any, c: Any) -> Any:
            rs = rows(e, c)
            i = offset if first else len(rs) - 1 - offset
            return rs[i] if 0 <= i < len(rs) else None

        if not prev:
            return pick, True
        every = self.rows_of(ALL)

        def shifted(e: Any, c: Any) -> Any:
            row = pick(e, c)
            if row is None:
                return None
            rs = every(e, c)
            for i in range(len(rs) - 1, -1, -1):
                if rs[i] is row:
                    j = i - prev
                    return rs[j] if 0 <= j < len(rs) else None
            return None  # pragma: no cover - a row of a variable is a row of the match

        return shifted, True

    # calls -----------------------------------------------------------------------------------
    def _call(self, node: Any, rows: Optional[_RowScope]) -> Compiled:
        fname = name_of(node.children[0]).upper()
        args = node.children[1]
        if fname in _NAVIGATION or fname in _AGGREGATES:
            if rows is not None:
                raise self.error(
                    node, f"{fname}(...) inside the argument of another navigation function or aggregate is not supported"
                )
            return (self._navigation if fname in _NAVIGATION else self._aggregate)(fname, node, args)
        if fname == "MATCH_ROWTIME":
            if self.define:
                raise self.error(node, "MATCH_ROWTIME() is available in MEASURES only")
            if args is not None:
                raise self.error(node, "MATCH_ROWTIME() takes no argument here")
            return Compiled(lambda _e, m: m.last_time, True)
        if fname in _SCALARS:
            items = self._plain_args(fname, node, args)
            compiled = [self.compile(a, rows) for a in items]
            fns = [c.fn for c in compiled]
            uses = any(c.uses_ctx for c in compiled)
            if fname == "COALESCE":
                if not fns:
                    raise self.error(node, "COALESCE needs at least one argument")

                def coalesce(e: Any, c: Any) -> Any:
                    for f in fns:
                        v = f(e, c)
                        if v is not None:
                            return v
                    return None

                return Compiled(coalesce, uses)
            if len(fns) != 1:
                raise self.error(node, f"{fname} takes one argument, got {len(fns)}")
            f0 = fns[0]
            scalars: dict[str, Callable[[Any], Any]] = {"ABS": abs, "UPPER": str.upper, "LOWER": str.lower}
            op = scalars[fname]
            return Compiled(lambda e, c: None if (v := f0(e, c)) is None else op(v), uses)
        raise self.error(
            node,
            f"unknown function {fname}; supported: {', '.join(_NAVIGATION + _AGGREGATES + _SCALARS)}, MATCH_ROWTIME",
        )

    def _plain_args(self, fname: str, node: Any, args: Any) -> list[Any]:
        if args is None:
            return []
        if args.data != "args":
            raise self.error(node, f"{fname}({'*' if args.data == 'args_star' else 'X.*'}) is not valid")
        if args.children[0] is not None:
            raise self.error(node, f"DISTINCT is not supported ({fname})")
        return list(args.children[1:])

    def _offset(self, node: Any, arg: Any) -> int:
        if getattr(arg, "data", None) != "int_lit":
            raise self.error(arg, "the offset of a navigation function must be a non-negative integer literal")
        return int(arg.children[0])

    def _navigation(self, fname: str, node: Any, args: Any) -> Compiled:
        items = self._plain_args(fname, node, args)
        if not 1 <= len(items) <= 2:
            raise self.error(node, f"{fname} takes an expression and an optional offset, got {len(items)} arguments")
        n = self._offset(node, items[1]) if len(items) == 2 else (1 if fname in ("PREV", "NEXT") else 0)
        inner = items[0]
        first, offset, prev = False, 0, 0
        if fname in ("FIRST", "LAST"):
            first, offset = fname == "FIRST", n
        else:
            if fname == "NEXT" and self.define and n:
                raise self.error(node, "NEXT looks at rows after the current one: not available in DEFINE")
            prev = n if fname == "PREV" else -n
            # PREV(FIRST/LAST(expr, k), n): a physical offset from a logical position
            if getattr(inner, "data", None) == "call" and name_of(inner.children[0]).upper() in ("FIRST", "LAST"):
                sub = self._plain_args("FIRST", inner, inner.children[1])
                if not 1 <= len(sub) <= 2:
                    raise self.error(inner, "FIRST/LAST takes an expression and an optional offset")
                first = name_of(inner.children[0]).upper() == "FIRST"
                offset = self._offset(inner, sub[1]) if len(sub) == 2 else 0
                inner = sub[0]
        scope = _RowScope(node)
        arg = self.compile(inner, scope)
        var = scope.var if scope.var is not None else ALL
        g = arg.fn
        sel, uses = self.selector(var, first, offset, prev, node)
        if scope.var is None:  # a constant argument: NULL without a row
            return Compiled(lambda e, c: None if sel(e, c) is None else g(None, None), uses)
        return Compiled(lambda e, c: g(sel(e, c), None), uses)

    def _aggregate(self, fname: str, node: Any, args: Any) -> Compiled:
        if args is None:
            raise self.error(node, f"{fname} needs an argument")
        if args.data == "args_star":
            if fname != "COUNT":
                raise self.error(node, f"{fname}(*) is not valid; only COUNT(*)")
            every = self.rows_of(ALL)
            return Compiled(lambda e, c: len(every(e, c)), True)
        if args.data == "args_var_star":
            var = name_of(args.children[0])
            if fname != "COUNT":
                raise self.error(node, f"{fname}({var}.*) is not valid; only COUNT({var}.*)")
            if var not in self.variables:
                raise self.error(node, f"{var!r} is not a pattern variable")
            of_var = self.rows_of(var)
            return Compiled(lambda e, c: len(of_var(e, c)), True)
        items = self._plain_args(fname, node, args)
        if len(items) != 1:
            raise self.error(node, f"{fname} takes one argument, got {len(items)}")
        scope = _RowScope(node)
        g = self.compile(items[0], scope).fn
        rows = self.rows_of(scope.var if scope.var is not None else ALL)
        return Compiled(lambda e, c: _agg(fname, [g(r, None) for r in rows(e, c)]), True)

    # operators -------------------------------------------------------------------------------
    def _binop(self, node: Any, rows: Any) -> Compiled:
        a, op_tok, b = node.children
        return self._binary(str(op_tok), self.compile(a, rows), self.compile(b, rows))

    def _compare(self, node: Any, rows: Any) -> Compiled:
        a, op_tok, b = node.children
        return self._binary(str(op_tok), self.compile(a, rows), self.compile(b, rows))

    def _binary(self, op: str, a: Compiled, b: Compiled) -> Compiled:
        f = _BINARY[op]
        fa, fb = a.fn, b.fn

        def binary(e: Any, c: Any) -> Any:
            x = fa(e, c)
            if x is None:
                return None
            y = fb(e, c)
            if y is None:
                return None
            return f(x, y)

        return Compiled(binary, a.uses_ctx or b.uses_ctx)

    def _neg(self, node: Any, rows: Any) -> Compiled:
        a = self.compile(node.children[-1], rows)
        fa = a.fn
        return Compiled(lambda e, c: None if (v := fa(e, c)) is None else -v, a.uses_ctx)

    def _unary(self, node: Any, rows: Any) -> Compiled:  # unary plus
        return self.compile(node.children[-1], rows)

    def _and_op(self, node: Any, rows: Any) -> Compiled:
        a, b = (self.compile(x, rows) for x in node.children)
        fa, fb = a.fn, b.fn

        def and_(e: Any, c: Any) -> Any:
            x = fa(e, c)
            if x is not None and not x:
                return False
            y = fb(e, c)
            if y is not None and not y:
                return False
            return None if x is None or y is None else True

        return Compiled(and_, a.uses_ctx or b.uses_ctx)

    def _or_op(self, node: Any, rows: Any) -> Compiled:
        a, b = (self.compile(x, rows) for x in node.children)
        fa, fb = a.fn, b.fn

        def or_(e: Any, c: Any) -> Any:
            x = fa(e, c)
            if x:
                return True
            y = fb(e, c)
            if y:
                return True
            return None if x is None or y is None else False

        return Compiled(or_, a.uses_ctx or b.uses_ctx)

    def _not_op(self, node: Any, rows: Any) -> Compiled:
        a = self.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: None if (v := fa(e, c)) is None else not v, a.uses_ctx)

    def _is_null(self, node: Any, rows: Any) -> Compiled:
        a = self.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: fa(e, c) is None, a.uses_ctx)

    def _is_not_null(self, node: Any, rows: Any) -> Compiled:
        a = self.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: fa(e, c) is not None, a.uses_ctx)

    def _between(self, node: Any, rows: Any) -> Compiled:
        x, negate, lo, hi = node.children
        a, b, h = (self.compile(n, rows) for n in (x, lo, hi))
        fa, fb, fh = a.fn, b.fn, h.fn
        neg = negate is not None

        def between(e: Any, c: Any) -> Any:
            v, low, high = fa(e, c), fb(e, c), fh(e, c)
            ge = None if v is None or low is None else v >= low
            le = None if v is None or high is None else v <= high
            if ge is False or le is False:
                r: Any = False
            elif ge is None or le is None:
                r = None
            else:
                r = True
            return r if r is None or not neg else not r

        return Compiled(between, a.uses_ctx or b.uses_ctx or h.uses_ctx)

    def _in_list(self, node: Any, rows: Any) -> Compiled:
        x, negate, *items = node.children
        a = self.compile(x, rows)
        cs = [self.compile(n, rows) for n in items]
        fa, fns = a.fn, [c.fn for c in cs]
        neg = negate is not None

        def in_(e: Any, c: Any) -> Any:
            v = fa(e, c)
            if v is None:
                return None
            unknown = False
            for f in fns:
                w = f(e, c)
                if w is None:
                    unknown = True
                elif v == w:
                    return not neg
            return None if unknown else neg

        return Compiled(in_, a.uses_ctx or any(c.uses_ctx for c in cs))

    def _case_expr(self, node: Any, rows: Any) -> Compiled:
        *whens, default = node.children
        pairs = [(self.compile(w.children[0], rows), self.compile(w.children[1], rows)) for w in whens]
        d = self.compile(default, rows) if default is not None else _const(None)
        fns = [(p.fn, v.fn) for p, v in pairs]
        fd = d.fn

        def case(e: Any, c: Any) -> Any:
            for p, v in fns:
                if p(e, c):
                    return v(e, c)
            return fd(e, c)

        uses = d.uses_ctx or any(p.uses_ctx or v.uses_ctx for p, v in pairs)
        return Compiled(case, uses)


def _const(value: Any) -> Compiled:
    return Compiled(lambda _e, _c: value, False)


def _pos(node: Any) -> tuple[int, int]:
    meta = getattr(node, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return meta.line, meta.column
    return getattr(node, "line", 0) or 0, getattr(node, "column", 0) or 0


def _unquote_string(tok: str) -> str:
    return tok[1:-1].replace("''", "'")


def name_of(node: Any) -> str:
    """The identifier of a ``name`` node (quoted ones unquoted, case kept)."""
    tok = node.children[0] if hasattr(node, "children") else node
    s = str(tok)
    if tok.type == "QUOTED_NAME":
        q = s[0]
        return s[1:-1].replace(q + q, q)
    return s


def interval_of(comp: ExprCompiler, node: Any) -> dt.timedelta:
    """The ``timedelta`` of an ``interval`` node (errors at its position)."""
    sign, literal, start, end = node.children
    try:
        td = interval_value(
            _unquote_string(str(literal)), str(start.children[0]).upper(),
            str(end.children[0]).upper() if end is not None else None,
        )  # fmt: skip
    except ValueError as exc:
        raise comp.error(node, f"bad interval: {exc}") from None
    return -td if sign is not None and str(sign) == "-" else td
