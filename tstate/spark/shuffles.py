"""How rows reach partitions on one Spark session (:class:`Shuffles`)."""

from __future__ import annotations

from typing import Any

from tstate.spark.wire import TICK

__all__ = ["Shuffles"]


class Shuffles:
    """How rows reach partitions on one Spark session: labels ``l[p]`` whose Spark hash
    puts them on partition ``p``, and ``TICK`` rows (cached across batches)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._labels: dict[int, tuple[int, ...]] = {}
        self._ticks: dict[tuple[int, tuple[int, ...]], Any] = {}

    def labels(self, n: int) -> tuple[int, ...]:
        """Labels ``l[p]`` with ``pmod(hash(l[p]), n) == p``: Spark's hash partitioning
        of an int column, computed by Spark itself."""
        if n not in self._labels:
            found: dict[int, int] = {}
            size = 64 * n
            while len(found) < n:
                rows = self.spark.range(0, size).selectExpr(
                    "cast(id as int) as id", f"pmod(hash(cast(id as int)), {n}) as p"
                ).collect()
                for r in rows:
                    found.setdefault(int(r["p"]), int(r["id"]))
                size *= 4
            self._labels[n] = tuple(found[p] for p in range(n))
        return self._labels[n]

    def ticks(self, nodes: "int | tuple[int, ...]", labels: tuple[int, ...]) -> Any:
        """One ``TICK`` row per partition (for the first of ``nodes``, a stage's
        boundaries): every partition runs the stage, so due timers fire everywhere.

        Built by the JVM alone (``range`` and SQL expressions, the columns of :data:`tstate.spark.wire.SCHEMA`):
        a DataFrame made from a Python list would run a Python worker task per partition
        each time a stage reads it (a ``PythonRDD``), on the critical path of every
        stage and loop round."""
        if isinstance(nodes, int):
            nodes = (nodes,)
        key = (nodes[0], tuple(labels))
        if key not in self._ticks:
            table = ", ".join(map(str, labels))
            self._ticks[key] = self.spark.range(0, len(labels), 1, len(labels)).selectExpr(
                f"{TICK} as kind", f"element_at(array({table}), cast(id as int) + 1) as dest", f"{nodes[0]} as node",
                "0 as bin", "cast(0 as bigint) as time", "X'' as payload",
            )
        return self._ticks[key]
