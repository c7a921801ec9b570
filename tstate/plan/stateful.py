"""The keyed stateful operator node (``@flow.stateful`` and ``@flow.fold_bins``), and
the types of the functions it runs.

A :class:`Stateful` node holds everything both engines need to run the operator: the
function, the key, the declared state type (analysed once into a
:class:`~tstate.types.schema.Schema`), how a new key's state is made, the bin count
(its input's :class:`~tstate.plan.node.Pact` is derived from it: stored once), whether
it is a per-bin ``fold``, whether the function must return the new state, and the
``on_notify`` timer handler.  :meth:`Stateful.declare` checks a declaration when the
dataflow is built.  The runtime (bins, timers, in-order apply) is
:mod:`tstate.operators.stateful`, shared by both engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Optional, Protocol, Union

from attrs import evolve, field, frozen

from tstate.errors import ConfigurationError, GraphError, StateReturnError
from tstate.keys import check_bins
from tstate.plan.node import KeyFn, Node, Pact, _bins
from tstate.plan.scope import Scope
from tstate.state.declaration import default_factory, never_returns_a_value, returns_required
from tstate.types.schema import Schema, analyse

if TYPE_CHECKING:  # pragma: no cover
    from tstate.state.context import Context

__all__ = ["Stateful", "StatefulFn", "FoldFn", "NotifyHandler", "Returns"]

#: whether a stateful function must return the new state: ``"never"`` (it may mutate
#: it in place), ``"always"`` (an immutable state type) or ``"when None"`` (an
#: ``Optional`` of a mutable type, for a key whose state is None)
Returns = Literal["never", "always", "when None"]


class StatefulFn(Protocol):
    """``fn(state, record, ctx)`` of ``@flow.stateful``: mutate ``state`` in place and
    return None, or return the new state (a state type that cannot change in place
    must be returned; see :meth:`tstate.dataflow.Dataflow.stateful`)."""

    def __call__(self, state: Any, record: Any, ctx: "Context", /) -> Any: ...


class FoldFn(Protocol):
    """``fn(states, records, ctx)`` of ``@flow.fold_bins``: one bin's ``key -> state``
    dict and a batch of records of that bin, all at ``ctx.time``."""

    def __call__(self, states: dict[Any, Any], records: list[Any], ctx: "Context", /) -> Any: ...


class NotifyHandler(Protocol):
    """``handler(state, time, ctx)`` registered with ``@op.on_notify``: a key's timer at
    ``time`` fired; return the new state or None to keep it."""

    def __call__(self, state: Any, time: Any, ctx: "Context", /) -> Any: ...


@frozen(kw_only=True, eq=False)
class Stateful(Node):
    """A keyed stateful operator (see the module docstring)."""

    kind: ClassVar[str] = "stateful"

    fn: Union[StatefulFn, FoldFn]
    key: KeyFn
    #: the declared state type, and its analysis
    state: Any
    schema: Schema
    #: the state of a key seen for the first time
    new_state: Callable[[], Any]
    bins: int = field(validator=_bins)
    fold: bool = False
    returns: Returns = "never"
    on_notify: Optional[NotifyHandler] = None
    #: apply what comes back to keys held by the same worker within the round
    #: (:mod:`tstate.plan.local_rounds`)
    local_rounds: bool = False

    @classmethod
    def declare(
        cls,
        name: str,
        scope: Scope,
        fn: Union[StatefulFn, FoldFn],
        key: KeyFn,
        state: Any,
        default: Optional[Callable[[], Any]] = None,
        bins: int = 256,
        fold: bool = False,
        local_rounds: bool = False,
    ) -> "Stateful":
        """A checked node: ``key`` is a function, ``bins`` a power of two, ``state`` a
        supported type (:class:`~tstate.errors.StateTypeError` naming the field path),
        and a function whose state cannot change in place returns a value
        (:class:`~tstate.errors.StateReturnError`); ``local_rounds`` needs an iterate
        scope (:class:`~tstate.errors.GraphError`; the way back is checked when the
        execution is built: :func:`tstate.plan.local_rounds.local_loop`)."""
        schema, new_state, returns = cls.check(key, state, default, bins, fold)
        if returns == "always" and never_returns_a_value(fn):
            raise StateReturnError(
                f"stateful operator {name!r}: {getattr(fn, '__qualname__', fn)} never returns a value, but its state "
                f"type {schema.name} cannot change in place: return the new state (return the old one to keep it)"
            )
        if local_rounds and scope.depth == 0:
            raise GraphError(
                f"stateful operator {name!r}: local_rounds=True needs an iterate scope (it is in the root scope)"
            )
        return cls(
            name=name, scope=scope, fn=fn, key=key, state=state, schema=schema, new_state=new_state, bins=bins,
            fold=fold, returns=returns, local_rounds=local_rounds,
        )

    @staticmethod
    def check(
        key: KeyFn, state: Any, default: Optional[Callable[[], Any]], bins: int, fold: bool
    ) -> tuple[Schema, Callable[[], Any], Returns]:
        """The checks of :meth:`declare` that need no function: the schema, the new
        state's factory and the return rule."""
        check_bins(bins)
        if not callable(key):
            raise ConfigurationError(f"stateful: key must be a function of the record, got {key!r}")
        schema = analyse(state)
        new_state = default if default is not None else default_factory(state)
        returns: Returns = "never" if fold else returns_required(schema)
        return schema, new_state, returns

    def with_on_notify(self, handler: NotifyHandler) -> "Stateful":
        """This node with ``handler`` as its timer handler."""
        return evolve(self, on_notify=handler)

    def pacts(self) -> tuple[Optional[Pact], ...]:
        return (Pact(self.key, self.bins),)

    def functions(self) -> list[Callable[..., Any]]:
        return [f for f in (self.fn, self.key, self.on_notify) if f is not None]
