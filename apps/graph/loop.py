"""Epoch-sequenced loops for the graph algorithms, and the change records.

The graph algorithms keep **one** per-vertex state across epochs (the graph and the
previous epoch's result: that is what makes them incremental), so inside a loop epoch
``e`` must not touch it before epoch ``e - 1`` has finished.  They run in tstate's
*epoch-sequenced* iterate scopes (``flow.iterate(..., sequenced=True)``): round ``k``
of epoch ``e`` is the time :func:`at` ``(e, k)`` (``Product(e, e * SPAN + k)``, see
:data:`tstate.progress.timestamp.SEQUENCE_SPAN`), every time of epoch ``e - 1`` is
``<=`` every time of epoch ``e``, and a ``@flow.stateful`` operator -- which applies a
time's records once no earlier time can arrive and fires timers in time order -- starts
epoch ``e`` exactly when epoch ``e - 1`` is over, **without holding anything**.  So the
loops keep no state outside typed ``@flow.stateful`` state: everything an epoch carries
over lives in bins, which tstate checkpoints and migrates; records in flight are at
times the cut of a checkpoint replays.  Epochs must be ints in ``0 <= epoch <=
MAX_EPOCH`` (about 2e9; outside, the scope's entrance raises
:class:`~tstate.errors.ProgressError`).

:func:`sequenced_loop` adds a *gate* in front of the body: it expands each entering
record (``expand``), announces every epoch with input (``announce``), and passes the
loop variable's messages (plain tuples) straight through (or ``combine`` merges a round's
batches), so the body needs no ``concat`` and may feed its whole output back; anything
else fed back (the results) is dropped there.

Within an epoch the algorithms use *phases*: per-vertex timers at ``at(e, PHASE)`` fire
only once every round ``< PHASE`` of epoch ``e`` is done (the timer's own output
re-enters at ``PHASE + 1``), which is a barrier between a "reset" flood and a
propagation, for instance; a timer at ``at(e, END)`` fires when the epoch's loop has
quiesced and emits the vertex's net change of the epoch.  The rounds of every epoch
(the exchanges) are counted in ``execution.metrics.rounds(name)``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Optional

import tstate as ts
from tstate.errors import ConfigurationError
from tstate.progress import Product
from tstate.progress.timestamp import MAX_SEQUENCED_EPOCH, SEQUENCE_SPAN, sequenced, sequenced_round

__all__ = ["Change", "sequenced_loop", "at", "round_of", "END", "SPAN", "MAX_EPOCH"]

#: The inner times of epoch ``e`` are ``e * SPAN + round``, ``0 <= round < SPAN``.
SPAN = SEQUENCE_SPAN
#: The round of the per-vertex "epoch finished" timers (larger than any real round).
END = 1 << 31
#: The largest epoch a loop accepts (its inner times must stay below ``TIME_MAX``).
MAX_EPOCH = MAX_SEQUENCED_EPOCH


def at(epoch: int, round: int) -> Product:
    """The loop time of ``round`` of ``epoch`` (see the module docstring)."""
    return sequenced(epoch, round)


def round_of(t: Product) -> int:
    """The round of epoch ``t.outer`` that loop time ``t`` is."""
    return sequenced_round(t)


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
    """The loop's gate: passes each entering record of epoch ``e`` (at ``at(e, 0)``)
    expanded by ``expand``, and the loop variable's messages (plain tuples) straight
    through, so the body needs no ``concat`` and may feed its whole output back;
    ``combine``, if given, replaces the pass-through: it gets the loop variable's
    batches of one time (one activation's worth) and returns the records to pass on;
    ``announce(e)``, if given, adds records at round 0 of every epoch ``e`` that has
    entering records (at least once; possibly once per worker and activation).  Nothing
    is kept between activations."""

    @flow.binary_frontier(entered, feedback, name=name)
    def entrance(new: Any, fb: Any, out: Any, ctx: Any) -> None:
        announced: set[int] = set()
        for cap, batch in new:
            recs = [x for r in batch for x in expand(r)] if expand is not None else batch
            if announce is not None:
                e = cap.time.outer
                if e not in announced:
                    announced.add(e)
                    recs = announce(e) + recs
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
    local_rounds: bool = False,
) -> ts.Stream:
    """An iterate scope over ``stream`` whose epochs run one after another (see the
    module docstring).  ``body(scope, inputs)`` gets the entering records (each
    expanded by ``expand``, if given, at ``at(epoch, 0)``) merged with the loop
    variable, and returns ``(messages, results)``: the plain tuples of ``messages`` go
    around the loop (one round later; anything else on it is dropped, or ``combine``
    turns each round's batches into the records passed on), ``results`` leave it;
    ``announce(e)`` adds records at the start of every epoch with input.  The
    per-epoch sequencing needs the body's state to be a ``@flow.stateful`` operator
    fed by ``inputs`` (it applies a time's records once no earlier time can arrive).

    ``local_rounds=True`` (no ``combine`` or ``announce``): the gate is a ``flat_map``
    and a ``filter`` of the messages, which a ``@flow.stateful(..., local_rounds=True)``
    body can apply itself (:mod:`tstate.plan.local_rounds`): a worker then applies the
    messages to its own bins within the round, and only messages for other workers'
    bins take a round -- the body must not depend on the round a message arrives in
    (within a phase)."""

    def loop(scope: ts.Scope, entered: ts.Stream) -> ts.Stream:
        fb = scope.feedback(name=f"{name}.feedback")
        if local_rounds:
            if combine is not None or announce is not None:
                raise ConfigurationError(f"loop {name!r}: local_rounds needs a gate without combine and announce")
            new = entered.flat_map(expand, name=f"{name}.expand") if expand is not None else entered
            messages = fb.stream.filter(lambda r: r.__class__ is tuple, name=f"{name}.messages")
            inputs = new.concat(messages, name=f"{name}.gate")
        else:
            inputs = _entrance(
                flow, entered, fb.stream, name=f"{name}.gate", expand=expand, combine=combine, announce=announce
            )
        messages, results = body(scope, inputs)
        fb.connect(messages)
        return results

    loop.__name__ = name
    return flow.iterate(stream, name=name, sequenced=True)(loop)  # type: ignore[no-any-return]
