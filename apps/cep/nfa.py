"""Compile a :class:`~apps.cep.pattern.Pattern` into an NFA, and each NFA state into a
decision tree the engine walks per (partial match, event).

The construction follows Flink's ``NFACompiler`` (states with TAKE / IGNORE / PROCEED
edges, built backwards from the final state; "ignore" twin states so that a branch
leaving a stage is created exactly once; STOP states for negative stages; a PENDING
state for a trailing ``not_followed_by``; greedy stages restricting the transitions of
the state after them).  Differences from Flink, all deliberate:

* the "ignore" twins of the optional tail states of ``times(n, m)`` (the states after
  the stage's ``n``-th event) get the stop edges of the ``not_followed_by`` *after* the
  stage, like the states of a looping stage -- Flink gives them those of the
  ``not_followed_by`` *before* the stage instead, so a forbidden event is tolerated
  while the stage waits for its next event, and a negation whose zone ended with the
  stage's first event still kills the partial match;
* a partial match enters the PENDING state of a trailing ``not_followed_by`` as soon as
  it takes the last event of the stage before it, even when that stage is looping (Flink
  only moves it there on the next event, so a loop followed by silence until the window
  closes yields a timeout instead of a match).

The decision tree of a state evaluates each predicate (a stage's condition, its stop
condition, a negative stage's condition) at most once, lazily, in the order Flink's
depth-first search over the edges would -- skipping those whose value cannot change
the outcome -- and ends in a :class:`Leaf` listing what to do.  (Conditions must be
pure: which of them run, and how often, is an implementation detail.)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from attrs import define, field

from apps.cep.conditions import Condition
from apps.cep.pattern import Contiguity, Pattern, StageKind

__all__ = [
    "FINAL",
    "NFA",
    "NORMAL",
    "PENDING",
    "STOP",
    "Leaf",
    "NState",
    "Predicate",
    "compile_pattern",
]

NORMAL, FINAL, STOP, PENDING = "normal", "final", "stop", "pending"
IDENTITY, TAKE1, MOVE1, EMPTY, GENERAL = 0, 1, 2, 3, 4
TAKE, IGNORE, PROCEED = "take", "ignore", "proceed"

# A condition expression over predicates: None (true), an int (predicate id), or
# ("not", x) / ("and", x, y) / ("or", x, y).
Expr = None | int | tuple


def _and(a: Expr, b: Expr) -> Expr:
    if a is None:
        return b
    if b is None:
        return a
    return ("and", a, b)


def _not(a: Expr) -> Expr:
    return ("not", a)


@define(eq=False)
class Predicate:
    """A stage's condition (``what`` = "condition"), stop condition ("until") or a
    negative stage's condition ("negation")."""

    id: int
    stage: str
    what: str
    cond: Condition


@define(eq=False)
class Transition:
    action: str
    source: NState
    target: NState
    cond: Expr


@define(eq=False)
class NState:
    id: int
    name: str  # the stage name ("$final$" for the final state)
    kind: str
    stage: int  # index of the stage in the pattern, -1 for the final state
    transitions: list[Transition] = field(factory=list)

    def add(self, action: str, target: NState, cond: Expr) -> None:
        self.transitions.append(Transition(action, self, target, cond))


@define(eq=False)
class Leaf:
    """The outcome of a decision tree for one (partial match, event).

    ``ops``: ``("take", stage, target_state_id, completes, pending_state_id)`` -- store the
    event for ``stage`` and continue in ``target`` (``completes``: a match ends here;
    ``pending_state_id`` >= 0: also wait in that PENDING state); ``("ignore",
    target_state_id)`` -- keep the partial match, now in ``target``; ``("final",)`` -- the
    partial match is a match as it is (an IGNORE edge into the final state).
    ``stop``: a negative stage matched -- every continuation of this partial match is
    dropped (matches completed by this very event are kept, as in Flink).
    ``identity``: the only op is "ignore into the same state" (nothing changes).
    ``kind`` classifies the leaf for the engine's fast paths: :data:`IDENTITY`,
    :data:`TAKE1` (a single take into ``target``, no stop), :data:`MOVE1` (a single
    ignore into another state ``target``), :data:`EMPTY` (nothing: the partial match
    dies) or :data:`GENERAL`; ``stage``/``target``/``completes``/``pending`` describe the
    single op of TAKE1/MOVE1 leaves."""

    ops: tuple[tuple[Any, ...], ...]
    stop: bool
    identity: bool = False
    kind: int = 4
    stage: int = -1
    target: int = -1
    completes: bool = False
    pending: int = -1


