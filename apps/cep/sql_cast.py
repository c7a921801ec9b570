"""``CAST(x AS type)`` and ``TRY_CAST(x AS type)`` in MATCH_RECOGNIZE expressions, with
Flink's semantics (its cast rules, ``table.exec.legacy-cast-behaviour`` off, the default).

The types a query may cast to (:data:`TARGETS`), and what a value becomes:

* ``BIGINT`` / ``INT`` (``INTEGER``): an integer stays (``INT``: wrapped to 32 bits, as
  Java's ``(int)`` of a ``long``); a float is truncated toward zero (``CAST(-2.7 AS INT)``
  is ``-2``; NaN is 0; out of range: the type's limit, as Java's ``(long)`` / ``(int)`` of
  a ``double``); a string is trimmed and parsed (``'42'``, ``' -7 '``; a fraction is cut:
  ``'1.9'`` is 1; anything else, or out of range, fails); ``TRUE`` / ``FALSE`` are 1 / 0;
* ``DOUBLE``: a number as a float; a string trimmed and parsed as Java's
  ``Double.parseDouble`` does (``'1.5'``, ``'2e3'``, ``'NaN'``, ``'-Infinity'``); booleans 1.0 / 0.0;
* ``VARCHAR`` (``STRING``): a string stays; an integer its digits; a float as Java's
  ``Double.toString`` (``1.0``, ``1.0E7``, ``1.0E-4``, ``NaN``); a boolean ``TRUE`` /
  ``FALSE``; a timestamp ``yyyy-MM-dd HH:mm:ss.SSS`` (``.SSSSSS`` when it has
  microseconds); an interval ``+d HH:mm:ss.SSS``;
* ``TIMESTAMP(p)`` (``TIMESTAMP``: ``p = 6``): a datetime with its fraction cut to ``p``
  digits (Python keeps microseconds: ``p`` from 0 to 6); a string ``yyyy-MM-dd``,
  ``yyyy-MM-dd HH:mm[:ss[.fff...]]`` (or with ``T``) parsed; numbers and booleans are
  refused, as Flink refuses them (use ``TO_TIMESTAMP`` there).

NULL casts to NULL.  A cast that fails raises :class:`CastError` (a ``ValueError``; the
query reports it as :class:`~apps.cep.errors.ExpressionError`: ``CAST('non-number' AS
INT)`` "throws an exception and fails the job", as Flink's documentation puts it);
``TRY_CAST`` gives NULL instead.  A cast Flink refuses for every value of the input's
type (a number to ``TIMESTAMP``) fails for ``TRY_CAST`` too.

>>> cast_function("INT", None, try_=False)(-2.7), cast_function("BIGINT", None, try_=False)(" 42 ")
(-2, 42)
>>> cast_function("VARCHAR", None, try_=False)(1e7), cast_function("INT", None, try_=True)("non-number") is None
('1.0E7', True)
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Optional

__all__ = ["TARGETS", "CastError", "cast_function", "java_double"]

#: the type names CAST accepts, and their canonical names
TARGETS = {
    "BIGINT": "BIGINT", "INT": "INT", "INTEGER": "INT", "DOUBLE": "DOUBLE", "VARCHAR": "VARCHAR",
    "STRING": "VARCHAR", "TIMESTAMP": "TIMESTAMP",
}  # fmt: skip

_LIMITS = {"BIGINT": 63, "INT": 31}
_INTEGER = re.compile(r"[+-]?(\d+)(\.\d*)?|[+-]?\.\d+")
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?")
_TIMESTAMP = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?")


class CastError(ValueError):
    """A value that cannot be cast to the target type."""


def cast_function(target: str, precision: Optional[int], *, try_: bool) -> Callable[[Any], Any]:
    """``convert(value)`` for ``CAST(value AS target[(precision)])`` (``try_``:
    ``TRY_CAST``); ``target`` is one of :data:`TARGETS` (upper case)."""
    kind = TARGETS[target]
    if kind == "TIMESTAMP":
        p = 6 if precision is None else precision
        base: Callable[[Any], Any] = lambda v: _to_timestamp(v, p)  # noqa: E731
    elif kind == "VARCHAR":
        base = _to_varchar
    elif kind == "DOUBLE":
        base = _to_double
    else:
        bits = _LIMITS[kind]
        base = lambda v: _to_integer(v, kind, bits)  # noqa: E731

    def cast(value: Any) -> Any:
        if value is None:
            return None
        if not try_:
            return base(value)
        try:
            return base(value)
        except _Refused:
            raise
        except CastError:
            return None

    return cast


class _Refused(CastError):
    """A cast Flink refuses for the input's type (TRY_CAST fails on it too)."""


