"""Hash kinds: which 64-bit hash placed an operator's keys in its bins.

A stateful operator's bins are computed with one of two hashes, chosen by its key
(:func:`tstate.keys.hasher_of`): Spark's ``xxhash64`` for a column key
(:func:`tstate.column_key.column_hash`, ``ts.col(...)``), :func:`tstate.keys.key_hash`
for any other key function.  A checkpoint records the kind per operator
(:class:`tstate.checkpoint.manifest.OperatorEntry`); a manifest without it was written
before hash kinds were recorded, when every key used :attr:`HashKind.KEY_HASH`.  Resuming
with a key of another kind would look keys up in the wrong bins, so
:func:`check_hash_kind` refuses it.

>>> hash_kind_of(lambda r: r)
<HashKind.KEY_HASH: 'key_hash'>
>>> HashKind("spark_xxhash64") is HashKind.SPARK_XXHASH64
True
"""

from __future__ import annotations

import enum
from typing import Any

from tstate.errors import ConfigurationError

__all__ = ["HashKind", "hash_kind_of", "check_hash_kind"]


class HashKind(enum.Enum):
    """The hash an operator's keys were binned with (its value is what a manifest stores)."""

    #: :func:`tstate.keys.key_hash`: xxHash64 of the key's canonical msgpack encoding
    KEY_HASH = "key_hash"
    #: Spark's ``xxhash64`` of the key columns (:func:`tstate.column_key.column_hash`)
    SPARK_XXHASH64 = "spark_xxhash64"


def hash_kind_of(key: Any) -> HashKind:
    """The hash kind of key function ``key`` (mirrors :func:`tstate.keys.hasher_of`)."""
    from tstate.column_key import Col

    return HashKind.SPARK_XXHASH64 if isinstance(key, Col) else HashKind.KEY_HASH


def _describe(kind: HashKind) -> str:
    return "a ts.col(...) column key" if kind is HashKind.SPARK_XXHASH64 else "a key function"


def check_hash_kind(operator: str, checkpoint_id: int, stored: HashKind, declared: HashKind) -> None:
    """A :class:`~tstate.errors.ConfigurationError` if operator ``operator``'s bins in
    checkpoint ``checkpoint_id`` were made with another hash than its key uses now."""
    if stored is not declared:
        raise ConfigurationError(
            f"operator {operator!r}: checkpoint {checkpoint_id} placed its keys in bins with hash "
            f"{stored.value!r} ({_describe(stored)}), the dataflow declares hash {declared.value!r} "
            f"({_describe(declared)}): its state would be looked up in the wrong bins. Declare the key "
            f"as it was when the checkpoint was written ({_describe(stored)}), or start without the "
            "checkpoint (a fresh checkpoint directory, or resume=False)"
        )
