"""A DataFrame bound to a dataflow input (:class:`Source`), and the checks its schema
passes before the first batch (:func:`check_source`).

>>> Source("df").record, Source("df", time="hour").lateness
('dict', 0)
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import define

from tstate.errors import ConfigurationError, SparkError

__all__ = ["Source", "check_source"]

_INT_TYPES = ("tinyint", "smallint", "int", "bigint")


@define
class Source:
    """A DataFrame bound to a dataflow input.

    ``time``: an integer column of event times (None: each micro-batch is one epoch,
    numbered by its batch id; a static DataFrame without it is epoch 0);
    ``lateness``: with ``time`` in a streaming run, how far (in epochs) the frontier
    stays behind the largest time seen: a row up to ``lateness`` epochs older than the
    newest one is still on time (rows ahead of the frontier are held back, durably,
    until it reaches them);
    ``record``: what a row becomes — ``"dict"`` (column → value), ``"tuple"`` or
    ``"value"`` (the first column); ``columns``: the columns and Spark types the
    dataflow expects (``{"key": "string", "hour": "bigint"}``), checked before the
    first batch."""

    df: Any
    time: Optional[str] = None
    record: str = "dict"
    columns: Optional[dict[str, str]] = None
    lateness: int = 0


def check_source(name: str, src: Source) -> None:
    """Input ``name``'s binding is usable: a known record shape, a DataFrame with the
    columns and types the dataflow expects, an integer time column if any, and a
    lateness only with one; else a :class:`~tstate.errors.ConfigurationError` or
    :class:`~tstate.errors.SparkError` naming the input and column."""
    if src.record not in ("dict", "tuple", "value"):
        raise ConfigurationError(f"input {name!r}: record must be 'dict', 'tuple' or 'value', got {src.record!r}")
    try:
        fields = {f.name: f.dataType.simpleString() for f in src.df.schema.fields}
    except AttributeError:
        raise SparkError(f"input {name!r}: expected a Spark DataFrame, got {type(src.df).__name__}") from None
    want = dict(src.columns or {})
    for col, tp in want.items():
        if col not in fields:
            raise SparkError(
                f"input {name!r}: the DataFrame has no column {col!r} that the dataflow expects "
                f"(it has: {', '.join(f'{k} {v}' for k, v in fields.items())})"
            )
        if fields[col] != tp:
            raise SparkError(f"input {name!r}: column {col!r} is {fields[col]}, the dataflow expects {tp}")
    if not isinstance(src.lateness, int) or src.lateness < 0:
        raise ConfigurationError(f"input {name!r}: lateness must be an integer >= 0, got {src.lateness!r}")
    if src.lateness and src.time is None:
        raise ConfigurationError(f"input {name!r}: lateness needs a time column")
    if src.time is not None:
        if src.time not in fields:
            raise SparkError(f"input {name!r}: no time column {src.time!r} (columns: {', '.join(fields)})")
        if fields[src.time] not in _INT_TYPES:
            raise SparkError(
                f"input {name!r}: time column {src.time!r} is {fields[src.time]}; it must be an integer column "
                "(epochs), e.g. cast a timestamp to hours"
            )