# Tree: a Leaf, or a tuple (fn, takes_ctx, predicate, if_false, if_true).
Tree = Leaf | tuple


class _Need(Exception):
    def __init__(self, pred: int) -> None:
        self.pred = pred


def _eval(expr: Expr, assign: dict[int, bool]) -> bool:
    if expr is None:
        return True
    if isinstance(expr, int):
        if expr not in assign:
            raise _Need(expr)
        return assign[expr]
    op = expr[0]
    if op == "not":
        return not _eval(expr[1], assign)
    if op == "and":
        return _eval(expr[1], assign) and _eval(expr[2], assign)
    return _eval(expr[1], assign) or _eval(expr[2], assign)


@define(eq=False)
class NFA:
    """The compiled automaton: states (by id), predicates, decision trees, window."""

    pattern: Pattern
    states: list[NState]
    start: NState
    final: NState
    predicates: list[Predicate]
    trees: list[Tree] = field(factory=list)
    # set by the compiler once the NFA exists (a tree refers to it); until then a leaf
    # with no ops (no partial match starts)
    start_tree: Tree = field(factory=lambda: Leaf((), False, False, EMPTY))
    kinds: list[str] = field(factory=list)
    # the pattern's window as given (the Matcher converts a timedelta to the timestamps' unit)
    window: float | dt.timedelta | None = None
    stage_names: tuple[str, ...] = ()

    def describe(self) -> str:
        """A human-readable listing of the states and their edges."""

        def ex(e: Expr) -> str:
            if e is None:
                return "true"
            if isinstance(e, int):
                p = self.predicates[e]
                return f"{p.what}[{p.stage}]"
            if e[0] == "not":
                return f"!{ex(e[1])}"
            return f"({ex(e[1])} {'&' if e[0] == 'and' else '|'} {ex(e[2])})"

        lines = []
        for s in self.states:
            tag = " (start)" if s is self.start else ""
            lines.append(f"{s.id}: {s.name} [{s.kind}]{tag}")
            for t in s.transitions:
                lines.append(
                    f"    {t.action} -> {t.target.id} ({t.target.name}) if {ex(t.cond)}"
                )
        return "\n".join(lines)


