"""How rows reach partitions on one Spark session (:class:`Shuffles`).

The partition labels come from Spark's own hash of an int column, reproduced here
(:func:`spark_hash_int`: Murmur3 x86 32-bit of the 4-byte int, seed 42, as
``org.apache.spark.sql.catalyst.expressions.Murmur3Hash``), so finding them costs no
Spark job.

>>> spark_hash_int(0), spark_hash_int(1), spark_hash_int(-7)
(933211791, -559580957, -1618159745)
"""

from __future__ import annotations

from typing import Any

from tstate.spark.wire import TICK

__all__ = ["Shuffles", "spark_hash_int", "partition_of"]

_M32 = 0xFFFFFFFF
#: the seed of Spark SQL's ``hash()`` and of ``repartition``'s hash partitioning
SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = SEED) -> int:
    """Spark SQL's ``hash(cast(value as int))``: Murmur3 x86 32-bit (``hashInt``), signed."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = _rotl((seed & _M32) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_of(value: int, n: int) -> int:
    """The partition of ``n`` that Spark's hash partitioning (``repartition(n, col)``)
    puts an int column's ``value`` on: ``pmod(hash(value), n)``."""
    return spark_hash_int(value) % n


class Shuffles:
    """How rows reach partitions on one Spark session: labels ``l[p]`` whose Spark hash
    puts them on partition ``p``, and ``TICK`` rows (cached across batches)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._labels: dict[int, tuple[int, ...]] = {}
        self._ticks: dict[tuple[int, tuple[int, ...]], Any] = {}

    def labels(self, n: int) -> tuple[int, ...]:
        """Labels ``l[p]`` with ``pmod(hash(l[p]), n) == p``: Spark's hash partitioning
        of an int column (:func:`partition_of`), the smallest such label per partition."""
        if n not in self._labels:
            found: dict[int, int] = {}
            label = 0
            while len(found) < n:
                found.setdefault(partition_of(label, n), label)
                label += 1
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
