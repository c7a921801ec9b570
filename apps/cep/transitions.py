"""Transition evaluation: which way each partial match of a key goes on an event.

A :class:`TransitionEvaluator` holds the compiled pattern's decision trees (one per NFA
state, and the start state's) in the form the engine evaluates fastest, and evaluates
them: the conditions -- the only user code -- decide, for one event, the leaf each
partial match of a key reaches, **without touching the key's state**; the outcomes
are applied afterwards (:mod:`apps.cep.runs`), so a condition that fails leaves the
state as it was.  A condition that reads a missing field
(``AttributeError``/``KeyError``) raises :class:`~apps.cep.errors.EventFieldError`
naming the stage and the field (:meth:`TransitionEvaluator.failed`).
"""

from __future__ import annotations

from typing import Any

from apps.cep.context import ConditionContext
from apps.cep.errors import EventFieldError
from apps.cep.nfa import IDENTITY, NFA, Leaf

__all__ = ["TransitionEvaluator", "decide", "walk"]


def _plan(tree: Any) -> tuple:
    """How the engine evaluates a state's decision tree: (kind, fn, leaf if false, leaf
    if true, predicate, tree); kind 0: a leaf (no condition), 1/2: a single simple /
    iterative condition, 3: a general tree."""
    if tree.__class__ is not tuple:
        return (0, None, tree, tree, None, tree)
    fn, takes_ctx, pred, f, t = tree
    if f.__class__ is not tuple and t.__class__ is not tuple:
        return (2 if takes_ctx else 1, fn, f, t, pred, tree)
    return (3, None, None, None, None, tree)


def walk(t: Any, event: Any, ctx: ConditionContext) -> Leaf:
    """The leaf decision tree ``t`` reaches for ``event`` (``ctx`` pointed at the
    partial match)."""
    try:
        while t.__class__ is tuple:
            if t[1]:
                r = t[0](event, ctx)
            else:
                r = t[0](event)
            t = t[4] if r else t[3]
    except (AttributeError, KeyError) as exc:
        if not hasattr(exc, "_cep_predicate"):
            try:
                exc._cep_predicate = t[2]  # type: ignore[union-attr]
            except AttributeError:  # an exception type without a __dict__
                pass
        raise
    return t


def decide(plans: list[tuple], run: tuple, event: Any, ctx: ConditionContext) -> Leaf:
    """The leaf partial match ``run`` reaches for ``event`` (``plans``:
    :attr:`TransitionEvaluator.plans`)."""
    p = plans[run[0]]
    k = p[0]
    if k == 0:
        return p[2]
    ctx._run = run
    if k == 2:
        return p[3] if p[1](event, ctx) else p[2]
    if k == 1:
        return p[3] if p[1](event) else p[2]
    return walk(p[5], event, ctx)


class TransitionEvaluator:
    """The decision trees of ``nfa`` and their evaluation (see the module docstring);
    ``index``: stage name -> stage index, for the conditions' context.  Not
    thread-safe (the context object is reused).

    The loop over a key's partial matches is :meth:`Matcher.process
    <apps.cep.matcher.Matcher.process>`'s own: it reads :attr:`fast`,
    :attr:`start_fast`, :attr:`start_tree` and :attr:`ctx` and calls :func:`decide`
    and :func:`walk` (plain functions) where one condition does not decide; when a
    condition raises ``AttributeError``/``KeyError`` it calls :meth:`failed`.  (On the
    flight patterns a call per event into this class costs ~12% of the matcher's time,
    and calling ``decide`` as a bound method kept in an attribute ~6%.)"""

    def __init__(self, nfa: NFA, index: dict[str, int]) -> None:
        #: the start state's decision tree (a leaf, or a tuple node)
        self.start_tree = nfa.start_tree
        #: per NFA state, how its decision tree is evaluated (see :func:`decide`)
        self.plans = [_plan(t) for t in nfa.trees]
        #: per NFA state, when one condition decides it and its "false" outcome changes
        #: nothing: (fn, leaf if true, takes_ctx), else None
        self.fast = [
            (p[1], p[3], p[0] == 2)
            if p[0] in (1, 2) and p[2].kind == IDENTITY
            else None
            for p in self.plans
        ]
        st = self.start_tree
        #: when one simple condition decides the start state: (fn, leaf if false, leaf if
        #: true), else None
        self.start_fast = (
            (st[0], st[3], st[4])
            if st.__class__ is tuple
            and not st[1]
            and st[3].__class__ is not tuple
            and st[4].__class__ is not tuple
            else None
        )
        #: the context iterative conditions receive
        self.ctx = ConditionContext(index)
        codes = set()
        for p in nfa.predicates:
            codes.add(getattr(p.cond.fn, "__code__", None))
            for leaf in p.cond.leaves:
                codes.add(getattr(leaf, "__code__", None))
                call = type(leaf).__dict__.get("__call__")  # a callable object's method
                codes.add(getattr(call, "__code__", None))
        codes.discard(None)
        self._cond_codes = frozenset(codes)

    # ---- errors -----------------------------------------------------------------------------
    def failed(self, exc: BaseException, run: Any, event: Any) -> None:
        """A condition raised ``exc`` evaluating partial match ``run`` (None: the start
        state): raise it as an EventFieldError when it is one (else return: re-raised)."""
        pred = getattr(exc, "_cep_predicate", None)
        if pred is None:
            tree = self.start_tree if run is None else self.plans[run[0]][5]
            pred = tree[2] if tree.__class__ is tuple else None
        self._field_error(exc, pred, event)

    def _field_error(self, exc: BaseException, pred: Any, event: Any) -> None:
        """Turn an AttributeError/KeyError raised inside condition ``pred`` into an
        EventFieldError naming the stage and the field (else return: re-raised)."""
        if pred is None:
            return
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code not in self._cond_codes:
            tb = tb.tb_next
        if tb is None:
            return  # not raised by a condition
        if isinstance(exc, KeyError):
            fld = exc.args[0] if exc.args else None
        else:
            fld = getattr(exc, "name", None)
            if fld is None:
                fld = str(exc)
        what = {
            "condition": "condition",
            "until": "until condition",
            "negation": "condition",
        }[pred.what]
        raise EventFieldError(
            f"pattern stage {pred.stage!r}: the {what} reads field {fld!r}, which the event "
            f"{event!r} does not have ({type(exc).__name__}: {exc})",
            stage=pred.stage,
            field=fld,
        ) from exc