class _Compiler:
    """Builds the NFA backwards, like Flink's ``NFAFactoryCompiler``."""

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.stages = pattern.stages
        self.states: list[NState] = []
        self.predicates: list[Predicate] = []
        self.take_pred: dict[int, int] = {}
        self.until_pred: dict[int, int] = {}
        self.stop_states: dict[str, NState] = {}
        self.original_state: dict[
            int, NState
        ] = {}  # greedy+until: sink id -> unrestricted copy
        for i, st in enumerate(self.stages):
            if st.condition is not None:
                what = "negation" if st.negative else "condition"
                self.take_pred[i] = self._pred(st.name, what, st.condition)
            if st.until is not None:
                self.until_pred[i] = self._pred(st.name, "until", st.until)

    def _pred(self, stage: str, what: str, cond: Condition) -> int:
        p = Predicate(len(self.predicates), stage, what, cond)
        self.predicates.append(p)
        return p.id

    def state(self, name: str, kind: str, stage: int) -> NState:
        s = NState(len(self.states), name, kind, stage)
        self.states.append(s)
        return s

    # ---- conditions ----------------------------------------------------------
    def take_cond(self, i: int) -> Expr:
        """The stage's condition (None = accepts every event)."""
        return self.take_pred.get(i)

    def take_until(self, i: int) -> Expr:
        """The take condition extended with NOT until."""
        t = self.take_cond(i)
        if i in self.until_pred:
            return _and(_not(self.until_pred[i]), t)
        return t

    def _ignore(self, i: int, strategy: Contiguity) -> tuple[bool, Expr]:
        """(has an ignore edge, its condition) for a consuming strategy."""
        if strategy is Contiguity.STRICT:
            return False, None
        if strategy is Contiguity.RELAXED:
            t = self.take_cond(i)
            # NOT(true) is false: an ignore edge that never fires.
            return True, ("not", t) if t is not None else ("not", None)
        return True, None

    def inner_ignore(self, i: int) -> tuple[bool, Expr]:
        has, cond = self._ignore(i, self.stages[i].inner)
        if has and i in self.until_pred:
            cond = _and(_not(self.until_pred[i]), cond)
        return has, cond

    def outer_ignore(self, i: int) -> tuple[bool, Expr]:
        return self._ignore(i, self.stages[i].contiguity)

    # ---- negations -------------------------------------------------------------
    def current_nots(self, i: int) -> list[tuple[Expr, str]]:
        """not_followed_by stages that still constrain stage ``i``: walking back over
        optional and not_followed_by stages (Flink's ``getCurrentNotCondition``), as
        (condition, stage name); the condition is None for a stage without one."""
        out: list[tuple[Expr, str]] = []
        j = i
        while j - 1 >= 0 and (
            (self.stages[j - 1].optional and not self.stages[j - 1].negative)
            or self.stages[j - 1].kind is StageKind.NOT_FOLLOWED_BY
        ):
            j -= 1
            if self.stages[j].kind is StageKind.NOT_FOLLOWED_BY:
                out.append((self.take_pred.get(j), self.stages[j].name))
        return out

    def stop_state(self, cond: Expr, name: str, stage: int) -> NState:
        s = self.stop_states.get(name)
        if s is None:
            s = self.state(name, STOP, stage)
            s.add(TAKE, s, cond)
            self.stop_states[name] = s
        return s

    def add_stop_states(self, st: NState, i: int) -> None:
        for cond, name in self.current_nots(i):
            j = self.pattern.names.index(name)
            st.add(PROCEED, self.stop_state(cond, name, j), cond)

    def add_stop_to_looping(self, st: NState, i: int) -> None:
        if (
            i + 1 < len(self.stages)
            and self.stages[i + 1].kind is StageKind.NOT_FOLLOWED_BY
        ):
            cond = self.take_pred.get(i + 1)
            st.add(PROCEED, self.stop_state(cond, self.stages[i + 1].name, i + 1), cond)

    def copy_without_transitive_nots(
        self, sink: NState, i: int, memo: dict | None = None
    ) -> NState:
        nots = self.current_nots(i)
        if not nots or not self.stages[i].optional:
            return sink
        if memo is None:
            memo = {}
        if sink.id in memo:
            return memo[sink.id]
        names = {n for _, n in nots}
        copy = self.state(sink.name, sink.kind, sink.stage)
        memo[sink.id] = copy
        for t in sink.transitions:
            if t.action == PROCEED:
                target = t.target
                if target.kind == STOP:
                    if target.name in names:
                        continue
                else:
                    target = self.copy_without_transitive_nots(target, i, memo)
                copy.add(PROCEED, target, t.cond)
            else:
                copy.add(t.action, copy if t.target is sink else t.target, t.cond)
        return copy

    def copy(self, st: NState) -> NState:
        c = self.state(st.name, st.kind, st.stage)
        for t in st.transitions:
            c.add(t.action, c if t.target is st else t.target, t.cond)
        return c

    @staticmethod
    def restrict_greedy(st: NState, take: Expr) -> None:
        """The state after a greedy stage cannot take, skip or leave on an event the
        greedy stage would take (Flink's ``updateWithGreedyCondition``)."""
        for t in st.transitions:
            t.cond = _and(t.cond, _not(take)) if take is not None else ("not", None)

    # ---- states of one stage ---------------------------------------------------------
    def singleton(
        self,
        i: int,
        sink: NState,
        proceed: NState | None,
        take: Expr,
        ignore: tuple[bool, Expr],
        optional: bool,
        inner: bool = False,
    ) -> NState:
        st = self.stages[i]
        s = self.state(st.name, NORMAL, i)
        target = self.copy_without_transitive_nots(sink, i)
        s.add(TAKE, target, take)
        if optional:
            assert proceed is not None
            if st.greedy and i in self.until_pred and proceed.id in self.original_state:
                u = self.until_pred[i]
                s.add(PROCEED, self.original_state[proceed.id], u)
                s.add(PROCEED, proceed, _not(u))
            else:
                s.add(PROCEED, proceed, None)
        has_ignore, icond = ignore
        if has_ignore:
            if optional:
                ign = self.state(st.name, NORMAL, i)
                ign.add(TAKE, target, take)
                ign.add(IGNORE, ign, icond)
                if inner:
                    # Deviation (see the module docstring): like the twin of a looping
                    # state, the twin of an optional tail state of times(n, m) obeys the
                    # not_followed_by after the stage, not the one before it.
                    self.add_stop_to_looping(ign, i)
                else:
                    self.add_stop_states(ign, i)
            else:
                ign = s
            s.add(IGNORE, ign, icond)
        return s

    def times_states(
        self, i: int, sink: NState, proceed: NState, lo: int, hi: int
    ) -> NState:
        st = self.stages[i]
        take = self.take_until(i)
        inner_ign = self.inner_ignore(i)
        if st.greedy and lo != hi:
            if i in self.until_pred:
                self.original_state[sink.id] = self.copy(sink)
            self.restrict_greedy(sink, take)
        last = sink
        for _ in range(lo, hi):
            last = self.singleton(i, last, proceed, take, inner_ign, True, inner=True)
            self.add_stop_to_looping(last, i)
        for _ in range(lo - 1):
            last = self.singleton(i, last, None, take, inner_ign, False)
            self.add_stop_to_looping(last, i)
        return self.singleton(i, last, proceed, take, self.outer_ignore(i), st.optional)

    def looping_state(self, i: int, sink: NState) -> NState:
        st = self.stages[i]
        take = self.take_until(i)
        has_ign, icond = self.inner_ignore(i)
        loop = self.state(st.name, NORMAL, i)
        if st.greedy:
            if i in self.until_pred:
                u = self.until_pred[i]
                c = self.copy(sink)
                loop.add(PROCEED, c, u)
                self.original_state[sink.id] = c
                loop.add(PROCEED, sink, _not(u))
            else:
                loop.add(PROCEED, sink, None)
            self.restrict_greedy(sink, self.take_cond(i))
        else:
            loop.add(PROCEED, sink, None)
        loop.add(TAKE, loop, take)
        self.add_stop_to_looping(loop, i)
        if has_ign:
            ign = self.state(st.name, NORMAL, i)
            ign.add(TAKE, loop, take)
            ign.add(IGNORE, ign, icond)
            loop.add(IGNORE, ign, icond)
            self.add_stop_to_looping(ign, i)
        return loop

    def convert(self, i: int, sink: NState) -> NState:
        st = self.stages[i]
        if st.looping:
            loop = self.looping_state(i, self.copy_without_transitive_nots(sink, i))
            first = self.times_states(i, loop, sink, st.min_times, st.min_times)
        elif st.quantified:
            assert st.max_times is not None
            first = self.times_states(i, sink, sink, st.min_times, st.max_times)
        else:
            first = self.singleton(
                i, sink, sink, self.take_cond(i), self.outer_ignore(i), st.optional
            )
        self.add_stop_states(first, i)
        return first

    def compile(self) -> NFA:
        self.pattern.validate()
        stages = self.stages
        final = self.state("$final$", FINAL, -1)
        sink = final
        for i in range(len(stages) - 1, 0, -1):
            st = stages[i]
            if st.kind is StageKind.NOT_FOLLOWED_BY:
                if sink is final:
                    cond = self.take_pred.get(i)
                    pend = self.state(st.name, PENDING, i)
                    pend.add(PROCEED, self.stop_state(cond, st.name, i), cond)
                    pend.add(
                        IGNORE, pend, _not(cond) if cond is not None else ("not", None)
                    )
                    sink = pend
                # otherwise: converted into stop edges of the states around it
            elif st.kind is StageKind.NOT_NEXT:
                cond = self.take_pred.get(i)
                nn = self.state(st.name, NORMAL, i)
                stop = self.stop_state(cond, st.name, i)
                ncond = _not(cond) if cond is not None else ("not", None)
                if sink is final:
                    nn.add(IGNORE, final, ncond)
                else:
                    nn.add(PROCEED, sink, ncond)
                nn.add(PROCEED, stop, cond)
                sink = nn
            else:
                sink = self.convert(i, sink)
        start = self.convert(0, sink)
        nfa = NFA(
            pattern=self.pattern,
            states=self.states,
            start=start,
            final=final,
            predicates=self.predicates,
            window=self.pattern.window,
            stage_names=self.pattern.names,
        )
        nfa.kinds = [s.kind for s in self.states]
        nfa.trees = [_tree(nfa, s, False) for s in self.states]
        nfa.start_tree = _tree(nfa, start, True)
        return nfa


