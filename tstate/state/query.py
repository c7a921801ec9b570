"""State queries: a consistent snapshot of a stateful operator's state, as rows.

A snapshot *at time* ``t`` holds, for every key, its state after exactly the records
(and timers) at times ``< t``.  It can be taken while the dataflow runs (between steps)
or after it finished, when

- every time before ``t`` is complete at the operator (its input frontier passed them),
- no record or timer at a time ``>= t`` has been applied yet, and
- no records are buffered waiting for an earlier time.

``at=None`` takes the latest such time (after the last applied time).  A time that
cannot be served gives a :class:`~tstate.errors.StateQueryError` saying which time can.
Only totally ordered (``int``) times are supported for now.

Formats: None, the default (a :class:`~tstate.state.table.StateTable`: the engine's
:class:`~tstate.backend.StateView`, the Arrow table below and the time), ``"arrow"`` (a ``pyarrow.Table``: a ``key`` column then one column per
struct field, nested types as Arrow nested types; the snapshot time is in the schema
metadata under ``tstate.time``), ``"pandas"`` and ``"dict"`` (``{key: state}``, deep
copies made through the state codec).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Protocol

from tstate.errors import StateQueryError
from tstate.keys import KeyRouter
from tstate.progress.frontier import Antichain
from tstate.state.bin import Bin
from tstate.state.storage import NO_STATE

__all__ = ["snapshot", "consistent_time", "point_read", "Queryable", "KeyedState", "StateFormat"]

#: what a state snapshot is given as: an Arrow table, a pandas DataFrame, or a dict key -> state
StateFormat = Literal["arrow", "pandas", "dict"]


class KeyedState(Protocol):
    """One worker's share of a stateful operator, as a query reads it (the runtime of
    :mod:`tstate.operators.stateful`)."""

    name: str
    bins: dict[int, Bin]
    max_applied: Any
    keys: KeyRouter

    @property
    def state_type(self) -> Any: ...

    @property
    def codec(self) -> Any: ...

    def is_quiet(self) -> bool: ...

    def bin(self, index: int) -> Optional[Bin]:
        """Bin ``index`` if held here, decoded first if a lazy restore left it encoded."""
        ...

    def restore_all(self) -> None:
        """Decode every bin a lazy restore left encoded."""
        ...


class Queryable(Protocol):
    """A running (or finished) execution, as a query reads it."""

    def keyed_state(self, node: int) -> Optional[list[KeyedState]]:
        """Node ``node``'s instance on every worker, or None if it is not stateful."""
        ...

    def node_name(self, node: int) -> str: ...

    def frontier(self, node: int, port: int = 0) -> Antichain: ...


class _Operator(Protocol):
    """A stream handle: the node it is the output of."""

    @property
    def node(self) -> int: ...


def _runtimes(exe: Queryable, op: _Operator) -> list[KeyedState]:
    rts = exe.keyed_state(op.node)
    if rts is None:
        raise StateQueryError(f"operator {exe.node_name(op.node)!r} is not a stateful operator")
    return rts


def consistent_time(exe: Queryable, op: _Operator) -> Any:
    """The latest time the operator's state is a consistent snapshot at, or raise."""
    rts = _runtimes(exe, op)
    name = rts[0].name
    if any(not r.is_quiet() for r in rts):
        raise StateQueryError(f"operator {name!r} has buffered records waiting for earlier times; step further")
    applied = [r.max_applied for r in rts if r.max_applied is not None]
    frontier = exe.frontier(op.node, 0)
    if any(type(t) is not int for t in (*applied, *frontier)):
        raise StateQueryError(f"operator {name!r}: state queries support int times only")
    last = max(applied) if applied else None
    if last is not None and frontier.less_equal(last):
        raise StateQueryError(
            f"operator {name!r}: time {last} is not complete yet (frontier {list(frontier)}); "
            "advance the input and step until it completes"
        )
    if last is None:
        return min(frontier) if frontier else 0
    return last + 1


def snapshot(exe: Queryable, op: _Operator, at: Any = None, format: "Optional[StateFormat]" = None) -> Any:
    """A consistent snapshot (see the module docstring)."""
    rts = _runtimes(exe, op)
    name = rts[0].name
    state_type = rts[0].state_type
    latest = consistent_time(exe, op)
    if at is None:
        at = latest
    else:
        frontier = exe.frontier(op.node, 0)
        applied = [r.max_applied for r in rts if r.max_applied is not None]
        if applied and max(applied) >= at:
            raise StateQueryError(
                f"operator {name!r}: the state already includes time {max(applied)}, so it cannot be read at "
                f"{at}; the latest consistent time is {latest}"
            )
        if frontier.less_than(at):
            raise StateQueryError(
                f"operator {name!r}: times before {at} are not complete yet (frontier {list(frontier)})"
            )
    from tstate.types import StateCodec

    codec = StateCodec(state_type)
    for r in rts:  # bins a lazy restore left encoded are decoded first
        r.restore_all()
    rows = [(k, v) for r in rts for b in sorted(r.bins.values(), key=lambda b: b.index) for k, v in b.items()]
    if format == "dict":
        copy = codec.copy
        return {k: copy(v) for k, v in rows}
    from tstate.types import to_arrow

    table = to_arrow(rows, state_type)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"tstate.time": str(at).encode()})
    if format is None:
        from tstate.state.table import StateTable

        return StateTable(name, at, table)
    if format == "arrow":
        return table
    if format == "pandas":
        return table.to_pandas()
    raise StateQueryError(f"unknown format {format!r}: use 'arrow', 'pandas' or 'dict'")


def point_read(exe: Queryable, op: _Operator, key: Any) -> Any:
    """A copy of one key's current state (``None`` if it has none): found through the
    key's bin and the worker holding it."""
    rts = _runtimes(exe, op)
    bi = rts[0].keys.bin(key)
    for r in rts:
        b = r.bin(bi)  # (decoded first if it was restored lazily)
        s = NO_STATE if b is None else b.get(key)
        if s is not NO_STATE:
            return r.codec.copy(s)
    return None
