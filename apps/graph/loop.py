"""Iterate scopes whose epochs run one after another, and the change records.

Inside an iterate scope time is ``Product(epoch, inner)``, and under the product order
``Product(e - 1, 7)`` and ``Product(e, 0)`` are *incomparable*: without care, epoch 5's
first round may be applied while epoch 4 is still at its third.  The graph algorithms
keep **one** per-vertex state across epochs (the graph and the previous epoch's
result: that is what makes them incremental), so epoch ``e`` must not touch it before
epoch ``e - 1`` has finished.

:func:`sequenced_loop` builds such a loop **without holding anything**: the rounds of
epoch ``e`` use the inner times ``e * SPAN + round`` (:func:`at`, :func:`round_of`;
``round < SPAN``).  The loop's entrance (a stateless frontier operator) gives each
entering record of epoch ``e`` at ``Product(e, e * SPAN)``, and every time of epoch
``e - 1`` -- up to its ``END`` timers, ``Product(e - 1, (e - 1) * SPAN + END)`` -- is then
*less than* that time in the product order.  A ``@flow.stateful`` operator applies the
records of a time only once no earlier time can arrive, and fires timers in time
order, so it starts epoch ``e`` exactly when epoch ``e - 1`` is over (and every record of
epoch ``e`` has entered).  Epochs do not overlap inside the loop; they still overlap
with everything outside it.

So the loops keep **no state outside typed ``@flow.stateful`` state**: everything an
epoch carries over lives in bins, which tstate checkpoints and migrates; records in
flight are at times the cut of a checkpoint replays.  Epochs must be ints in
``0 <= epoch <= MAX_EPOCH`` (about 2e9; outside, the entrance raises
:class:`~apps.graph.edges.GraphInputError`).

Within an epoch the algorithms use *phases*: per-vertex timers at ``at(e, PHASE)`` fire
only once every round ``< PHASE`` of epoch ``e`` is done (the timer's own output
re-enters at ``PHASE + 1``), which is a barrier between a "reset" flood and a
propagation, for instance; a timer at ``at(e, END)`` fires when the epoch's loop has
quiesced and emits the vertex's net change of the epoch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Optional

import tstate as ts
from apps.graph.edges import GraphInputError
from tstate.progress import Product
from tstate.progress.timestamp import TIME_MAX

__all__ = ["Change", "sequenced_loop", "at", "round_of", "END", "SPAN", "MAX_EPOCH"]

#: The inner times of epoch ``e`` are ``e * SPAN + round``, ``0 <= round < SPAN``.
SPAN = 1 << 32
#: The round of the per-vertex "epoch finished" timers (larger than any real round).
END = 1 << 31
#: The largest epoch a loop accepts (its inner times must stay below ``TIME_MAX``).
MAX_EPOCH = (TIME_MAX - SPAN) // SPAN


def at(epoch: int, round: int) -> Product:
    """The loop time of ``round`` of ``epoch`` (see the module docstring)."""
    return Product(epoch, epoch * SPAN + round)


def round_of(t: Product) -> int:
    """The round of epoch ``t.outer`` that loop time ``t`` is."""
    return t.inner - t.outer * SPAN  # type: ignore[no-any-return]


class Change(NamedTuple):
    """One result change of one epoch: ``key`` went from ``old`` to ``new``; ``None``
    means absent (a vertex that appeared has ``old=None``, one that left ``new=None``)."""

    key: Any
    old: Any
    new: Any


def _entrance(
    flow: ts.Dataflow,
    entered: ts.Stream,
    feedback: ts.Stream,
    name: str,
    expand: Optional[Callable[[Any], Iterable[Any]]] = None,
    combine: Optional[Callable[[list[list[Any]]], list[Any]]] = None,
    announce: Optional[Callable[[int], list[Any]]] = None,
) -> ts.Stream:
    """The loop's entrance: gives each entering record of epoch ``e`` (expanded by
    ``expand``) at round 0 of ``e`` (``at(e, 0)``, see the module docstring) and passes
    the loop variable's messages (plain tuples) straight through, so the body needs no
    ``concat`` and may feed its whole output back; ``combine``, if given, replaces the
    pass-through: it gets the loop variable's batches of one time (one activation's
    worth) and returns the records to pass on; ``announce(e)``, if given, adds records
    at round 0 of every epoch ``e`` that has entering records (at least once; possibly
    once per worker and activation).  Nothing is kept between activations."""

    @flow.binary_frontier(entered, feedback, name=name)
    def entrance(new: Any, fb: Any, out: Any, ctx: Any) -> None:
        announced: set[int] = set()
        for cap, batch in new:
            e = cap.time.outer
            if e.__class__ is not int or not 0 <= e <= MAX_EPOCH:
                raise GraphInputError(f"epoch {e!r} is not an int in [0, {MAX_EPOCH}] (the loops' time range)")
            recs = [x for r in batch for x in expand(r)] if expand is not None else batch
            if announce is not None and e not in announced:
                announced.add(e)
                recs = announce(e) + recs
            if e:
                c = cap.delayed(at(e, 0))
                out.give_many(c, recs)
                c.drop()
            else:
                out.give_many(cap, recs)
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

    return entrance


def sequenced_loop(
    flow: ts.Dataflow,
    stream: ts.Stream,
    body: Callable[[ts.Scope, ts.Stream], tuple[ts.Stream, ts.Stream]],
    name: str,
    expand: Optional[Callable[[Any], Iterable[Any]]] = None,
    combine: Optional[Callable[[list[list[Any]]], list[Any]]] = None,
    announce: Optional[Callable[[int], list[Any]]] = None,
) -> ts.Stream:
    """An iterate scope over ``stream`` whose epochs run one after another (see the
    module docstring).  ``body(scope, inputs)`` gets the entering records (each
    expanded by ``expand``, if given, at ``at(epoch, 0)``) merged with the loop
    variable, and returns ``(messages, results)``: the plain tuples of ``messages`` go
    around the loop (one round later; anything else on it is dropped, or ``combine``
    turns each round's batches into the records passed on), ``results`` leave it;
    ``announce(e)`` adds records at the start of every epoch with input.  The
    per-epoch sequencing needs the body's state to be a ``@flow.stateful`` operator
    fed by ``inputs`` (it applies a time's records once no earlier time can arrive)."""

    def loop(scope: ts.Scope, entered: ts.Stream) -> ts.Stream:
        fb = scope.feedback(name=f"{name}.feedback")
        inputs = _entrance(
            flow, entered, fb.stream, name=f"{name}.gate", expand=expand, combine=combine, announce=announce
        )
        messages, results = body(scope, inputs)
        fb.connect(messages)
        return results

    loop.__name__ = name
    return flow.iterate(stream, name=name)(loop)  # type: ignore[no-any-return]
