"""Logical timestamps: ``int`` epochs and ``Product(outer, inner)`` for iterate scopes.

A timestamp at *depth* 0 is an ``int`` (totally ordered).  Inside an iterate scope the
time is ``Product(outer, inner)`` where ``outer`` is the time of the enclosing scope and
``inner`` (an ``int``) counts loop iterations; nested scopes nest products.  Products are
ordered by the **product partial order**: ``a <= b`` iff ``a.outer <= b.outer`` and
``a.inner <= b.inner``, so ``Product(1, 2)`` and ``Product(2, 1)`` are incomparable.

The partial order is exposed by :func:`less_equal` and :func:`less_than`.  Python's
``<``/``sorted`` on products is the *lexicographic* order, a linear extension of the
partial order, used only to sort times deterministically (as Timely's ``Ord``).

>>> less_equal(Product(1, 2), Product(2, 1)), less_equal(Product(1, 1), Product(2, 1))
(False, True)
>>> sorted([Product(2, 0), Product(1, 5)])
[Product(outer=1, inner=5), Product(outer=2, inner=0)]
"""

from __future__ import annotations

from typing import Any, Union

from attrs import frozen

__all__ = [
    "MAX_SEQUENCED_EPOCH",
    "SEQUENCE_SPAN",
    "sequenced",
    "sequenced_round",
    "Product",
    "Timestamp",
    "TIME_MAX",
    "less_equal",
    "less_than",
    "depth",
    "minimum",
    "to_vector",
    "from_vector",
]

#: The largest value of any coordinate; a summary that would go past it "overflows"
#: and the record it would apply to is dropped (as Timely's ``results_in`` → ``None``).
TIME_MAX = (1 << 63) - 1

#: In an epoch-sequenced iterate scope (``flow.iterate(..., sequenced=True)``) round
#: ``k`` of epoch ``e`` is ``Product(e, e * SEQUENCE_SPAN + k)``, ``0 <= k < SEQUENCE_SPAN``:
#: every time of epoch ``e - 1`` is then ``<=`` every time of epoch ``e`` in the product
#: order, so whatever applies times in order finishes an epoch before it starts the next.
SEQUENCE_SPAN = 1 << 32
#: The largest epoch a sequenced scope accepts (its inner times must stay below ``TIME_MAX``).
MAX_SEQUENCED_EPOCH = (TIME_MAX - SEQUENCE_SPAN) // SEQUENCE_SPAN


@frozen(order=False, cache_hash=True)  # times are dict keys everywhere: hash once
class Product:
    """A time inside an iterate scope: ``outer`` is the enclosing scope's time,
    ``inner`` the iteration count.  Ordered by the product partial order (see the
    module docstring); ``<`` is lexicographic, for sorting only."""

    outer: Any
    inner: int

    # lexicographic comparisons, hand-written: attrs' generated ones build tuples
    # through a generic helper, and sorted containers of times call them a lot
    def __lt__(self, other: "Product") -> bool:
        if type(other) is not Product:
            return NotImplemented
        o, p = self.outer, other.outer
        return o < p or (o == p and self.inner < other.inner)  # type: ignore[no-any-return]

    def __le__(self, other: "Product") -> bool:
        if type(other) is not Product:
            return NotImplemented
        o, p = self.outer, other.outer
        return o < p or (o == p and self.inner <= other.inner)  # type: ignore[no-any-return]

    def __gt__(self, other: "Product") -> bool:
        if type(other) is not Product:
            return NotImplemented
        return other.__lt__(self)

    def __ge__(self, other: "Product") -> bool:
        if type(other) is not Product:
            return NotImplemented
        return other.__le__(self)

    def less_equal(self, other: "Product") -> bool:
        """``self <= other`` in the product partial order."""
        if self.inner > other.inner:
            return False
        o = self.outer
        if type(o) is int:
            return o <= other.outer  # type: ignore[no-any-return]
        return o.less_equal(other.outer)  # type: ignore[no-any-return]


Timestamp = Union[int, Product]


def sequenced(epoch: int, round: int = 0) -> "Product":
    """The time of ``round`` of ``epoch`` in an epoch-sequenced scope (see
    :data:`SEQUENCE_SPAN`)."""
    return Product(epoch, epoch * SEQUENCE_SPAN + round)


def sequenced_round(t: "Product") -> int:
    """The round of its epoch that the time ``t`` of a sequenced scope is."""
    return t.inner - t.outer * SEQUENCE_SPAN  # type: ignore[no-any-return]


def less_equal(a: Any, b: Any) -> bool:
    """``a <= b`` in the partial order of timestamps (and of path summaries)."""
    if type(a) is int:
        return a <= b  # type: ignore[no-any-return]
    return a.less_equal(b)  # type: ignore[no-any-return]


def less_than(a: Any, b: Any) -> bool:
    """``a < b`` in the partial order: ``a <= b`` and ``a != b``."""
    if type(a) is int:
        return a < b  # type: ignore[no-any-return]
    return a != b and a.less_equal(b)  # type: ignore[no-any-return]


def depth(t: Any) -> int:
    """The scope depth of a time: 0 for ``int``, 1 for ``Product(int, int)``, ..."""
    d = 0
    while type(t) is Product:
        t = t.outer
        d += 1
    return d


def epoch(t: Any) -> int:
    """The root-scope epoch a time belongs to: the time itself for an ``int``, the
    outermost coordinate of a ``Product`` (``Product(Product(4, 1), 7)`` → ``4``).
    Reconfigurations and checkpoints happen at epoch boundaries, so inside iterate
    scopes they compare times by their epoch: "before epoch ``T``" means ``epoch(t) < T``,
    whatever the iteration."""
    while type(t) is Product:
        t = t.outer
    return t  # type: ignore[no-any-return]


def minimum(d: int) -> Timestamp:
    """The least time at depth ``d`` (``0``, ``Product(0, 0)``, ...)."""
    t: Timestamp = 0
    for _ in range(d):
        t = Product(t, 0)
    return t


def to_vector(t: Any) -> tuple[int, ...]:
    """A time as its coordinates, outermost first: ``Product(Product(1, 2), 3)`` → ``(1, 2, 3)``."""
    out: list[int] = []
    while type(t) is Product:
        out.append(t.inner)
        t = t.outer
    out.append(t)
    out.reverse()
    return tuple(out)


def from_vector(v: tuple[int, ...] | list[int]) -> Timestamp:
    """Inverse of :func:`to_vector`."""
    t: Timestamp = v[0]
    for x in v[1:]:
        t = Product(t, x)
    return t
