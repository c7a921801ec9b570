"""Bin deltas, and decoding a bin's chain (a snapshot, then deltas) back into state.

A checkpoint stores each bin as a **chain** of files.  The first is usually a
**snapshot**: :func:`tstate.state.payload.encode_bin` bytes, an envelope (schema
fingerprint + payload, :func:`tstate.types.codec.encode_envelope`) whose payload is
``{"bin", "keys": [key, ...], "states": [state, ...], "timers": [[time, [key, ...]],
...]}``.  The next ones are **deltas**: envelopes whose payload is::

    {"bin": int,
     "keys": [key, ...],                   # keys whose state is new or changed
     "upserts": [state, ...],              # their states (upserts[i] of keys[i])
     "deletes": [key, ...],                # keys whose state was cleared
     "timers":  [[time, [key, ...]], ...], # the bin's FULL timer set (replaces it)
     "akeys": [key, ...],                  # optional: keys of list states appended to
     "appends": [items, ...]}              # ... the items appended (a list, as a state)

(Format 1 had no ``"keys"``: ``"states"`` / ``"upserts"`` held ``[key, state]`` pairs.)

Keys are encoded with :func:`tstate.keys.encode_key`, times with
:func:`tstate.state.payload.encode_time`, states as the codec encodes them (format 2:
msgspec, :mod:`tstate.types.wire`; format 1: their builtins form, still read).
Applying a delta removes ``deletes`` first, then sets ``upserts`` (so a key cleared and
set again in the same interval ends up set), then extends the ``list`` state of each of
``akeys`` by its ``appends`` (:mod:`tstate.state.appends`: a key whose list only grew
is written as what was appended; a key the chain holds no state for is a
:class:`~tstate.errors.CheckpointError`), then replaces the timers.  A chain may
also start with a delta, which then applies to an empty bin.

:func:`apply_chain` turns a chain's bytes into builtins (what the inspection CLI
prints, no Python state type needed); :func:`restore_bin` into a
:class:`~tstate.state.bin.Bin` of typed values (what the engine restores), each file
decoded typed in one call (:func:`tstate.state.payload.decode_payload`).

>>> from tstate.types.codec import StateCodec
>>> codec = StateCodec(int)
>>> from tstate.state.bin import Bin
>>> from tstate.state.payload import encode_bin
>>> b = Bin(3); b.states = {"a": 1, ("b", 2): 2}; b.timers = {10: {"a": None}}
>>> snap = encode_bin(b, codec)
>>> d1 = encode_delta(3, [("a", 5), ("c", 7)], [("b", 2)], {12: ["c"]}, codec.fingerprint)
>>> out = apply_chain([snap, d1], codec.fingerprint)
>>> out["states"], out["timers"]
({'a': 5, 'c': 7}, {12: ['c']})
>>> restore_bin([snap, d1], codec).states
{'a': 5, 'c': 7}
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import msgpack
import msgspec

from tstate.errors import CheckpointError, StateTypeError
from tstate.keys import decode_key, encode_key, encode_keys
from tstate.state.bin import Bin
from tstate.state.storage import NO_STATE
from tstate.state.payload import decode_payload, encode_keys_raw, decode_time, encode_checked, encode_time, state_pairs, wire_timers
from tstate.types.codec import decode_envelope, encode_envelope, open_envelope

__all__ = ["encode_delta", "encode_delta_parts", "encode_change", "decode_delta", "apply_chain", "restore_bin", "catch_up", "envelope_fingerprint", "Timers"]

#: Timers as accepted by :func:`encode_delta`: ``{time: keys}`` (like ``Bin.timers``) or
#: ``[(time, keys), ...]``.
Timers = Mapping[Any, Iterable[Any]] | Iterable[tuple[Any, Iterable[Any]]]


def _timer_items(timers: Timers) -> Iterable[tuple[Any, Iterable[Any]]]:
    if isinstance(timers, Mapping):
        return timers.items()
    return timers


def _key(k: Any) -> Any:
    """``encode_key(k)``, or ``k`` itself if it is encoded already (a list or an
    extension type: neither can be a key, lists are unhashable)."""
    t = type(k)
    if t is list or t is msgspec.msgpack.Ext:
        return k
    if t is msgpack.ExtType:
        return msgspec.msgpack.Ext(k.code, k.data)
    return encode_key(k)


def encode_delta(
    bin_index: int,
    upserts: Iterable[tuple[Any, Any]],
    deletes: Iterable[Any],
    timers: Timers,
    fingerprint: str,
) -> bytes:
    """The bytes of one bin delta (see the module docstring).

    ``upserts``: ``(key, state)`` pairs, each state checked and ready for the encoder
    (:meth:`StateCodec.to_wire`, ``msgspec.Raw`` of :meth:`StateCodec.encode` bytes, or
    the builtins form of ``to_builtins``, which is read too); ``deletes``: keys;
    ``timers``: the bin's full timer set, ``{time: keys}`` or ``[(time, keys), ...]``;
    ``fingerprint``: the schema fingerprint of the states (``StateCodec.fingerprint``).
    Keys may be given as they are or already encoded by :func:`tstate.keys.encode_key`
    (a list or an extension type is taken as encoded), times as they are or encoded by
    :func:`~tstate.state.payload.encode_time`.

    >>> from tstate.types.codec import StateCodec
    >>> fp = StateCodec(str).fingerprint
    >>> decode_delta(encode_delta(0, [(("k", 1), "x")], ["gone"], [], fp), fp)
    {'bin': 0, 'upserts': [[['k', 1], 'x']], 'deletes': ['gone'], 'timers': []}
    """
    pairs = upserts if isinstance(upserts, list) else list(upserts)
    return encode_delta_parts(bin_index, [_key(k) for k, _ in pairs], [v for _, v in pairs],
                              [_key(k) for k in deletes], _timers(timers), fingerprint)


def encode_delta_parts(
    bin_index: int, keys: list[Any] | msgspec.Raw, states: list[Any] | msgspec.Raw, deletes: list[Any],
    timers: list[Any], fingerprint: str,
    append_keys: list[Any] | msgspec.Raw | None = None, appends: list[Any] | msgspec.Raw | None = None,
) -> bytes:
    """:func:`encode_delta` from its parts, already encoded: ``keys`` and ``deletes``
    by :func:`tstate.keys.encode_keys` (``keys`` also as the ``msgspec.Raw`` of
    :func:`tstate.state.payload.encode_keys_raw`), ``states`` ready for the encoder
    (``states[i]`` is the state of ``keys[i]``; or the ``msgspec.Raw`` of
    :func:`tstate.state.payload.encode_states`), ``timers`` by
    :func:`tstate.state.payload.wire_timers`; ``append_keys`` and ``appends`` (items
    appended to list states, encoded as ``keys`` and ``states`` are) when there are
    any (see the module docstring)."""
    payload: dict[str, Any] = {"bin": bin_index, "keys": keys, "upserts": states, "deletes": deletes, "timers": timers}
    if appends is not None:
        payload["akeys"] = append_keys
        payload["appends"] = appends
    return encode_envelope(fingerprint, payload)


def _timers(timers: Timers) -> list[Any]:
    return [[encode_time(t), [_key(k) for k in keys]] for t, keys in _timer_items(timers)]


def encode_change(b: Bin, codec: Any, *, snapshot: bool, operator: str | None = None) -> bytes:
    """What a checkpoint writes for bin ``b`` now: its whole content (``snapshot=True``,
    :func:`~tstate.state.payload.encode_bin` bytes) or a delta of the keys changed
    (``b.dirty``) and cleared (``b.removed``) since the last one, with its full timer
    set.  Does not reset the bin's change sets (the caller does, once written).

    >>> from tstate.types.codec import StateCodec
    >>> codec = StateCodec(int)
    >>> b = Bin(1); b.states = {"a": 1, "b": 2}; b.dirty = {"b": None}
    >>> decode_delta(encode_change(b, codec, snapshot=False), codec.fingerprint)["upserts"]
    [['b', 2]]
    """
    if snapshot:
        from tstate.state.payload import encode_bin

        return encode_bin(b, codec, operator)
    get = b.get  # (a bin of a store: the resident part, else loaded)
    present = {k: s for k in {**b.dirty, **b.removed} if (s := get(k)) is not NO_STATE}
    keys = [k for k in b.dirty if k in present]
    values = [present[k] for k in keys]
    wkeys = encode_keys_raw(keys)
    deletes = encode_keys([k for k in b.removed if k not in present])
    timers = wire_timers(b.timers)
    return encode_checked(
        lambda wvalues: encode_delta_parts(b.index, wkeys, wvalues, deletes, timers, codec.fingerprint),
        keys, values, codec, operator,
    )


def decode_delta(data: bytes, fingerprint: str) -> dict[str, Any]:
    """The payload of :func:`encode_delta` bytes, untyped (keys and times still
    encoded), as ``{"bin", "upserts": [[key, state], ...], "deletes", "timers"}`` (the
    upserts paired with their keys, as format 1 stored them); a different
    ``fingerprint`` raises :class:`~tstate.errors.SchemaMismatchError`."""
    payload = decode_envelope(data, fingerprint)
    if not isinstance(payload, dict) or "upserts" not in payload:
        raise StateTypeError("not a bin delta")
    try:
        pairs = state_pairs(payload)
    except TypeError as exc:
        raise StateTypeError(f"not a bin delta ({exc})") from None
    out = {"bin": payload.get("bin"), "upserts": pairs, "deletes": payload.get("deletes"), "timers": payload.get("timers")}
    if "appends" in payload:
        out["appends"] = _append_pairs(payload)
    return out


def _append_pairs(payload: dict[str, Any]) -> list[list[Any]]:
    """The ``[key, items]`` pairs of an untyped delta's appends (keys still encoded)."""
    keys, items = payload.get("akeys"), payload["appends"]
    if type(keys) is not list or type(items) is not list or len(keys) != len(items):
        raise StateTypeError("not a bin delta (appends and their keys do not pair up)")
    return [[k, v] for k, v in zip(keys, items)]


