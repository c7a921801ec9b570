"""Generic frontier-aware operator nodes (``unary_frontier``, ``binary_frontier``).

The user's ``logic(*inputs, out, ctx)`` reads batches with their capabilities, the
input frontiers and notifications (see :mod:`tstate.operators.generic` for what it is
given); it is not a function of one batch, so each engine runs it its own way (the
Spark backend only when it keeps nothing between activations:
:mod:`tstate.spark.frontier`).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, Protocol

from attrs import field, frozen

from tstate.plan.node import DEFAULT_BINS, KeyFn, Node, Pact, _bins

__all__ = ["Frontier", "UnaryFrontier", "BinaryFrontier", "FrontierLogic"]


class FrontierLogic(Protocol):
    """``logic(*inputs, out, ctx)``: one call per activation (see
    :mod:`tstate.operators.generic`)."""

    def __call__(self, *args: Any) -> Any: ...


@frozen(kw_only=True, eq=False)
class Frontier(Node):
    """A frontier-aware operator over ``len(exchange)`` inputs; input ``i`` is routed by
    ``exchange[i]`` (None: not exchanged) over ``bins`` bins; ``state`` makes the
    per-worker state object (None: none)."""

    logic: FrontierLogic
    exchange: tuple[Optional[KeyFn], ...] = (None,)
    state: Optional[Callable[[], Any]] = None
    bins: int = field(default=DEFAULT_BINS, validator=_bins)

    @property
    def arity(self) -> int:
        return len(self.exchange)

    def pacts(self) -> tuple[Optional[Pact], ...]:
        return tuple(Pact(k, self.bins) if k is not None else None for k in self.exchange)

    def functions(self) -> list[Callable[..., Any]]:
        return [self.logic, *(k for k in self.exchange if k is not None)]


@frozen(kw_only=True, eq=False)
class UnaryFrontier(Frontier):
    """``unary_frontier``: one input."""

    kind: ClassVar[str] = "unary_frontier"


@frozen(kw_only=True, eq=False)
class BinaryFrontier(Frontier):
    """``binary_frontier``: two inputs; notifications fire once both frontiers passed."""

    kind: ClassVar[str] = "binary_frontier"
    exchange: tuple[Optional[KeyFn], ...] = (None, None)
