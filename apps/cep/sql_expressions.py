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
  empty set gives NULL (``COUNT``: 0).  Result types are Flink's: ``AVG`` of integers
  is an integer, truncated toward zero, as Flink's ``AVG`` of an ``INT``/``BIGINT``
  column (``match_recognize(..., exact_avg=True)`` divides exactly); see
  :mod:`apps.cep.sql_functions`.
* **NULL** is ``None``, with SQL's three-valued logic: comparisons and arithmetic with
  NULL give NULL, ``NULL AND FALSE`` is FALSE, ``NOT NULL`` is NULL, a condition holds
  only when TRUE.  ``/`` of two integers truncates toward zero, ``%`` takes the sign of
  the dividend (SQL's ``MOD``).
* Scalars: literals (``1``, ``2.5``, ``'text'``, ``TRUE``, ``NULL``), ``INTERVAL '10'
  MINUTE`` (a ``timedelta``, to add to datetimes), ``+ - * / %``, ``||``, comparisons,
  ``IS [NOT] NULL``, ``[NOT] BETWEEN``, ``[NOT] IN (...)``, ``CASE WHEN``, ``AND``/``OR``/
  ``NOT``, ``ABS``, ``COALESCE``, ``UPPER``, ``LOWER``, ``CAST``/``TRY_CAST(x AS
  DOUBLE | BIGINT | INT | VARCHAR | TIMESTAMP(p))`` (Flink's cast rules:
  :mod:`apps.cep.sql_cast`), and in MEASURES ``MATCH_ROWTIME()`` (the time of the
  match's last row).

Columns are resolved when the expression is compiled, against the fields the rows
declare (:mod:`apps.cep.sql_fields`): a name that is not plain, or not a declared field,
is a :class:`~apps.cep.errors.SqlError` naming it, the clause and the columns there are.
Rows are dicts (``row[col]``) or objects (``row.col``, declared fields only).  A
column a row lacks (rows whose type declares nothing up front) raises
:class:`~apps.cep.errors.EventFieldError`; a type mismatch, a failed ``CAST`` or a
division by zero raises :class:`~apps.cep.errors.ExpressionError` naming the clause
and the expression.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Optional

from apps.cep.errors import EventFieldError, ExpressionError, SqlError
from apps.cep.sql_cast import TARGETS, cast_function
from apps.cep.sql_fields import Fields, RowFields
from apps.cep.sql_functions import ALL, Compiled, Functions, RowScope, const, current_row, name_of
from apps.cep.sql_operators import Operators

__all__ = ["Compiled", "ExprCompiler", "interval_of", "interval_value", "name_of", "sql_error"]


def sql_error(text: str, line: int, column: int, message: str) -> SqlError:
    """A :class:`SqlError` whose message names the position and shows the line."""
    lines = text.splitlines() or [""]
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    caret = " " * (max(column, 1) - 1) + "^"
    return SqlError(f"line {line}, column {column}: {message}\n  {src}\n  {caret}", line=line, column=column)


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


class ExprCompiler:
    """Compiles expressions of one clause: ``DEFINE current`` (``current`` set,
    ``variables`` the pattern's) or ``MEASURES`` (``current`` None).  ``text`` is the
    whole query (for error positions); ``clause`` names the clause in errors."""

    def __init__(
        self, text: str, variables: Sequence[str], current: Optional[str], clause: str,
        fields: Optional[Fields] = None, exact_avg: bool = False,
    ) -> None:  # fmt: skip
        self.text = text
        self.variables = tuple(variables)
        self.current = current
        self.clause = clause
        self.define = current is not None
        self.fields: Fields = fields if fields is not None else RowFields()
        self.exact_avg = exact_avg
        self.functions = Functions(self)
        self.operators = Operators(self)

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
                except (TypeError, ArithmeticError, ValueError) as exc:
                    raise ExpressionError(f"{what}: {type(exc).__name__}: {exc} (row {e!r})") from exc

            return cond

        def cond_ctx(e: Any, ctx: Any) -> Any:
            try:
                return fn(e, ctx)
            except (TypeError, ArithmeticError, ValueError) as exc:
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
            except (TypeError, ArithmeticError, ValueError) as exc:
                raise ExpressionError(f"{what}: {type(exc).__name__}: {exc} (match {m!r})") from exc
            except (KeyError, AttributeError) as exc:
                field = exc.args[0] if isinstance(exc, KeyError) and exc.args else getattr(exc, "name", None)
                raise EventFieldError(
                    f"{what}: a row of the match has no column {field!r} ({type(exc).__name__}: {exc})",
                    stage=name, field=field,
                ) from exc

        return measure

    # -- the compiler ------------------------------------------------------------------------
    def compile(self, node: Any, rows: Optional[RowScope] = None) -> Compiled:
        """``node`` as a :class:`Compiled`; inside a navigation / aggregate argument
        (``rows`` given) the function is ``fn(row, None)`` of the one row it reads."""
        kind = getattr(node, "data", None)
        if kind is None:  # a bare token (cannot happen with this grammar)
            raise self.error(node, f"unexpected {node!r}")
        method = getattr(self, "_" + str(kind), None)
        if method is None and kind in Operators.RULES:
            method = getattr(self.operators, str(kind))
        if method is None:
            raise self.error(node, f"{kind} is not supported in {self.clause}")
        result: Compiled = method(node, rows)
        return result

    # literals
    def _int_lit(self, node: Any, rows: Any) -> Compiled:
        return const(int(node.children[0]))

    def _dec_lit(self, node: Any, rows: Any) -> Compiled:
        return const(float(node.children[0]))

    def _str_lit(self, node: Any, rows: Any) -> Compiled:
        return const(_unquote_string(str(node.children[0])))

    def _true_lit(self, node: Any, rows: Any) -> Compiled:
        return const(True)

    def _false_lit(self, node: Any, rows: Any) -> Compiled:
        return const(False)

    def _null_lit(self, node: Any, rows: Any) -> Compiled:
        return const(None)

    def _interval(self, node: Any, rows: Any) -> Compiled:
        return const(interval_of(self, node))

    # columns
    def _column(self, node: Any, rows: Optional[RowScope]) -> Compiled:
        return self._field(ALL, name_of(node.children[0]), node, rows)

    def _var_column(self, node: Any, rows: Optional[RowScope]) -> Compiled:
        var = name_of(node.children[0])
        if var not in self.variables:
            raise self.error(
                node, f"{var!r} is not a pattern variable (the pattern's variables: {', '.join(self.variables)})"
            )
        return self._field(var, name_of(node.children[1]), node, rows)

    def _field(self, var: str, col: str, node: Any, rows: Optional[RowScope]) -> Compiled:
        problem = self.fields.problem(col)
        if problem is not None:
            raise self.error(node, f"{self.clause}: {problem}")
        get = self.fields.getter(col)
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
        sel, uses = self.functions.selector(var, False, 0, 0)
        if sel is current_row:  # the row being tested (never None): one call
            rget = self.fields.row_getter(col)
            return Compiled(lambda e, _c: rget(e), False, row_get=rget)
        return Compiled(lambda e, c: get(sel(e, c)), uses)

    # calls and casts -------------------------------------------------------------------------
    def _call(self, node: Any, rows: Optional[RowScope]) -> Compiled:
        return self.functions.call(node, rows)

    def _cast_expr(self, node: Any, rows: Optional[RowScope]) -> Compiled:
        kind, expr, type_node = node.children
        type_name, *args = type_node.children
        target = name_of(type_name).upper()
        ints = [int(a) for a in args if a is not None]
        p = ints[0] if len(ints) == 1 else None
        if target not in TARGETS or (ints and (len(ints) > 1 or TARGETS[target] != "TIMESTAMP")):
            wrote = target + (f"({', '.join(map(str, ints))})" if ints else "")
            raise self.error(
                type_node, f"CAST to {wrote} is not supported; the types are {', '.join(TARGETS)} and TIMESTAMP(p)"
            )
        if p is not None and not 0 <= p <= 9:
            raise self.error(type_node, f"TIMESTAMP({p}): the precision must be 0 to 9")
        convert = cast_function(target, p, try_=str(kind).upper() == "TRY_CAST")
        a = self.compile(expr, rows)
        fa = a.fn
        return Compiled(lambda e, c: convert(fa(e, c)), a.uses_ctx)


def _pos(node: Any) -> tuple[int, int]:
    meta = getattr(node, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return meta.line, meta.column
    return getattr(node, "line", 0) or 0, getattr(node, "column", 0) or 0


def _unquote_string(tok: str) -> str:
    return tok[1:-1].replace("''", "'")


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
