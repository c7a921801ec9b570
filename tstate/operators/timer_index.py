"""Which bins have timers at which times: :class:`TimerIndex`, a stateful runtime's
index of its pending timers (each bin keeps its own keys per time,
:attr:`tstate.state.bin.Bin.timers`).

The runtime walks it in time order to fire timers and holds a capability for each
time in it; a bin that leaves (or whose timers fire) is taken out.  A bin restored
lazily is indexed from its checkpoint without being decoded
(:mod:`tstate.engine.checkpointing.lazy`), so the index, not the bins, says whether a
bin has a timer before a time.

>>> ix = TimerIndex()
>>> ix.add(7, 3), ix.add(7, 4), ix.add(9, 3)
(True, False, True)
>>> ix.before(3, 8), ix.before(4, 7)
(True, False)
>>> ix.remove(3, [7, 9]), dict(ix)
([9], {7: {4: None}})
"""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedDict

from tstate.progress.timestamp import epoch

__all__ = ["TimerIndex"]


class TimerIndex(SortedDict):  # type: ignore[misc]
    """time -> ``{bin index: None}`` of the bins with a timer then (see the module docstring)."""

    def add(self, t: Any, bin_index: int) -> bool:
        """Bin ``bin_index`` has a timer at ``t``; True if no bin had one then before."""
        owners = self.get(t)
        if owners is None:
            self[t] = {bin_index: None}
            return True
        owners[bin_index] = None
        return False

    def remove(self, bin_index: int, times: list[Any]) -> list[Any]:
        """Bin ``bin_index`` no longer has timers at ``times``: the times at which no
        bin has one any more."""
        emptied = []
        for t in times:
            owners = self.get(t)
            if owners is not None:
                owners.pop(bin_index, None)
                if not owners:
                    del self[t]
                    emptied.append(t)
        return emptied

    def before(self, bin_index: int, t: int) -> bool:
        """Whether bin ``bin_index`` has a timer at an epoch before ``t`` (in time order:
        stops at the first time at or after ``t``)."""
        for tt, owners in self.items():
            if epoch(tt) >= t:
                return False
            if bin_index in owners:
                return True
        return False
