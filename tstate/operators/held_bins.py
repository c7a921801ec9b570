"""The bins of a stateful operator that one worker holds, and finding a key's bin.

:class:`HeldBins` is the stateful runtime's table of bins (:mod:`tstate.operators.stateful`):
which bins this worker owns (``owned``), the ones it holds state for (``bins``), and the
lookups of the processing path's inner loop.  Finding a key's state is a memo shared by
the operator's workers (key -> bin index; a key's bin never changes, entries leave with
``ctx.clear()``) and a list indexed by bin (``at``: the bin this worker holds, None: not
here or no state yet): a bin that moves changes one slot of that list, whatever its keys.
Index -1 (a key not in the memo) is always None, so ``at[memo.get(k, -1)]`` is the whole
fast path; a miss goes through :meth:`HeldBins.of_key`, which hashes the key.

Bins a lazy restore left encoded (``lazy``: :class:`tstate.engine.checkpointing.lazy.LazyBins`,
reached through the :class:`Undecoded` protocol) are owned but not in ``bins``: every
path that reads or changes a bin goes through :meth:`HeldBins.get`, :meth:`HeldBins.held`
or :meth:`HeldBins.of_key`, which decode one first.  New bins come from ``new_bin``
(:data:`tstate.state.storage.NewBin`; the heap store's :class:`~tstate.state.bin.Bin`).

>>> held = HeldBins("count", bins=4, owned={0, 1, 2, 3}, memo={})
>>> b = held.of_key("k", record="k", time=0)
>>> held.at[held.memo["k"]] is b, b.index in held.bins, held.get(3)
(True, True, None)
>>> held.drop(b.index) is b, b.index in held.owned
(True, False)
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol

from tstate.errors import KeyFunctionError
from tstate.keys import KeyRouter
from tstate.state.bin import Bin

__all__ = ["HeldBins", "Undecoded"]


class Undecoded(Protocol):
    """The bins a lazy restore left encoded on one runtime: membership, decoding one
    (which installs it through :meth:`HeldBins.keep`), or letting one go undecoded."""

    def __contains__(self, index: object) -> bool: ...

    def materialise(self, index: int) -> Bin: ...

    def materialise_all(self) -> None: ...

    def forget(self, index: int) -> None:
        """Bin ``index`` leaves undecoded (a pre-copy hand-over)."""
        ...


class HeldBins:
    """One worker's bins of one stateful operator (see the module docstring)."""

    __slots__ = ("name", "memo", "router", "bins", "at", "owned", "lazy", "new_bin", "adopt")

    def __init__(
        self,
        name: str,
        bins: int,
        owned: set[int],
        memo: dict[Any, int],
        new_bin: Callable[[int], Bin] = Bin,
        hasher: Optional[Callable[[Any], int]] = None,
    ) -> None:
        self.name = name
        self.memo = memo
        self.router = KeyRouter(bins, limit=1 << 62, memo=memo, hasher=hasher)
        self.bins: dict[int, Bin] = {}
        #: bin index -> the bin held here (None: not here, or no state yet); slot -1 stays None
        self.at: list[Optional[Bin]] = [None] * (bins + 1)
        self.owned = owned
        #: bins a lazy restore left encoded (None once every bin is decoded)
        self.lazy: Optional[Undecoded] = None
        self.new_bin = new_bin
        #: a bin delivered from elsewhere (restore, migration) as this table keeps it
        #: (None: as it is; a store-backed table turns heap bins into its own)
        self.adopt: Optional[Callable[[Bin], Bin]] = None

    def use_router(self, router: KeyRouter) -> None:
        """Find keys' bins with ``router`` and its memo (one shared beyond this
        operator, e.g. an executor's across micro-batches; it must have the same bins)."""
        assert router.bins == self.router.bins and router.hasher is self.router.hasher
        self.router = router
        self.memo = router.memo

    def index_of(self, key: Any) -> int:
        """The bin index of ``key`` (memoised)."""
        return self.router.bin(key)

    def of_key(self, key: Any, record: Any, time: Any) -> Optional[Bin]:
        """The bin of ``key`` if this worker holds it, made if it holds no state for it
        yet (None: the bin is on its way here).  ``record`` and ``time`` name the key in
        an error."""
        try:
            bi = self.router.bin(key)
        except KeyFunctionError as exc:
            raise KeyFunctionError(f"operator {self.name!r}: record {record!r} at time {time!r}: {exc}") from None
        if bi not in self.owned:
            return None
        b = self.at[bi]
        return self.held(bi) if b is None else b

    def get(self, index: int) -> Optional[Bin]:
        """Bin ``index`` if this worker holds state for it (decoded first if a lazy
        restore left it encoded)."""
        b = self.bins.get(index)
        if b is None and self.lazy is not None and index in self.lazy:
            self.lazy.materialise(index)
            b = self.bins.get(index)
        return b

    def held(self, index: int) -> Bin:
        """Bin ``index``, owned here and not in ``bins``: decoded now if a lazy restore
        left it encoded, else a new empty one."""
        if self.lazy is not None and index in self.lazy:
            self.lazy.materialise(index)
            return self.bins[index]
        b = self.new_bin(index)
        self.keep(b)
        return b

    def keep(self, b: Bin) -> Bin:
        """Keep bin ``b`` (owned) here: in ``bins`` and in the bin-indexed lookup; the
        bin kept (``b`` through :attr:`adopt`)."""
        if self.adopt is not None:
            b = self.adopt(b)
        self.bins[b.index] = b
        self.at[b.index] = b
        return b

    def take(self, b: Bin) -> Bin:
        """Own bin ``b`` and keep it (migration, recovery): the bin kept."""
        self.owned.add(b.index)
        return self.keep(b)

    def drop(self, index: int) -> Optional[Bin]:
        """Give up bin ``index`` (decoded first if it was restored lazily): the bin, or
        None if this worker held no state for it."""
        self.get(index)
        return self.release(index)

    def release(self, index: int) -> Optional[Bin]:
        """Give up bin ``index`` as it is (a bin a lazy restore left encoded stays
        encoded): the bin if it was decoded, else None."""
        self.owned.discard(index)
        self.at[index] = None
        return self.bins.pop(index, None)

    def decode_all(self) -> None:
        """Decode every bin a lazy restore left encoded."""
        if self.lazy is not None:
            self.lazy.materialise_all()
