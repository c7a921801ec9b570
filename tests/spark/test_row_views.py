"""Row views (tstate.spark.row_views) key rows as their dicts would, and a key function
that needs a real dict gets one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Callable

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstate.spark.row_views import Rows, views_or_dicts

#: key functions reading their record through the Mapping interface
MAPPING_KEYS: list[Callable[[Any], Any]] = [
    lambda r: r["a"],
    lambda r: (r["a"], r["b"]),
    lambda r: r.get("b", -1),
    lambda r: r.get("missing", "dflt"),
    lambda r: tuple(r.items()),
    lambda r: tuple(r.values()),
    lambda r: tuple(r),
    lambda r: (len(r), "a" in r, "zz" in r),
    lambda r: str(r),
    lambda r: repr(r),
    lambda r: frozenset(dict(r).items()),
    lambda r: r == {"a": 1, "b": "x"},
    lambda r: tuple(sorted({**r}, reverse=True)),
    lambda r: isinstance(r, Mapping),
]

rows_st = st.lists(st.tuples(st.integers(-3, 3) | st.none(), st.text(max_size=2)), max_size=30)


def _batch(rows: list[tuple[Any, str]]) -> pa.RecordBatch:
    return pa.record_batch({"a": pa.array([r[0] for r in rows], pa.int64()), "b": pa.array([r[1] for r in rows], pa.string())})


@given(rows_st, st.data())
def test_views_key_rows_as_their_dicts_do(rows: list[tuple[Any, str]], data: Any) -> None:
    """Reference: the key function over ``to_pylist``'s dicts of the chosen rows."""
    batch = _batch(rows)
    chosen = sorted(data.draw(st.sets(st.integers(0, max(len(rows) - 1, 0)), max_size=len(rows)))) if rows else []
    dicts = batch.to_pylist()
    for key in MAPPING_KEYS:
        want = [key(dicts[i]) for i in chosen]
        assert [key(v) for v in Rows(batch, chosen)] == want
        def keys(part: Any, key: Callable[[Any], Any] = key) -> list[Any]:
            return list(map(key, part))

        got, viewed = views_or_dicts(batch, chosen, keys, True)
        assert got == want and viewed


def test_a_view_is_read_only_and_unhashable() -> None:
    (view,) = Rows(_batch([(1, "x")]), [0])
    with pytest.raises(TypeError):
        view["a"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(view)
    with pytest.raises(KeyError):
        view["nope"]


@pytest.mark.parametrize("key", [
    lambda r: r.copy()["a"],
    lambda r: json.dumps(r),
    lambda r: (r | {"c": 1})["a"],
    lambda r: r.setdefault("c", r["a"]),
])  # fmt: skip
def test_a_key_function_needing_a_dict_gets_dicts(key: Callable[[Any], Any]) -> None:
    batch = _batch([(1, "x"), (2, "y"), (None, "z")])
    dicts = batch.to_pylist()
    got, viewed = views_or_dicts(batch, [0, 2], lambda part: list(map(key, part)), True)
    assert got == [key(dicts[0]), key(dicts[2])] and not viewed
    got, viewed = views_or_dicts(batch, [1], lambda part: list(map(key, part)), False)  # (later batches: dicts at once)
    assert got == [key(dicts[1])] and not viewed


def test_an_error_with_dicts_propagates() -> None:
    with pytest.raises(ZeroDivisionError):
        views_or_dicts(_batch([(0, "x")]), [0], lambda part: [1 // r["a"] for r in part], True)


@pytest.mark.parametrize(
    "key",
    [lambda r: r["a"] if isinstance(r, dict) else "not a dict", lambda r: type(r).__name__],
)
def test_a_key_function_answering_a_view_otherwise_than_its_dict_gets_dicts(key: Callable[[Any], Any]) -> None:
    batch = _batch([(1, "x"), (2, "y"), (3, "z")])
    got, viewed = views_or_dicts(batch, [0, 2], lambda part: list(map(key, part)), True)
    assert not viewed and got == [key(r) for r in [{"a": 1, "b": "x"}, {"a": 3, "b": "z"}]]
