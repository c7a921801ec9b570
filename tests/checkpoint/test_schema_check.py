"""check_compatible: stored schema vs the state type declared now."""

from __future__ import annotations

import pytest
from attrs import field, make_class

from tstate.checkpoint.schema_check import check_compatible
from tstate.errors import CheckpointError, SchemaMismatchError
from tstate.types.schema import analyse


def route(**fields):
    """A struct named ``Route`` with the given attrs fields."""
    return make_class("Route", fields)


V1 = route(flights=field(type=int, default=0), delays=field(type=list[int], factory=list))


def stored(tp) -> dict:
    return analyse(tp).to_builtins()


def test_same_type_and_added_field_with_default_are_accepted() -> None:
    check_compatible("track", stored(V1), analyse(V1))
    check_compatible("track", stored(V1), V1)  # a type is analysed
    v2 = route(flights=field(type=int, default=0), delays=field(type=list[int], factory=list), late=field(type=int, default=0))
    check_compatible("track", stored(V1), v2)
    check_compatible("count", stored(int), int | None)


def test_field_added_without_default() -> None:
    v2 = route(flights=field(type=int), delays=field(type=list[int]), late=field(type=int))
    with pytest.raises(SchemaMismatchError) as e:
        check_compatible("track", stored(V1), v2)
    assert str(e.value) == (
        "operator 'track': the checkpoint's state cannot be read as Route: "
        "Route.late: field added without a default (state written before has no value for it)"
    )


def test_field_removed_and_type_changed() -> None:
    with pytest.raises(SchemaMismatchError) as e:
        check_compatible("track", stored(V1), route(flights=field(type=int, default=0)))
    assert str(e.value) == (
        "operator 'track': the checkpoint's state cannot be read as Route: "
        "Route.delays: field removed (state written with it cannot be read without it)"
    )
    v3 = route(flights=field(type=int), delays=field(type=list[str]))
    with pytest.raises(SchemaMismatchError, match=r"operator 'agg': .*Route\.delays\[\]: type changed from int to str"):
        check_compatible("agg", stored(V1), v3)
    with pytest.raises(SchemaMismatchError, match="operator 'n': .*state: type changed from int to str"):
        check_compatible("n", stored(int), str)


def test_unreadable_stored_schema() -> None:
    with pytest.raises(CheckpointError, match="operator 'x': the checkpoint's state schema is unreadable"):
        check_compatible("x", {"kind": "no such kind", "name": "?"}, int)
