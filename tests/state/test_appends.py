"""AppendLog against plain lists: whatever happens to a list between two deltas, the
previous value written plus what a delta writes (the whole list, or the items appended)
is the list."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from tstate.state import appends
from tstate.state.appends import AppendLog, appendable
from tstate.types.codec import StateCodec
from tstate.types.tracked import Array

change = st.one_of(
    st.tuples(st.just("append"), st.integers(-(2**40), 2**40)),
    st.tuples(st.just("extend"), st.lists(st.integers(-300, 300), max_size=5)),
    st.tuples(st.just("pop"), st.integers(0, 10)),
    st.tuples(st.just("set"), st.integers(0, 10)),
    st.tuples(st.just("assign"), st.lists(st.integers(-3, 3), max_size=6)),
    st.tuples(st.just("drop"), st.just(0)),
)


@given(st.lists(st.lists(change, max_size=4), max_size=12), st.sampled_from([0, 16, 1024]))
def test_written_values_rebuild_the_list(epochs: list[list[tuple[str, Any]]], min_bytes: int) -> None:
    log = AppendLog()
    value: list[int] = []
    chain: dict[str, list[int]] = {}  # what the deltas written so far rebuild
    with mock.patch.object(appends, "MIN_BYTES", min_bytes):
        for changes in epochs:
            for kind, x in changes:
                if kind == "append":
                    value.append(x)
                elif kind == "extend":
                    value.extend(x)
                elif kind == "pop" and value:
                    value.pop(x % len(value))
                elif kind == "set" and value:
                    value[x % len(value)] = value[x % len(value)] + 1
                elif kind == "assign":
                    value = list(x)
                elif kind == "drop":  # the key is deleted, then set again
                    log.drop("k")
                    chain.pop("k", None)
                    value = []
            keys, values, akeys, suffixes = log.split(["k"], [value])
            if keys:
                chain["k"] = list(values[0])
            else:
                assert akeys == ["k"]
                chain["k"] = chain["k"] + suffixes[0]
            assert chain["k"] == value


def test_only_plain_lists_encoded_natively_are_appendable() -> None:
    assert appendable(StateCodec(list[int]))
    assert not appendable(StateCodec(int))
    assert not appendable(StateCodec(Array[int]))
    assert not appendable(StateCodec(dict[str, int]))


def test_short_lists_are_not_logged() -> None:
    log = AppendLog()
    log.split(["a", "b"], [[1, 2], list(range(2000))])
    assert list(log.bases) == ["b"]
