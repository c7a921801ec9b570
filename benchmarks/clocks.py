"""CPU clocks of a Spark run's processes read from ``/proc`` (:class:`Clocks`): the
driver's Python, the JVM and its descendants (the Python workers); used by
:mod:`benchmarks.graph_driver_profile` and :mod:`benchmarks.graph_spark`."""

from __future__ import annotations

import os
import time

__all__ = ["Clocks"]

_TICK = os.sysconf("SC_CLK_TCK")


class Clocks:
    """CPU seconds so far of the driver's Python process, the JVM and its descendants
    (the Python workers), read from ``/proc``."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm = jvm_pid

    @staticmethod
    def _cpu(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICK
        except OSError:
            return 0.0

    def _descendants(self) -> list[int]:
        parent: dict[int, int] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    pass
        out, todo = [], [self.jvm]
        while todo:
            p = todo.pop()
            kids = [c for c, pp in parent.items() if pp == p]
            out += kids
            todo += kids
        return out

    def now(self) -> tuple[float, float, float, float]:
        """(wall, driver Python CPU, JVM CPU, workers' CPU) seconds."""
        return (time.perf_counter(), time.process_time(), self._cpu(self.jvm),
                sum(self._cpu(p) for p in self._descendants()))  # fmt: skip
