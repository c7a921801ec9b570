"""Column keys (``ts.col``): what they read, how they hash, and that a dataflow keyed by
columns computes what the same dataflow keyed by a function computes."""

from __future__ import annotations

import struct
from collections import Counter
from typing import Any

import pytest
import xxhash
from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st

import tstate as ts
from tstate.column_key import SPARK_SEED, column_hash
from tstate.errors import ConfigurationError, KeyFunctionError
from tstate.keys import KeyRouter, hasher_of, key_hash


@frozen
class Flight:
    origin: str
    delay: int


def spark_xxhash64(values: tuple) -> int:
    """Reference: Spark's ``xxhash64(c1, ...)`` over strings and bigints, written out."""
    h = SPARK_SEED
    for v in values:
        if v is None:
            continue
        data = v.encode() if isinstance(v, str) else struct.pack("<q", int(v))
        h = xxhash.xxh64_intdigest(data, seed=h)
    return h


values_st = st.one_of(st.none(), st.text(max_size=12), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans())


@given(st.lists(values_st, min_size=1, max_size=4))
def test_hash_is_sparks_xxhash64(values: list) -> None:
    key = tuple(values)
    assert column_hash(key) == spark_xxhash64(key)
    if len(values) == 1:
        assert column_hash(values[0]) == column_hash(key)


def test_reads_dict_items_and_attributes() -> None:
    assert ts.col("origin")({"origin": "ATL"}) == "ATL"
    assert ts.col("origin")(Flight("SFO", 3)) == "SFO"
    assert ts.col("origin", "delay")(Flight("SFO", 3)) == ("SFO", 3)
    assert ts.col("a") == ts.col("a") and repr(ts.col("a", "b")) == "ts.col('a', 'b')"
    with pytest.raises(ConfigurationError, match="field names"):
        ts.col()


def test_values_outside_the_column_types_are_refused() -> None:
    for bad in (1.5, 1 << 64, (1, 2.0)):
        with pytest.raises(KeyFunctionError, match="column key"):
            column_hash(bad)


def test_routers_use_the_keys_hash() -> None:
    assert hasher_of(ts.col("k")) is column_hash and hasher_of(lambda r: r) is key_hash
    router = KeyRouter(256, hasher=column_hash)
    assert router.bin("ATL") == column_hash("ATL") >> 56
    import pickle

    assert pickle.loads(pickle.dumps(router)).hasher is column_hash


def _count(key: Any, rows: list[tuple[int, dict]], workers: int) -> tuple[list, dict]:
    flow = ts.Dataflow("count")
    ev = flow.input("ev")

    @flow.stateful(ev, key=key, state=int, bins=8)
    def count(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], r["j"], n + 1))
        return n + 1

    out = count.collect()
    for t in sorted({t for t, _ in rows}):
        ev.send([r for tt, r in rows if tt == t], time=t)
    ev.close()
    flow.run(workers=workers)
    return sorted(out.items, key=repr), flow.state(count, format="dict")


@given(
    st.lists(st.tuples(st.integers(0, 3), st.fixed_dictionaries({"k": st.sampled_from("abcde"), "j": st.integers(0, 2)}))),
    st.integers(1, 3),
)
def test_same_results_as_a_key_function(rows: list, workers: int) -> None:
    by_col = _count(ts.col("k", "j"), rows, workers)
    by_fn = _count(lambda r: (r["k"], r["j"]), rows, workers)
    assert by_col == by_fn
    assert by_col[1] == dict(Counter((r["k"], r["j"]) for _, r in rows))
