"""Function calls in MATCH_RECOGNIZE expressions: navigation (``FIRST``, ``LAST``,
``PREV``, ``NEXT``), aggregates (``COUNT``, ``SUM``, ``AVG``, ``MIN``, ``MAX``) and scalar
functions (``ABS``, ``COALESCE``, ``UPPER``, ``LOWER``, ``MATCH_ROWTIME``), compiled for
:class:`~apps.cep.sql_expressions.ExprCompiler` (the semantics are in its module
docstring) -- and the pieces both share: :class:`Compiled`, :class:`RowScope`.

Aggregates give Flink's result types: ``COUNT`` an integer, ``SUM`` of integers an
integer, ``AVG`` of integers an integer -- the sum divided by the count, truncated toward
zero, as Flink's ``AVG`` of an ``INT`` / ``BIGINT`` column (its result type is the
column's) -- and of any float a float.  ``exact_avg=True`` (an option of
:func:`~apps.cep.sql.match_recognize`) divides exactly instead.

>>> avg = aggregate_function("AVG", exact_avg=False)
>>> avg([12, 17]), avg([-7, 0]), avg([1.0, 2]), aggregate_function("AVG", exact_avg=True)([12, 17])
(14, -3, 1.5, 14.5)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Protocol

from attrs import frozen

from apps.cep.errors import SqlError

__all__ = ["ALL", "AGGREGATES", "Compiled", "Fn", "Functions", "Host", "RowScope", "aggregate_function", "const", "name_of"]

#: the default pattern variable (every row)
ALL = "*"
AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX")
NAVIGATION = ("FIRST", "LAST", "PREV", "NEXT")
SCALARS = ("ABS", "COALESCE", "UPPER", "LOWER")
Fn = Callable[[Any, Any], Any]


#: :attr:`Compiled.constant` of an expression that is not a constant
NOT_CONSTANT: Any = object()


@frozen
class Compiled:
    """A compiled expression: ``fn(event, ctx)`` (in MEASURES: ``fn(None, match)``);
    ``uses_ctx`` is false when it reads only the current row (a simple condition).
    What lets an operator on it evaluate with fewer calls (the result is the same):
    ``constant``, its value when it is a constant (else :data:`NOT_CONSTANT`);
    ``row_get``, when it is a column of the current row in DEFINE, the getter with
    ``fn(e, c) == row_get(e)``."""

    fn: Fn
    uses_ctx: bool
    constant: Any = NOT_CONSTANT
    row_get: Optional[Callable[[Any], Any]] = None


def const(value: Any) -> Compiled:
    """A constant expression."""
    return Compiled(lambda _e, _c: value, False, value)


def current_row(e: Any, _c: Any) -> Any:
    """The selector of the row being tested (DEFINE's current variable, offset 0)."""
    return e


class RowScope:
    """While compiling the argument of a navigation or aggregate: collects the one
    variable its columns reference."""

    def __init__(self, where: Any) -> None:
        self.var: Optional[str] = None
        self.where = where


class Host(Protocol):
    """What :class:`Functions` needs of the expression compiler it serves."""

    variables: tuple[str, ...]
    current: Optional[str]
    define: bool
    exact_avg: bool

    def error(self, node: Any, message: str) -> SqlError: ...

    def compile(self, node: Any, rows: Optional[RowScope] = None) -> Compiled: ...


def _int_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _total(vals: list[Any]) -> Any:
    total = vals[0]
    for v in vals[1:]:
        total = total + v
    return total


def _count(vals: list[Any]) -> int:
    return len(vals)


def _sum(vals: list[Any]) -> Any:
    return _total(vals) if vals else None


def _min(vals: list[Any]) -> Any:
    return min(vals) if vals else None


def _max(vals: list[Any]) -> Any:
    return max(vals) if vals else None


def _avg_exact(vals: list[Any]) -> Any:
    return _total(vals) / len(vals) if vals else None


def _avg_flink(vals: list[Any]) -> Any:
    if not vals:
        return None
    total = _total(vals)
    if type(total) is int and all(type(v) is int for v in vals):
        return _int_div(total, len(vals))
    return total / len(vals)


def aggregate_function(name: str, *, exact_avg: bool) -> Callable[[list[Any]], Any]:
    """``fn(values)`` of aggregate ``name`` over the non-NULL values (empty: NULL, and 0
    for ``COUNT``)."""
    fns: dict[str, Callable[[list[Any]], Any]] = {
        "COUNT": _count, "SUM": _sum, "MIN": _min, "MAX": _max, "AVG": _avg_exact if exact_avg else _avg_flink,
    }  # fmt: skip
    return fns[name]


def name_of(node: Any) -> str:
    """The identifier of a ``name`` node (quoted ones unquoted, case kept)."""
    tok = node.children[0] if hasattr(node, "children") else node
    s = str(tok)
    if tok.type == "QUOTED_NAME":
        q = s[0]
        return s[1:-1].replace(q + q, q)
    return s


class Functions:
    """Compiles the function calls of one clause for ``host`` (an
    :class:`~apps.cep.sql_expressions.ExprCompiler`)."""

    def __init__(self, host: Host) -> None:
        self.host = host

    # rows of a variable and navigation -----------------------------------------------------
    def rows_of(self, var: str) -> Fn:
        """``(e, ctx) -> list`` of the rows of ``var`` (see the module docstring)."""
        h = self.host
        if not h.define:
            if var == ALL:
                return lambda _e, m: m.events()
            return lambda _e, m: m[var]
        if var == ALL:
            return lambda e, c: [*c.all_events(), e]
        if var == h.current:
            return lambda e, c: [*c.events(var), e]
        return lambda _e, c: c.events(var)

    def selector(self, var: str, first: bool, offset: int, prev: int) -> tuple[Fn, bool]:
        """``(e, ctx) -> row or None`` for ``FIRST/LAST(var, offset)`` moved ``prev`` rows
        back (forward if negative), and whether it needs the context."""
        h = self.host
        cur = h.define and var in (ALL, h.current)
        if h.define and not first and not prev:
            if offset == 0 and cur:
                return current_row, False
            if offset == 1 and var == ALL:
                return (lambda _e, c: c.previous()), True
            if offset == 1 and var == h.current:
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
    def call(self, node: Any, rows: Optional[RowScope]) -> Compiled:
        """A ``call`` node: ``name(args)``."""
        h = self.host
        fname = name_of(node.children[0]).upper()
        args = node.children[1]
        if fname in NAVIGATION or fname in AGGREGATES:
            if rows is not None:
                raise h.error(
                    node, f"{fname}(...) inside the argument of another navigation function or aggregate is not supported"
                )
            return (self.navigation if fname in NAVIGATION else self.aggregate)(fname, node, args)
        if fname == "MATCH_ROWTIME":
            if h.define:
                raise h.error(node, "MATCH_ROWTIME() is available in MEASURES only")
            if args is not None:
                raise h.error(node, "MATCH_ROWTIME() takes no argument here")
            return Compiled(lambda _e, m: m.last_time, True)
        if fname in SCALARS:
            return self.scalar(fname, node, args, rows)
        raise h.error(
            node,
            f"unknown function {fname}; supported: {', '.join(NAVIGATION + AGGREGATES + SCALARS)}, MATCH_ROWTIME, "
            "CAST, TRY_CAST",
        )

    def scalar(self, fname: str, node: Any, args: Any, rows: Optional[RowScope]) -> Compiled:
        compiled = [self.host.compile(a, rows) for a in self.plain_args(fname, node, args)]
        fns = [c.fn for c in compiled]
        uses = any(c.uses_ctx for c in compiled)
        if fname == "COALESCE":
            if not fns:
                raise self.host.error(node, "COALESCE needs at least one argument")

            def coalesce(e: Any, c: Any) -> Any:
                for f in fns:
                    v = f(e, c)
                    if v is not None:
                        return v
                return None

            return Compiled(coalesce, uses)
        if len(fns) != 1:
            raise self.host.error(node, f"{fname} takes one argument, got {len(fns)}")
        f0 = fns[0]
        scalars: dict[str, Callable[[Any], Any]] = {"ABS": abs, "UPPER": str.upper, "LOWER": str.lower}
        op = scalars[fname]
        return Compiled(lambda e, c: None if (v := f0(e, c)) is None else op(v), uses)

    def plain_args(self, fname: str, node: Any, args: Any) -> list[Any]:
        if args is None:
            return []
        if args.data != "args":
            raise self.host.error(node, f"{fname}({'*' if args.data == 'args_star' else 'X.*'}) is not valid")
        if args.children[0] is not None:
            raise self.host.error(node, f"DISTINCT is not supported ({fname})")
        return list(args.children[1:])

    def _offset(self, arg: Any) -> int:
        if getattr(arg, "data", None) != "int_lit":
            raise self.host.error(arg, "the offset of a navigation function must be a non-negative integer literal")
        return int(arg.children[0])

    def navigation(self, fname: str, node: Any, args: Any) -> Compiled:
        h = self.host
        items = self.plain_args(fname, node, args)
        if not 1 <= len(items) <= 2:
            raise h.error(node, f"{fname} takes an expression and an optional offset, got {len(items)} arguments")
        n = self._offset(items[1]) if len(items) == 2 else (1 if fname in ("PREV", "NEXT") else 0)
        inner = items[0]
        first, offset, prev = False, 0, 0
        if fname in ("FIRST", "LAST"):
            first, offset = fname == "FIRST", n
        else:
            if fname == "NEXT" and h.define and n:
                raise h.error(node, "NEXT looks at rows after the current one: not available in DEFINE")
            prev = n if fname == "PREV" else -n
            # PREV(FIRST/LAST(expr, k), n): a physical offset from a logical position
            if getattr(inner, "data", None) == "call" and name_of(inner.children[0]).upper() in ("FIRST", "LAST"):
                sub = self.plain_args("FIRST", inner, inner.children[1])
                if not 1 <= len(sub) <= 2:
                    raise h.error(inner, "FIRST/LAST takes an expression and an optional offset")
                first = name_of(inner.children[0]).upper() == "FIRST"
                offset = self._offset(sub[1]) if len(sub) == 2 else 0
                inner = sub[0]
        scope = RowScope(node)
        arg = h.compile(inner, scope)
        var = scope.var if scope.var is not None else ALL
        g = arg.fn
        sel, uses = self.selector(var, first, offset, prev)
        if scope.var is None:  # a constant argument: NULL without a row
            return Compiled(lambda e, c: None if sel(e, c) is None else g(None, None), uses)
        return Compiled(lambda e, c: g(sel(e, c), None), uses)

    def aggregate(self, fname: str, node: Any, args: Any) -> Compiled:
        h = self.host
        if args is None:
            raise h.error(node, f"{fname} needs an argument")
        if args.data == "args_star":
            if fname != "COUNT":
                raise h.error(node, f"{fname}(*) is not valid; only COUNT(*)")
            every = self.rows_of(ALL)
            return Compiled(lambda e, c: len(every(e, c)), True)
        if args.data == "args_var_star":
            var = name_of(args.children[0])
            if fname != "COUNT":
                raise h.error(node, f"{fname}({var}.*) is not valid; only COUNT({var}.*)")
            if var not in h.variables:
                raise h.error(node, f"{var!r} is not a pattern variable")
            of_var = self.rows_of(var)
            return Compiled(lambda e, c: len(of_var(e, c)), True)
        items = self.plain_args(fname, node, args)
        if len(items) != 1:
            raise h.error(node, f"{fname} takes one argument, got {len(items)}")
        scope = RowScope(node)
        g = h.compile(items[0], scope).fn
        rows = self.rows_of(scope.var if scope.var is not None else ALL)
        agg = aggregate_function(fname, exact_avg=h.exact_avg)

        def aggregate(e: Any, c: Any) -> Any:
            return agg([v for r in rows(e, c) if (v := g(r, None)) is not None])

        return Compiled(aggregate, True)
