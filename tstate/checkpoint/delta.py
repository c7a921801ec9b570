"""Bin deltas, and decoding a bin's chain (a snapshot, then deltas) back into state.

A checkpoint stores each bin as a **chain** of files.  The first is usually a
**snapshot**: :func:`tstate.state.payload.encode_bin` bytes, an envelope (schema
fingerprint + payload, :func:`tstate.types.codec.encode_envelope`) whose payload is
``{"bin", "states": [[key, state], ...], "timers": [[time, [key, ...]], ...]}``.  The
next ones are **deltas**: envelopes whose payload is::

    {"bin": int,
     "upserts": [[key, state_builtins], ...],   # keys whose state is new or changed
     "deletes": [key, ...],                      # keys whose state was cleared
     "timers":  [[time, [key, ...]], ...]}       # the bin's FULL timer set (replaces it)

Keys are encoded with :func:`tstate.keys.encode_key`, times with
:func:`tstate.state.payload.encode_time`, states are ``StateCodec.to_builtins`` values.
Applying a delta removes ``deletes`` first, then sets ``upserts`` (so a key cleared and
set again in the same interval ends up set), then replaces the timers.  A chain may
also start with a delta, which then applies to an empty bin.

:func:`apply_chain` turns a chain's bytes into builtins (what the inspection CLI
prints, no Python state type needed); :func:`restore_bin` into a
:class:`~tstate.state.bin.Bin` of typed values (what the engine restores).

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

from tstate.errors import CheckpointError, StateTypeError
from tstate.keys import decode_key, encode_key
from tstate.state.bin import Bin
from tstate.state.payload import decode_time, encode_time
from tstate.types.codec import decode_envelope, encode_envelope

__all__ = ["encode_delta", "encode_change", "decode_delta", "apply_chain", "restore_bin", "catch_up", "envelope_fingerprint", "Timers"]

#: Timers as accepted by :func:`encode_delta`: ``{time: keys}`` (like ``Bin.timers``) or
#: ``[(time, keys), ...]``.
Timers = Mapping[Any, Iterable[Any]] | Iterable[tuple[Any, Iterable[Any]]]


def _timer_items(timers: Timers) -> Iterable[tuple[Any, Iterable[Any]]]:
    if isinstance(timers, Mapping):
        return timers.items()
    return timers


def _key(k: Any) -> Any:
    """``encode_key(k)``, or ``k`` itself if it is encoded already (a list or an
    ``ExtType``: neither can be a key, lists are unhashable)."""
    if type(k) is list or type(k) is msgpack.ExtType:
        return k
    return encode_key(k)


def encode_delta(
    bin_index: int,
    upserts: Iterable[tuple[Any, Any]],
    deletes: Iterable[Any],
    timers: Timers,
    fingerprint: str,
) -> bytes:
    """The bytes of one bin delta (see the module docstring).

    ``upserts``: ``(key, state_builtins)`` pairs (states already turned into builtins,
    e.g. by ``StateCodec.to_builtins`` on the processing path); ``deletes``: keys;
    ``timers``: the bin's full timer set, ``{time: keys}`` or ``[(time, keys), ...]``;
    ``fingerprint``: the schema fingerprint of the states (``StateCodec.fingerprint``).
    Keys may be given as they are or already encoded by :func:`tstate.keys.encode_key`
    (a list or ``msgpack.ExtType`` is taken as encoded), times as they are or encoded by
    :func:`~tstate.state.payload.encode_time`.

    >>> from tstate.types.codec import StateCodec
    >>> fp = StateCodec(str).fingerprint
    >>> decode_delta(encode_delta(0, [(("k", 1), "x")], ["gone"], [], fp), fp)
    {'bin': 0, 'upserts': [[['k', 1], 'x']], 'deletes': ['gone'], 'timers': []}
    """
    payload = {
        "bin": bin_index,
        "upserts": [[_key(k), v] for k, v in upserts],
        "deletes": [_key(k) for k in deletes],
        "timers": [[encode_time(t), [_key(k) for k in keys]] for t, keys in _timer_items(timers)],
    }
    return encode_envelope(fingerprint, payload)


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
    to_b = codec.to_builtins
    states = b.states
    upserts = []
    for k in b.dirty:
        if k in states:
            try:
                upserts.append((k, to_b(states[k])))
            except StateTypeError as exc:
                where = f"operator {operator!r}, " if operator else ""
                raise StateTypeError(f"{where}key {k!r}: {exc}") from None
    deletes = [k for k in b.removed if k not in states]
    return encode_delta(b.index, upserts, deletes, b.timers, codec.fingerprint)


def decode_delta(data: bytes, fingerprint: str) -> dict[str, Any]:
    """The payload of :func:`encode_delta` bytes (keys and times still encoded); a
    different ``fingerprint`` raises :class:`~tstate.errors.SchemaMismatchError`."""
    payload = decode_envelope(data, fingerprint)
    if not isinstance(payload, dict) or "upserts" not in payload:
        raise StateTypeError("not a bin delta")
    return payload


def envelope_fingerprint(data: bytes) -> str:
    """The schema fingerprint an envelope (snapshot or delta) was written with.

    >>> envelope_fingerprint(encode_delta(0, [], [], [], "abc"))
    'abc'
    """
    try:
        obj = msgpack.unpackb(data, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StateTypeError(f"cannot decode state: not valid msgpack ({exc})") from None
    if type(obj) is not list or len(obj) != 3 or type(obj[1]) is not str:
        raise StateTypeError("cannot decode state: not a tstate state envelope")
    return obj[1]


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
            if "states" in payload:
                states = {decode_key(k): v for k, v in payload["states"]}
            elif "upserts" in payload:
                for k in payload["deletes"]:
                    states.pop(decode_key(k), None)
                for k, v in payload["upserts"]:
                    states[decode_key(k)] = v
            else:
                raise CheckpointError(f"chain file {i}: neither a snapshot nor a delta")
            timers = {decode_time(t): [decode_key(k) for k in keys] for t, keys in payload["timers"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"chain file {i}: malformed bin payload ({exc!r})") from None
    return {"bin": bin_index, "states": states, "timers": timers}


def restore_bin(
    chain_bytes: Sequence[bytes], codec: Any, fingerprint: str | None = None, index: int | None = None
) -> Bin:
    """The :class:`~tstate.state.bin.Bin` a chain decodes to, states built with
    ``codec.from_builtins`` (a :class:`~tstate.types.StateCodec`).

    ``fingerprint`` is the schema fingerprint the files were written with (the stored
    schema's, ``OperatorEntry.fingerprint``), by default ``codec.fingerprint``.  After
    a compatible schema change (checked by
    :func:`tstate.checkpoint.schema_check.check_compatible`) pass the stored one: the
    builtins are then read with the current codec.  ``index`` is the bin's index for an
    empty chain (else taken from the files).  The bin comes back clean (nothing dirty).
    """
    out = apply_chain(chain_bytes, codec.fingerprint if fingerprint is None else fingerprint)
    b = Bin(out["bin"] if out["bin"] is not None else (index if index is not None else 0))
    from_b = codec.from_builtins
    b.states = {k: from_b(v) for k, v in out["states"].items()}
    b.timers = {t: {k: None for k in keys} for t, keys in out["timers"].items()}
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
    fp = codec.fingerprint if fingerprint is None else fingerprint
    from_b = codec.from_builtins
    for i, data in enumerate(deltas):
        payload = decode_envelope(data, fp)
        if not isinstance(payload, dict) or payload.get("bin") != b.index:
            raise CheckpointError(f"chain file {i}: not a payload of bin {b.index}")
        try:
            if "states" in payload:
                b.states = {decode_key(k): from_b(v) for k, v in payload["states"]}
            else:
                states = b.states
                for k in payload["deletes"]:
                    states.pop(decode_key(k), None)
                for k, v in payload["upserts"]:
                    states[decode_key(k)] = from_b(v)
            b.timers = {decode_time(t): {decode_key(k): None for k in keys} for t, keys in payload["timers"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"chain file {i}: malformed bin payload ({exc!r})") from None
    return b
