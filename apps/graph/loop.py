"""Iterate scopes whose epochs run one after another, and the change records.

Inside an iterate scope time is ``Product(epoch, round)``, and the rounds of different
epochs are *incomparable*: without care, epoch 5's round 0 may be applied while epoch
4 is still at round 3.  The graph algorithms keep **one** per-vertex state across
epochs (the graph and the previous epoch's result: that is what makes them
incremental), so epoch ``e`` must not touch it before epoch ``e - 1`` has finished.

:func:`sequenced_loop` builds such a loop: a *gate* at the loop's entrance holds the
records of epoch ``e`` (with a capability for ``Product(e, 0)``) until

- every record of epoch ``e`` has entered (the entrance's frontier is past ``e``), and
- nothing of an earlier epoch is left in the loop: no element of the feedback edge's
  frontier has ``outer < e``.  Every capability the loop body holds for epoch ``e - 1``
  (pending records, per-vertex timers) shows up there, so this is exactly "epoch
  ``e - 1`` is done".

The gate's own capability for ``Product(e, 0)`` never blocks epoch ``e - 1``
(``Product(e, 0)`` is not ``<= Product(e - 1, r)``), so there is no deadlock; epochs
simply do not overlap inside the loop (they still overlap with everything outside it).

Within an epoch the algorithms use *phases*: per-vertex timers at
``Product(e, PHASE)`` fire only once every round ``< PHASE`` of epoch ``e`` is done
(the timer's own output re-enters at ``PHASE + 1``), which is a barrier between a
"reset" flood and a propagation, for instance; a timer at ``Product(e, END)`` fires
when the epoch's loop has quiesced and emits the vertex's net change of the epoch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Optional

import tstate as ts

__all__ = ["Change", "sequenced_loop", "END"]

#: The round of the per-vertex "epoch finished" timers (larger than any real round).
END = 1 << 40


class Change(NamedTuple):
    """One result change of one epoch: ``key`` went from ``old`` to ``new``; ``None``
    means absent (a vertex that appeared has ``old=None``, one that left ``new=None``)."""

    key: Any
    old: Any
    new: Any


def _gate(
    flow: ts.Dataflow,
    entered: ts.Stream,
    feedback: ts.Stream,
    name: str,
    expand: Optional[Callable[[Any], Iterable[Any]]] = None,
    combine: Optional[Callable[[list[list[Any]]], list[Any]]] = None,
) -> ts.Stream:
    """Holds entering records per epoch (see the module docstring) and passes the
    loop variable's messages (plain tuples) straight through, so the body needs no
    ``concat`` and may feed its whole output back; ``expand`` maps each entering
    record to the records released for it; ``combine``, if given, replaces the
    pass-through: it gets the loop variable's batches of one time (one activation's
    worth) and returns the records to pass on."""

    @flow.binary_frontier(entered, feedback, name=name, state=dict)
    def gate(new: Any, fb: Any, out: Any, ctx: Any) -> None:
        held: dict[Any, tuple[Any, list[Any]]] = ctx.state  # epoch -> (capability, records)
        for cap, batch in new:
            e = cap.time.outer
            slot = held.get(e)
            if slot is None:
                held[e] = (cap.retain(), list(batch))
            else:
                slot[1].extend(batch)
        if combine is None:
            for cap, batch in fb:  # messages go on; results (Change records) are dropped
                msgs = [r for r in batch if r.__class__ is tuple]
                if msgs:
                    out.give_many(cap, msgs)
        else:
            rounds: dict[Any, tuple[Any, list[list[Any]]]] = {}
            for cap, batch in fb:
                slot = rounds.get(cap.time)
                if slot is None:
                    rounds[cap.time] = (cap, [batch])
                else:
                    slot[1].append(batch)
            for cap, batches in rounds.values():
                msgs = combine(batches)
                if msgs:
                    out.give_many(cap, msgs)
        while held:
            e = min(held)
            if any(f.outer <= e for f in new.frontier) or any(f.outer < e for f in fb.frontier):
                return
            cap, recs = held.pop(e)
            if expand is not None:
                recs = [x for r in recs for x in expand(r)]
            out.give_many(cap, recs)
            cap.drop()

    return gate


def sequenced_loop(
    flow: ts.Dataflow,
    stream: ts.Stream,
    body: Callable[[ts.Scope, ts.Stream], tuple[ts.Stream, ts.Stream]],
    name: str,
    max_iterations: Optional[int] = None,
    expand: Optional[Callable[[Any], Iterable[Any]]] = None,
    combine: Optional[Callable[[list[list[Any]]], list[Any]]] = None,
) -> ts.Stream:
    """An iterate scope over ``stream`` whose epochs run one after another (see the
    module docstring).  ``body(scope, inputs)`` gets the gated entering records
    (each expanded by ``expand``, if given) merged with the loop variable, and
    returns ``(messages, results)``: the plain tuples of ``messages`` go around the
    loop (one round later; anything else on it is dropped, or ``combine`` turns each
    round's batches into the records passed on), ``results`` leave it."""

    def loop(scope: ts.Scope, entered: ts.Stream) -> ts.Stream:
        fb = scope.feedback(max_iterations=max_iterations, name=f"{name}.feedback")
        inputs = _gate(flow, entered, fb.stream, name=f"{name}.gate", expand=expand, combine=combine)
        messages, results = body(scope, inputs)
        fb.connect(messages)
        return results

    loop.__name__ = name
    return flow.iterate(stream, name=name)(loop)  # type: ignore[no-any-return]
