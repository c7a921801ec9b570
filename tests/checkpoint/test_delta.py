"""Bin deltas and chain decoding (shared by the CLI and the engine's restore)."""

from __future__ import annotations

import datetime as dt

import pytest
from attrs import define, field

from tstate.checkpoint.delta import apply_chain, decode_delta, encode_delta, envelope_fingerprint, restore_bin
from tstate.errors import CheckpointError, SchemaMismatchError, StateTypeError
from tstate.keys import encode_key
from tstate.progress.timestamp import Product
from tstate.state.bin import Bin
from tstate.state.payload import encode_bin, encode_time
from tstate.types.codec import StateCodec
from tstate.types.schema import Schema, analyse

from .helpers import CODEC, FP, delta, snap

KEYS = ["s", 7, -3, 2**70, 1.5, b"raw", None, True, ("ATL", 2001), ("x", ("nested", 1)), dt.date(2024, 1, 2),
        dt.datetime(2024, 1, 2, 3, 4, 5), frozenset({1, 2})]


def test_keys_round_trip_through_snapshot_and_delta() -> None:
    base = snap(0, {k: [i] for i, k in enumerate(KEYS[:6])}, {3: [KEYS[0]]})
    d = delta(0, {k: [100 + i] for i, k in enumerate(KEYS[6:])}, deletes=KEYS[:2], timers={Product(1, 2): KEYS[8:10]})
    out = apply_chain([base, d], FP)
    expected = {k: [i] for i, k in enumerate(KEYS[:6])}
    del expected[KEYS[0]], expected[KEYS[1]]
    expected.update({k: [100 + i] for i, k in enumerate(KEYS[6:])})
    assert out["states"] == expected and out["bin"] == 0
    assert out["timers"] == {Product(1, 2): [KEYS[8], KEYS[9]]}


def test_deletes_apply_before_upserts_and_timers_replace() -> None:
    chain = [snap(2, {"a": [1], "b": [2]}, {1: ["a"], 2: ["b"]}), delta(2, {"a": [5]}, deletes=["a", "b"], timers=[(9, ["a"])])]
    assert apply_chain(chain, FP) == {"bin": 2, "states": {"a": [5]}, "timers": {9: ["a"]}}


def test_delta_first_chain_and_empty_chain() -> None:
    assert apply_chain([delta(1, {"a": [1]})], FP)["states"] == {"a": [1]}
    assert apply_chain([], FP) == {"bin": None, "states": {}, "timers": {}}


def test_snapshot_in_the_middle_resets() -> None:
    chain = [snap(0, {"a": [1]}), delta(0, {"b": [2]}), snap(0, {"c": [3]}), delta(0, {"d": [4]})]
    assert apply_chain(chain, FP)["states"] == {"c": [3], "d": [4]}


def test_already_encoded_keys_and_times_are_accepted() -> None:
    keys = [("ATL", 1), dt.datetime(2020, 1, 1), "plain"]
    raw = encode_delta(0, [(k, [1]) for k in keys], [("gone", 2)], {Product(1, 0): keys}, FP)
    pre = encode_delta(
        0, [(encode_key(k), [1]) for k in keys], [encode_key(("gone", 2))],
        [[encode_time(Product(1, 0)), [encode_key(k) for k in keys]]], FP,
    )
    assert raw == pre
    assert decode_delta(raw, FP)["deletes"] == [["gone", 2]]


def test_fingerprint_checks() -> None:
    other = StateCodec(str).fingerprint
    with pytest.raises(SchemaMismatchError):
        apply_chain([snap(0, {"a": [1]})], other)
    with pytest.raises(SchemaMismatchError):  # mixed fingerprints with None: the first one wins
        apply_chain([snap(0, {"a": [1]}), encode_delta(0, [], [], [], other)], None)
    assert apply_chain([snap(0, {"a": [1]})], None)["states"] == {"a": [1]}
    assert envelope_fingerprint(snap(0, {})) == FP
    with pytest.raises(StateTypeError):
        envelope_fingerprint(b"\xc1 not msgpack")
    with pytest.raises(StateTypeError):
        decode_delta(snap(0, {}), FP)


def test_malformed_chains() -> None:
    with pytest.raises(CheckpointError, match="chain file 1: belongs to bin 1, not bin 0"):
        apply_chain([snap(0, {}), delta(1, {})], FP)
    from tstate.types.codec import encode_envelope

    with pytest.raises(CheckpointError, match="chain file 0: not a bin payload"):
        apply_chain([encode_envelope(FP, [1, 2])], FP)
    with pytest.raises(CheckpointError, match="neither a snapshot nor a delta"):
        apply_chain([encode_envelope(FP, {"bin": 0})], FP)
    with pytest.raises(CheckpointError, match="malformed bin payload"):
        apply_chain([encode_envelope(FP, {"bin": 0, "upserts": 5, "deletes": [], "timers": []})], FP)


@define
class RouteV1:
    flights: int = 0
    delays: list[int] = field(factory=list)


@define
class RouteV2:
    flights: int = 0
    delays: list[int] = field(factory=list)
    late: int = 0


def test_restore_bin_typed_and_with_evolved_schema() -> None:
    c1 = StateCodec(RouteV1)
    b = Bin(5)
    b.states = {("ATL", "SFO"): RouteV1(2, [5, 7])}
    b.timers = {10: {("ATL", "SFO"): None}}
    chain = [encode_bin(b, c1),
             encode_delta(5, [("JFK", c1.to_builtins(RouteV1(1, [3])))], [], b.timers, c1.fingerprint)]
    restored = restore_bin(chain, c1)
    assert restored.index == 5 and restored.states == {("ATL", "SFO"): RouteV1(2, [5, 7]), "JFK": RouteV1(1, [3])}
    assert restored.timers == {10: {("ATL", "SFO"): None}} and not restored.dirty
    # read with a compatible newer type: pass the stored fingerprint
    stored_fp = Schema.from_builtins(analyse(RouteV1).to_builtins()).fingerprint
    assert stored_fp == c1.fingerprint
    v2 = restore_bin(chain, StateCodec(RouteV2), stored_fp)
    assert v2.states["JFK"] == RouteV2(1, [3], 0)
    with pytest.raises(SchemaMismatchError):
        restore_bin(chain, StateCodec(RouteV2))
    assert restore_bin([], CODEC, index=3).index == 3