def envelope_fingerprint(data: bytes) -> str:
    """The schema fingerprint an envelope (snapshot or delta) was written with.

    >>> envelope_fingerprint(encode_delta(0, [], [], [], "abc"))
    'abc'
    """
    return open_envelope(data, None)[1]


def apply_chain(chain_bytes: Sequence[bytes], fingerprint: str | None) -> dict[str, Any]:
    """Decode a bin's chain (oldest file first) into
    ``{"bin": int | None, "states": {key: state_builtins}, "timers": {time: [key, ...]}}``
    with keys and times decoded (tuple keys are tuples again).

    Each file is a snapshot (replaces everything) or a delta (applied as the module
    docstring says); which one is read from the payload, so the order of the list is
    all that matters.  Every file must carry ``fingerprint`` (else
    :class:`~tstate.errors.SchemaMismatchError`); with ``fingerprint=None`` the first
    file's is used and the others must agree (for inspection without the state type).
    An empty chain is an empty bin.  A file that is not a bin payload, or that belongs
    to another bin than the first, raises :class:`~tstate.errors.CheckpointError`.

    >>> apply_chain([], "x")
    {'bin': None, 'states': {}, 'timers': {}}
    """
    bin_index: int | None = None
    states: dict[Any, Any] = {}
    timers: dict[Any, list[Any]] = {}
    for i, data in enumerate(chain_bytes):
        if fingerprint is None:
            fingerprint = envelope_fingerprint(data)
        payload = decode_envelope(data, fingerprint)
        if not isinstance(payload, dict) or not isinstance(payload.get("bin"), int):
            raise CheckpointError(f"chain file {i}: not a bin payload")
        if bin_index is None:
            bin_index = payload["bin"]
        elif payload["bin"] != bin_index:
            raise CheckpointError(f"chain file {i}: belongs to bin {payload['bin']}, not bin {bin_index}")
        try:
            pairs = state_pairs(payload)
            if pairs is None:
                raise CheckpointError(f"chain file {i}: neither a snapshot nor a delta")
            if "states" in payload:
                states = {decode_key(k): v for k, v in pairs}
            else:
                for k in payload["deletes"]:
                    states.pop(decode_key(k), None)
                for k, v in pairs:
                    states[decode_key(k)] = v
                if "appends" in payload:
                    for k, v in _append_pairs(payload):
                        key = decode_key(k)
                        base = states.get(key)
                        if type(base) is not list or type(v) is not list:
                            raise CheckpointError(f"chain file {i}: items appended to key {key!r}, which holds no list")
                        states[key] = base + v
            timers = {decode_time(t): [decode_key(k) for k in keys] for t, keys in payload["timers"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"chain file {i}: malformed bin payload ({exc!r})") from None
    return {"bin": bin_index, "states": states, "timers": timers}


def restore_bin(
    chain_bytes: Sequence[bytes], codec: Any, fingerprint: str | None = None, index: int | None = None
) -> Bin:
    """The :class:`~tstate.state.bin.Bin` a chain decodes to, states decoded typed by
    ``codec`` (a :class:`~tstate.types.StateCodec`; see
    :func:`tstate.state.payload.decode_payload`).

    ``fingerprint`` is the schema fingerprint the files were written with (the stored
    schema's, ``OperatorEntry.fingerprint``), by default ``codec.fingerprint``.  After
    a compatible schema change (checked by
    :func:`tstate.checkpoint.schema_check.check_compatible`) pass the stored one: the
    files are then read with the current codec.  ``index`` is the bin's index for an
    empty chain (else taken from the files).  The bin comes back clean (nothing dirty).
    """
    b = Bin(index if index is not None else 0)
    if chain_bytes:
        first = _decode(chain_bytes[0], codec, fingerprint, 0)
        b.index = first.bin
        _apply(b, first)
        _catch_up(b, chain_bytes[1:], codec, fingerprint, 1)
    return b


def catch_up(b: Bin, deltas: Sequence[bytes], codec: Any, fingerprint: str | None = None) -> Bin:
    """Bring a decoded bin forward by the chain files written after it (deltas, or a
    snapshot that replaces everything): what a cache holding an older version of a bin
    does instead of re-reading the whole chain.  Changes ``b`` in place and returns it.

    >>> from tstate.types.codec import StateCodec
    >>> codec = StateCodec(int)
    >>> b = Bin(3); b.states = {"a": 1, "b": 2}
    >>> d = encode_delta(3, [("a", 5)], ["b"], {12: ["a"]}, codec.fingerprint)
    >>> catch_up(b, [d], codec).states, b.timers
    ({'a': 5}, {12: {'a': None}})
    """
    return _catch_up(b, deltas, codec, fingerprint, 0)


def _decode(data: bytes, codec: Any, fingerprint: str | None, i: int) -> Any:
    try:
        return decode_payload(data, codec, fingerprint)
    except CheckpointError as exc:
        raise CheckpointError(f"chain file {i}: {exc}") from None


def _apply(b: Bin, p: Any) -> None:
    if p.states is not None:
        b.states = p.states
    else:
        states = b.states
        for k in p.deletes:
            states.pop(k, None)
        states.update(p.upserts)
        if p.appends:
            for k, items in p.appends:
                base = states.get(k)
                if type(base) is not list:
                    raise CheckpointError(f"bin {b.index}: items appended to key {k!r}, which holds no list")
                states[k] = base + items  # a new list: the old one may be shared (a cached bin)
    b.timers = p.timers


def _catch_up(b: Bin, files: Sequence[bytes], codec: Any, fingerprint: str | None, first: int) -> Bin:
    for i, data in enumerate(files, first):
        p = _decode(data, codec, fingerprint, i)
        if p.bin != b.index:
            raise CheckpointError(f"chain file {i}: belongs to bin {p.bin}, not bin {b.index}")
        _apply(b, p)
    return b
