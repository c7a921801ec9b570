"""Run bookkeeping: applying the outcomes of one event's transitions to a key's
partial matches ("runs", see :mod:`apps.cep.state`).

:func:`step_runs` moves the partial matches that the event changes (the ``changes``
of :meth:`TransitionEvaluator.evaluate <apps.cep.transitions.TransitionEvaluator.evaluate>`)
and :func:`start_runs` starts the partial matches that begin at the event; both store
the event in the shared buffer when it is accepted, keep the buffer's reference counts
(:mod:`apps.cep.buffer`), and append the matches the event completes to
``potentials`` as ``(node id, start time, start event id, event id)``, for the
emission (:mod:`apps.cep.emission`).  Runs stay ordered by start.
"""

from __future__ import annotations

from typing import Any

from apps.cep.buffer import release
from apps.cep.nfa import EMPTY, MOVE1, TAKE1, Leaf
from apps.cep.state import KeyState

__all__ = ["apply_leaf", "start_runs", "step_runs"]


def step_runs(
    state: KeyState,
    runs: list[Any],
    changes: list[tuple[int, Leaf]],
    event: Any,
    timestamp: Any,
    eid: int,
    potentials: list,
) -> list[Any]:
    """Apply ``changes`` (index in ``runs``, leaf) for event ``eid``; return the key's
    runs (``state.runs``, a new list when partial matches died or split)."""
    # list[Any]: a slot of ``runs`` briefly holds None (the partial match died) or a
    # list of the partial matches it turned into, until the reshape
    nodes = state.nodes
    erefs = state.refs
    reshape = False
    for i, leaf in changes:
        run = runs[i]
        kind = leaf.kind
        if kind == TAKE1:
            # the run's reference on its node moves to the new node
            if eid in erefs:
                erefs[eid] += 1
            else:
                erefs[eid] = 1
                state.events[eid] = event
                state.times[eid] = timestamp
            nn = state.next_node
            state.next_node = nn + 1
            refs = 0
            if leaf.target >= 0:
                runs[i] = (leaf.target, nn, run[2], run[3], eid)
                refs = 1
            else:
                runs[i] = None
                reshape = True
            if leaf.completes:
                potentials.append((nn, run[2], run[3], eid))
                refs += 1
            nodes[nn] = [eid, leaf.stage, run[1], refs]
        elif kind == MOVE1:
            runs[i] = (leaf.target, run[1], run[2], run[3], run[4])
        elif kind == EMPTY:  # the partial match dies
            release(state, run[1])
            runs[i] = None
            reshape = True
        else:
            produced = apply_leaf(state, run, leaf, event, timestamp, eid, potentials)
            if len(produced) == 1:
                runs[i] = produced[0]
            else:
                runs[i] = produced if produced else None
                reshape = True
    if reshape:
        state.runs = runs = _reshaped(runs)
    return runs


def _reshaped(runs: list[Any]) -> list[Any]:
    """``runs`` without the partial matches that died (None), those that split (a
    list) replaced by their parts, in order."""
    new_runs = []
    for r in runs:
        if r is None:
            continue
        if r.__class__ is list:
            new_runs.extend(r)
        else:
            new_runs.append(r)
    return new_runs


def start_runs(
    state: KeyState,
    runs: list[Any],
    start_leaf: Leaf,
    event: Any,
    timestamp: Any,
    eid: int,
    potentials: list,
) -> None:
    """Start the partial matches that begin at event ``eid`` (the start state's
    ``start_leaf``, which has ops), appending them to ``runs``."""
    if start_leaf.kind == TAKE1 and start_leaf.target >= 0:
        erefs = state.refs
        if eid in erefs:
            erefs[eid] += 1
        else:
            erefs[eid] = 1
            state.events[eid] = event
            state.times[eid] = timestamp
        nn = state.next_node
        state.next_node = nn + 1
        runs.append((start_leaf.target, nn, timestamp, eid, eid))
        if start_leaf.completes:
            potentials.append((nn, timestamp, eid, eid))
            state.nodes[nn] = [eid, start_leaf.stage, -1, 2]
        else:
            state.nodes[nn] = [eid, start_leaf.stage, -1, 1]
    else:
        start_run = (-1, -1, timestamp, eid, -1)
        runs.extend(apply_leaf(state, start_run, start_leaf, event, timestamp, eid, potentials))


def apply_leaf(
    st: KeyState,
    run: tuple,
    leaf: Leaf,
    event: Any,
    ts: Any,
    eid: int,
    potentials: list,
) -> list[tuple]:
    """Carry out the ops of ``leaf`` for partial match ``run`` (node -1: the start
    state, whose new partial matches start at this event); return the partial
    matches it turns into (in order)."""
    _, node, start_t, start_id, last = run
    nodes = st.nodes
    produced: list[tuple] = []
    created: list[int] = []
    for op in leaf.ops:
        kind = op[0]
        if kind == "ignore":
            produced.append((op[1], node, start_t, start_id, last))
            nodes[node][3] += 1
        elif kind == "final":
            potentials.append((node, start_t, start_id, eid))
            nodes[node][3] += 1
        else:
            _, stage, target, completes, pending = op
            if eid in st.refs:
                st.refs[eid] += 1
            else:
                st.refs[eid] = 1
                st.events[eid] = event
                st.times[eid] = ts
            nn = st.next_node
            st.next_node = nn + 1
            rec = [eid, stage, node, 0]
            nodes[nn] = rec
            if node >= 0:
                nodes[node][3] += 1
            created.append(nn)
            if target >= 0:
                produced.append((target, nn, start_t, start_id, eid))
                rec[3] += 1
            if pending >= 0:
                produced.append((pending, nn, start_t, start_id, eid))
                rec[3] += 1
            if completes:
                potentials.append((nn, start_t, start_id, eid))
                rec[3] += 1
    return _settle(st, node, produced, created, leaf.stop)


def _settle(st: KeyState, node: int, produced: list[tuple], created: list[int], stop: bool) -> list[tuple]:
    """The end of :func:`apply_leaf`: drop the partial matches ``produced`` when the leaf
    stops them, free the nodes ``created`` that nothing refers to, and give back the
    reference the partial match held on its ``node``."""
    if stop:
        for r in produced:
            release(st, r[1])
        produced = []
    nodes = st.nodes
    for nn in created:  # a node nothing refers to (cannot happen; be safe)
        made = nodes.get(nn)
        if made is not None and made[3] == 0:
            made[3] = 1
            release(st, nn)
    if node >= 0:
        release(st, node)
    return produced
