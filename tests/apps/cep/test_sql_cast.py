"""CAST / TRY_CAST in MATCH_RECOGNIZE queries, as Flink casts (issue 24, item 5): the
values Flink's documentation gives, Java's conversions on random inputs, and the types
refused with the supported ones named."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.cep import ExpressionError, SqlError
from apps.cep.sql import match_recognize
from apps.cep.sql_cast import cast_function, java_double


def measure(expr: str, row: dict[str, Any] | None = None) -> Any:
    q = match_recognize(f"ORDER BY t MEASURES {expr} AS v PATTERN (A) DEFINE A AS TRUE")
    (out,) = q.run([{"t": 0, **(row or {})}])
    return out["v"]


def test_the_values_flinks_documentation_gives() -> None:
    # docs/dev/table/types.md, "Casting" (and CAST / TRY_CAST in the system functions)
    assert measure("CAST('42' AS INT)") == 42
    assert measure("CAST(NULL AS VARCHAR)") is None
    with pytest.raises(ExpressionError, match=r"MEASURES v .*CAST\('non-number' AS INT\).*not an integer"):
        measure("CAST('non-number' AS INT)")  # "throws an exception and fails the job"
    assert measure("TRY_CAST('42' AS INT)") == 42
    assert measure("TRY_CAST(NULL AS VARCHAR)") is None
    assert measure("TRY_CAST('non-number' AS INT)") is None
    assert measure("COALESCE(TRY_CAST('non-number' AS INT), 0)") == 0


def test_casts_of_columns_in_define_and_measures() -> None:
    q = match_recognize(
        "ORDER BY t MEASURES CAST(A.d AS INT) AS i, CAST(A.d AS BIGINT) AS b, CAST(A.n AS DOUBLE) AS f, "
        "CAST(A.n AS VARCHAR) || '/' || CAST(A.d AS STRING) AS s, CAST(A.ts AS TIMESTAMP(3)) AS ts, "
        "CAST(A.txt AS TIMESTAMP) AS parsed, CAST(A.ok AS INT) AS flag "
        "PATTERN (A) DEFINE A AS CAST(A.d AS INT) = -2 AND CAST(A.txt AS TIMESTAMP(0)) < A.ts"
    )
    row = {"t": 0, "d": -2.7, "n": 7, "ts": dt.datetime(2024, 1, 1, 10, 0, 0, 123456),
           "txt": "2024-01-01 09:59:59.5", "ok": True}  # fmt: skip
    assert q.run([row, {**row, "d": 2.7}]) == [{
        "i": -2, "b": -2, "f": 7.0, "s": "7/-2.7", "ts": dt.datetime(2024, 1, 1, 10, 0, 0, 123000),
        "parsed": dt.datetime(2024, 1, 1, 9, 59, 59, 500000), "flag": 1,
    }]  # fmt: skip
    # a failed cast in DEFINE names the condition and the row
    with pytest.raises(ExpressionError, match=r"DEFINE A .*CAST\(A.d AS INT\) = -2.*not an integer.*'d': 'x'"):
        q.run([{**row, "d": "x"}])
    # a cast Flink refuses for the type, not the value: TRY_CAST fails too
    with pytest.raises(ExpressionError, match=r"cannot cast an integer \(5\) to TIMESTAMP\(3\) \(Flink does not\)"):
        measure("TRY_CAST(A.n AS TIMESTAMP(3))", {"n": 5})


def test_unsupported_types_are_refused_naming_the_supported_ones() -> None:
    for t in ("DECIMAL(10, 2)", "FLOAT", "VARCHAR(3)", "DATE", "TIMESTAMP_LTZ(3)", "INT(4)"):
        with pytest.raises(SqlError) as err:
            match_recognize(f"ORDER BY t MEASURES CAST(A.x AS {t}) AS c PATTERN (A) DEFINE A AS TRUE")
        assert f"CAST to {t} is not supported; the types are BIGINT, INT, INTEGER, DOUBLE, VARCHAR, STRING" in str(err.value)
        assert (err.value.line, err.value.column) == (1, 33)
    with pytest.raises(SqlError, match="the precision must be 0 to 9"):
        match_recognize("ORDER BY t PATTERN (A) DEFINE A AS CAST(A.x AS TIMESTAMP(10)) IS NULL")


def java_int(x: float, bits: int) -> int:
    """Java's ``(int)`` / ``(long)`` of a double (JLS 5.1.3)."""
    lim = 2 ** (bits - 1)
    if math.isnan(x):
        return 0
    return int(max(-lim, min(lim - 1, math.trunc(x)))) if not math.isinf(x) else (lim - 1 if x > 0 else -lim)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_double_to_int_or_bigint_truncates_and_saturates_as_java(x: float) -> None:
    assert cast_function("INT", None, try_=False)(x) == java_int(x, 32)
    assert cast_function("BIGINT", None, try_=False)(x) == java_int(x, 64)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_a_bigint_to_int_keeps_the_low_32_bits_and_strings_round_trip(n: int) -> None:
    low = n & 0xFFFFFFFF
    assert cast_function("INT", None, try_=False)(n) == (low - 2**32 if low >= 2**31 else low)
    assert cast_function("BIGINT", None, try_=False)(f"  {n} ") == n
    assert cast_function("VARCHAR", None, try_=False)(n) == str(n)
    if not -(2**31) <= n < 2**31:
        with pytest.raises(ValueError, match="out of range"):
            cast_function("INT", None, try_=False)(str(n))
        assert cast_function("INT", None, try_=True)(str(n)) is None


def test_doubles_as_java_writes_them() -> None:
    # Double.toString: plain notation in [1e-3, 1e7), else computerized scientific notation
    cases = [(1.0, "1.0"), (100.0, "100.0"), (0.001, "0.001"), (1e-4, "1.0E-4"), (1e7, "1.0E7"),
             (123456789.0, "1.23456789E8"), (-2.5e-5, "-2.5E-5"), (1234567.5, "1234567.5"), (0.0, "0.0"),
             (-0.0, "-0.0"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (math.nan, "NaN"), (1e21, "1.0E21")]  # fmt: skip
    for v, want in cases:
        assert java_double(v) == want, v
    for s, want in {"1.5": 1.5, " 2e3 ": 2000.0, "NaN": None, "-Infinity": -math.inf, "3d": 3.0}.items():
        got = cast_function("DOUBLE", None, try_=False)(s)
        assert (math.isnan(got) if want is None else got == want), s
    for bad in ("nan", "1,5", "", "0x10", "inf"):
        assert cast_function("DOUBLE", None, try_=True)(bad) is None, bad


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_double_written_as_java_reads_back(x: float) -> None:
    s = java_double(x)
    assert float(s) == x and ("E" in s) == (x != 0 and not 1e-3 <= abs(x) < 1e7)
