"""A stateful runtime's bins kept in a RocksDB store (``state=RocksDB(...)``): when their
resident states are written back.

:class:`StoreSync` makes every bin of a worker live in the store (new ones made there,
delivered ones moved there) and writes the resident states back once per epoch -- when
the input frontier moved since the last write-back -- or sooner when the keys touched
since hold more than half the cache's budget (a bounded cache of touched keys).
"""

from __future__ import annotations

from typing import Any

from tstate.operators.held_bins import HeldBins

__all__ = ["StoreSync"]


class StoreSync:
    """The write-backs of ``held``'s bins to ``store`` (see the module docstring)."""

    def __init__(self, held: HeldBins, store: Any) -> None:
        from tstate.state.rocksdb.keyed_bin import RocksBin, adopt  # only with state=RocksDB(...)

        self.held = held
        self.store = store
        held.new_bin = lambda i: RocksBin(i, store)
        held.adopt = lambda b: adopt(b, store)
        self._written_at: Any = None  # the input frontier at the last write-back

    def write_back(self) -> None:
        """Every resident state written back, in one batch."""
        for b in self.held.bins.values():
            if b.states:
                b.write_back()
        self.store.cache.write_back(defer=True)

    def end_activation(self, frontier: Any) -> None:
        """At the end of an activation: write back once per epoch -- when the input
        frontier moved since the last write-back -- or sooner when the keys touched since
        hold more than half the cache's budget (a bounded cache of touched keys)."""
        f = frontier.elements()
        if f != self._written_at or self.store.cache.over_budget():
            self._written_at = f
            self.write_back()
