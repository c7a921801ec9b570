"""How rows reach partitions on one Spark session (:class:`Shuffles`)."""

from __future__ import annotations

from typing import Any

from tstate.spark.wire import TICK

__all__ = ["Shuffles", "spark_int_hash"]

_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark SQL's ``hash(cast(value as int))`` (Murmur3 x86 32-bit of one int, seed
    42: what ``repartition(n, column)`` places an int column's rows by), as a signed
    32-bit int.

    >>> spark_int_hash(0), spark_int_hash(1)
    (933211791, -559580957)
    """
    k = (value & _M32) * 0xCC9E2D51 & _M32
    k = _rotl(k, 15) * 0x1B873593 & _M32
    h = _rotl(seed ^ k, 13)
    h = (h * 5 + 0xE6546B64) & _M32
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & _M32
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _M32
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


class Shuffles:
    """How rows reach partitions on one Spark session: labels ``l[p]`` whose Spark hash
    puts them on partition ``p``, and ``TICK`` rows (cached across batches)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._labels: dict[int, tuple[int, ...]] = {}
        self._ticks: dict[tuple[int, tuple[int, ...]], Any] = {}

    def labels(self, n: int) -> tuple[int, ...]:
        """Labels ``l[p]`` with ``pmod(hash(l[p]), n) == p``: Spark's hash partitioning
        of an int column (:func:`spark_int_hash`), the smallest such label per
        partition; computed here, without a Spark job."""
        if n not in self._labels:
            found: dict[int, int] = {}
            i = 0
            while len(found) < n:
                found.setdefault(spark_int_hash(i) % n, i)
                i += 1
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