def _refuse(value: Any, target: str) -> _Refused:
    what = {bool: "BOOLEAN", int: "an integer", float: "a DOUBLE", dt.datetime: "a TIMESTAMP", dt.date: "a DATE",
            dt.timedelta: "an INTERVAL"}.get(type(value), type(value).__name__)  # fmt: skip
    return _Refused(f"cannot cast {what} ({value!r}) to {target} (Flink does not)")


def _to_integer(v: Any, kind: str, bits: int) -> int:
    hi = (1 << bits) - 1
    lo = -(1 << bits)
    t = type(v)
    if t is bool:
        return int(v)
    if t is int:
        if lo <= v <= hi:
            return int(v)
        return ((v - lo) % (1 << (bits + 1))) + lo  # Java's narrowing: the low bits
    if t is float:
        if math.isnan(v):
            return 0
        if v >= hi:
            return hi
        if v <= lo:
            return lo
        return int(v)  # toward zero
    if t is str:
        s = v.strip()
        m = _INTEGER.fullmatch(s)
        if m is None:
            raise CastError(f"cannot cast {v!r} to {kind}: not an integer")
        n = int(s.split(".")[0]) if m.group(1) is not None else 0
        if not lo <= n <= hi:
            raise CastError(f"cannot cast {v!r} to {kind}: out of range")
        return n
    raise _refuse(v, kind)


def _to_double(v: Any) -> float:
    t = type(v)
    if t is float:
        return v  # type: ignore[no-any-return]
    if t is int or t is bool:
        return float(v)
    if t is str:
        s = v.strip()
        if _DOUBLE.fullmatch(s) is None:
            raise CastError(f"cannot cast {v!r} to DOUBLE: not a number")
        return float(s.rstrip("fFdD").replace("Infinity", "inf"))
    raise _refuse(v, "DOUBLE")


def java_double(d: float) -> str:
    """``d`` as Java's ``Double.toString`` writes it (``1.0``, ``1.0E7``, ``1.5E-4``)."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    a = abs(d)
    if 1e-3 <= a < 1e7:
        r = repr(d)
        if "e" in r or "E" in r:  # Python writes some of these in exponent form
            r = format(Decimal(r), "f")
        return r if "." in r else r + ".0"
    sign, digits, exp = Decimal(repr(a)).normalize().as_tuple()
    ds = "".join(map(str, digits))
    e = len(ds) - 1 + int(exp)
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return ("-" if d < 0 else "") + f"{mantissa}E{e}"


def _to_varchar(v: Any) -> str:
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if t is bool:
        return "TRUE" if v else "FALSE"
    if t is int:
        return str(v)
    if t is float:
        return java_double(v)
    if isinstance(v, dt.datetime):
        frac = f".{v.microsecond:06d}" if v.microsecond % 1000 else f".{v.microsecond // 1000:03d}"
        return v.strftime("%Y-%m-%d %H:%M:%S") + frac
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        sign = "-" if v < dt.timedelta(0) else "+"
        a = -v if v < dt.timedelta(0) else v
        h, rest = divmod(a.seconds, 3600)
        m, s = divmod(rest, 60)
        return f"{sign}{a.days} {h:02d}:{m:02d}:{s:02d}.{a.microseconds // 1000:03d}"
    raise _refuse(v, "VARCHAR")


def _to_timestamp(v: Any, p: int) -> dt.datetime:
    if isinstance(v, dt.datetime):
        out = v
    elif isinstance(v, dt.date):
        out = dt.datetime(v.year, v.month, v.day)
    elif type(v) is str:
        m = _TIMESTAMP.fullmatch(v.strip())
        if m is None:
            raise CastError(f"cannot cast {v!r} to TIMESTAMP: not 'yyyy-MM-dd[ HH:mm[:ss[.fff]]]'")
        y, mo, d, h, mi, s, frac = m.groups()
        try:
            out = dt.datetime(
                int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), int((frac or "0").ljust(6, "0")[:6])
            )
        except ValueError as exc:
            raise CastError(f"cannot cast {v!r} to TIMESTAMP: {exc}") from None
    else:
        raise _refuse(v, f"TIMESTAMP({p})")
    if p < 6:
        step = 10 ** (6 - p)
        out = out.replace(microsecond=out.microsecond - out.microsecond % step)
    return out
