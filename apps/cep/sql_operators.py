"""Operators in MATCH_RECOGNIZE expressions, compiled for
:class:`~apps.cep.sql_expressions.ExprCompiler` (the semantics are in its module
docstring): arithmetic, ``||``, comparisons, ``AND``/``OR``/``NOT`` with SQL's
three-valued logic, ``IS [NOT] NULL``, ``[NOT] BETWEEN``, ``[NOT] IN (...)``, ``CASE
WHEN``.  NULL is ``None``: an operator on NULL gives NULL (but ``NULL AND FALSE`` is
FALSE, ``NULL OR TRUE`` is TRUE); ``/`` of two integers truncates toward zero, ``%``
takes the sign of the dividend (SQL's ``MOD``).

>>> _BINARY["/"](-7, 2), _BINARY["%"](-7, 2), _BINARY["||"]("a", 1)
(-3, -1, 'a1')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Protocol

from apps.cep.sql_functions import NOT_CONSTANT, Compiled, RowScope, const

__all__ = ["Operators"]


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


class Compiler(Protocol):
    """What :class:`Operators` needs of the expression compiler it serves."""

    def compile(self, node: Any, rows: Optional[RowScope] = None) -> Compiled: ...


class Operators:
    """The operators' grammar rules (:attr:`RULES`), each compiled from its parse node
    with ``host`` compiling the operands: ``ops.binop(node, rows)`` etc."""

    #: the grammar rules it compiles (the names of its methods)
    RULES = frozenset(
        {
            "binop", "compare", "neg", "unary", "and_op", "or_op", "not_op",
            "is_null", "is_not_null", "between", "in_list", "case_expr",
        }
    )  # fmt: skip

    def __init__(self, host: Compiler) -> None:
        self._host = host

    def binop(self, node: Any, rows: Any) -> Compiled:
        a, op_tok, b = node.children
        return self._binary(str(op_tok), self._host.compile(a, rows), self._host.compile(b, rows))

    def compare(self, node: Any, rows: Any) -> Compiled:
        a, op_tok, b = node.children
        return self._binary(str(op_tok), self._host.compile(a, rows), self._host.compile(b, rows))

    def _binary(self, op: str, a: Compiled, b: Compiled) -> Compiled:
        f = _BINARY[op]
        fa, fb = a.fn, b.fn
        uses = a.uses_ctx or b.uses_ctx
        y0 = b.constant
        ga = a.row_get
        if y0 is not NOT_CONSTANT and y0 is not None:  # (x op literal: what the general case computes)
            if ga is not None:
                g1: Callable[[Any], Any] = ga

                def row_op_const(e: Any, c: Any) -> Any:
                    x = g1(e)
                    return None if x is None else f(x, y0)

                return Compiled(row_op_const, uses)

            def op_const(e: Any, c: Any) -> Any:
                x = fa(e, c)
                return None if x is None else f(x, y0)

            return Compiled(op_const, uses)
        if ga is not None:
            g2: Callable[[Any], Any] = ga

            def row_op(e: Any, c: Any) -> Any:
                x = g2(e)
                if x is None:
                    return None
                y = fb(e, c)
                return None if y is None else f(x, y)

            return Compiled(row_op, uses)

        def binary(e: Any, c: Any) -> Any:
            x = fa(e, c)
            if x is None:
                return None
            y = fb(e, c)
            if y is None:
                return None
            return f(x, y)

        return Compiled(binary, a.uses_ctx or b.uses_ctx)

    def neg(self, node: Any, rows: Any) -> Compiled:
        a = self._host.compile(node.children[-1], rows)
        fa = a.fn
        return Compiled(lambda e, c: None if (v := fa(e, c)) is None else -v, a.uses_ctx)

    def unary(self, node: Any, rows: Any) -> Compiled:  # unary plus
        return self._host.compile(node.children[-1], rows)

    def and_op(self, node: Any, rows: Any) -> Compiled:
        a, b = (self._host.compile(x, rows) for x in node.children)
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

    def or_op(self, node: Any, rows: Any) -> Compiled:
        a, b = (self._host.compile(x, rows) for x in node.children)
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

    def not_op(self, node: Any, rows: Any) -> Compiled:
        a = self._host.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: None if (v := fa(e, c)) is None else not v, a.uses_ctx)

    def is_null(self, node: Any, rows: Any) -> Compiled:
        a = self._host.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: fa(e, c) is None, a.uses_ctx)

    def is_not_null(self, node: Any, rows: Any) -> Compiled:
        a = self._host.compile(node.children[0], rows)
        fa = a.fn
        return Compiled(lambda e, c: fa(e, c) is not None, a.uses_ctx)

    def between(self, node: Any, rows: Any) -> Compiled:
        x, negate, lo, hi = node.children
        a, b, h = (self._host.compile(n, rows) for n in (x, lo, hi))
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

    def in_list(self, node: Any, rows: Any) -> Compiled:
        x, negate, *items = node.children
        a = self._host.compile(x, rows)
        cs = [self._host.compile(n, rows) for n in items]
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

    def case_expr(self, node: Any, rows: Any) -> Compiled:
        *whens, default = node.children
        pairs = [(self._host.compile(w.children[0], rows), self._host.compile(w.children[1], rows)) for w in whens]
        d = self._host.compile(default, rows) if default is not None else const(None)
        fns = [(p.fn, v.fn) for p, v in pairs]
        fd = d.fn

        def case(e: Any, c: Any) -> Any:
            for p, v in fns:
                if p(e, c):
                    return v(e, c)
            return fd(e, c)

        uses = d.uses_ctx or any(p.uses_ctx or v.uses_ctx for p, v in pairs)
        return Compiled(case, uses)