def _reaches(st: NState, kind: str, assign: dict[int, bool]) -> NState | None:
    """Flink's ``findFinalStateAfterProceed``: follow PROCEED edges whose conditions hold
    (on the event just taken) and return the first state of ``kind`` reached."""
    stack = [st]
    seen = set()
    while stack:
        cur = stack.pop()
        if cur.id in seen:
            continue
        seen.add(cur.id)
        for t in cur.transitions:
            if t.action == PROCEED and _eval(t.cond, assign):
                if t.target.kind == kind:
                    return t.target
                stack.append(t.target)
    return None


def _leaf(nfa: NFA, state: NState, is_start: bool, assign: dict[int, bool]) -> Leaf:
    """Simulate Flink's ``createDecisionGraph`` + ``computeNextStates`` for one
    assignment of predicate values; raises _Need for a predicate not yet assigned."""
    edges: list[Transition] = []
    stack = [state]
    while stack:
        cur = stack.pop()
        for t in cur.transitions:
            if _eval(t.cond, assign):
                if t.action == PROCEED:
                    stack.append(t.target)
                else:
                    edges.append(t)
    ops: list[tuple[Any, ...]] = []
    stop = False
    for t in edges:
        if t.action == IGNORE:
            if is_start:
                continue  # the start state never ignores (Flink)
            if t.target.kind == FINAL:
                ops.append(("final",))
            elif t.target.kind == PENDING and state.kind != PENDING:
                continue  # entered at take time instead (see the module docstring)
            else:
                ops.append(("ignore", t.target.id))
        else:  # TAKE
            if t.target.kind == STOP:
                stop = True
                continue
            completes = (
                t.target.kind == FINAL or _reaches(t.target, FINAL, assign) is not None
            )
            pending = -1
            if t.target.kind == PENDING:
                pending = t.target.id
                target = -1
            elif t.target.kind == FINAL:
                target = -1
            else:
                target = t.target.id
                p = _reaches(t.target, PENDING, assign)
                if p is not None:
                    pending = p.id
            ops.append(("take", t.source.stage, target, completes, pending))
    identity = not stop and len(ops) == 1 and ops[0] == ("ignore", state.id)
    if identity:
        return Leaf(tuple(ops), stop, True, IDENTITY)
    if not ops and not stop:
        return Leaf((), False, False, EMPTY)
    if len(ops) == 1 and not stop:
        op = ops[0]
        if op[0] == "take" and op[4] < 0:
            return Leaf(tuple(ops), False, False, TAKE1, op[1], op[2], op[3], -1)
        if op[0] == "ignore":
            return Leaf(tuple(ops), False, False, MOVE1, -1, op[1])
    return Leaf(tuple(ops), stop, False, GENERAL)


def _same(a: Tree, b: Tree) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a[2] is b[2] and _same(a[3], b[3]) and _same(a[4], b[4])
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        return a.ops == b.ops and a.stop == b.stop
    return False


def _tree(nfa: NFA, state: NState, is_start: bool) -> Tree:
    preds = nfa.predicates

    def build(assign: dict[int, bool]) -> Tree:
        try:
            return _leaf(nfa, state, is_start, assign)
        except _Need as need:
            p = preds[need.pred]
            f = build({**assign, need.pred: False})
            t = build({**assign, need.pred: True})
            if _same(f, t):
                return f  # the outcome does not depend on this condition: skip it
            return (p.cond.fn, p.cond.takes_ctx, p, f, t)

    return build({})


def compile_pattern(pattern: Pattern) -> NFA:
    """Validate and compile ``pattern`` (raises :class:`~apps.cep.errors.PatternError`)."""
    if not isinstance(pattern, Pattern):
        from apps.cep.errors import PatternError

        raise PatternError(f"expected a Pattern, got {pattern!r}")
    return _Compiler(pattern).compile()
