"""Re-partitioning bins: split one bin in two, merge two into one.

With ``2^k`` bins a key lives in bin ``h >> (64 - k)`` (``h`` its 64-bit hash).  With
``2^(k+1)`` bins that key lives in ``2b`` or ``2b + 1``, decided by the next hash bit,
so a split moves every key (with its state, timers and dirty mark) to exactly one of
the two halves, and merging the halves gives back the original bin.

>>> from tstate.state.bin import Bin
>>> from tstate.keys import key_hash
>>> b = Bin(0)
>>> for k in range(10): b.states[k] = k * k
>>> lo, hi = split_bin(b, bins=1)
>>> sorted([*lo.states, *hi.states]) == list(range(10))
True
>>> merge_bins(lo, hi).states == b.states
True
"""

from __future__ import annotations

from typing import Any, Callable

from tstate.errors import ConfigurationError
from tstate.keys import check_bins, key_hash
from tstate.state.bin import Bin

__all__ = ["split_bin", "merge_bins", "split_all", "merge_all"]


def _half(key: Any, bins: int, hasher: Callable[[Any], int] = key_hash) -> int:
    """Which half (0 or 1) of its bin a key falls in when ``bins`` doubles."""
    k = check_bins(bins)
    return (hasher(key) >> (63 - k)) & 1


def split_bin(b: Bin, bins: int, hasher: Callable[[Any], int] = key_hash) -> tuple[Bin, Bin]:
    """Split bin ``b`` of a ``bins``-bin operator into bins ``2b`` and ``2b + 1`` of a
    ``2 * bins``-bin operator.  ``hasher``: the hash the operator's keys are binned
    with (:func:`tstate.keys.hasher_of` of its key: a ``ts.col`` key splits by
    :func:`~tstate.column_key.column_hash`)."""
    if 2 * bins > 1 << 16:
        raise ConfigurationError(f"cannot split {bins} bins: at most 65536 bins")
    halves = (Bin(2 * b.index), Bin(2 * b.index + 1))
    whole = dict(b.items())
    side = {k: _half(k, bins, hasher) for k in {*whole, *b.dirty, *b.removed, *(k for ks in b.timers.values() for k in ks)}}
    for k, v in whole.items():
        halves[side[k]].states[k] = v
    for k, v in b.dirty.items():
        halves[side[k]].dirty[k] = v
    for k in b.removed:
        halves[side[k]].removed[k] = None
    for t, keys in b.timers.items():
        for k in keys:
            halves[side[k]].add_timer(t, k)
    return halves


def merge_bins(lo: Bin, hi: Bin) -> Bin:
    """Merge bins ``2b`` and ``2b + 1`` back into bin ``b``."""
    if lo.index % 2 or hi.index != lo.index + 1:
        raise ConfigurationError(f"bins {lo.index} and {hi.index} are not the two halves of one bin")
    m = Bin(lo.index // 2)
    for part in (lo, hi):
        m.states.update(part.items())
        m.dirty.update(part.dirty)
        m.removed.update(part.removed)
        for t, keys in part.timers.items():
            for k in keys:
                m.add_timer(t, k)
    return m


def split_all(bins: dict[int, Bin], count: int, hasher: Callable[[Any], int] = key_hash) -> dict[int, Bin]:
    """Split every bin of a ``count``-bin operator (keys binned with ``hasher``, see
    :func:`split_bin`): returns the ``2 * count`` bins (only those that exist)."""
    out: dict[int, Bin] = {}
    for b in bins.values():
        lo, hi = split_bin(b, count, hasher)
        out[lo.index] = lo
        out[hi.index] = hi
    return out


def merge_all(bins: dict[int, Bin], count: int) -> dict[int, Bin]:
    """Merge the bins of a ``count``-bin operator pairwise into ``count // 2`` bins."""
    if count < 2:
        raise ConfigurationError("cannot merge a single bin")
    out: dict[int, Bin] = {}
    for i in range(0, count, 2):
        lo, hi = bins.get(i), bins.get(i + 1)
        if lo is None and hi is None:
            continue
        out[i // 2] = merge_bins(lo or Bin(i), hi or Bin(i + 1))
    return out
