"""The planner and the configuration history against simple reference models: the
batched planner's early stop gives the plain greedy matching's steps, and a history
that keeps changes and key frames answers every query like one that copies the whole
map per step (random maps, schedules, overlapping commands, more steps than a key
frame holds)."""

from __future__ import annotations

import bisect
import time
from typing import Sequence

from hypothesis import given
from hypothesis import strategies as st

from tstate.migration.configuration import KEYFRAME, ConfigHistory
from tstate.migration.planner import balanced_map, plan, rescale_map


def greedy_reference(current: Sequence[int], target: Sequence[int]) -> list[dict[int, int]]:
    """Maximal matchings in bin order, every remaining move looked at in every step."""
    remaining = [(b, current[b], target[b]) for b in range(len(current)) if current[b] != target[b]]
    steps = []
    while remaining:
        senders: set[int] = set()
        receivers: set[int] = set()
        step: dict[int, int] = {}
        rest = []
        for b, src, dst in remaining:
            if src not in senders and dst not in receivers:
                senders.add(src)
                receivers.add(dst)
                step[b] = dst
            else:
                rest.append((b, src, dst))
        steps.append(step)
        remaining = rest
    return steps


class HistoryReference:
    """The map after every step, copied whole."""

    def __init__(self, initial: list[int]) -> None:
        self.initial = list(initial)
        self.steps: list[tuple[int, dict[int, int]]] = []

    def schedule(self, time: int, steps: list[dict[int, int]], spacing: int) -> None:
        self.steps = [(t, s) for t, s in self.steps if t < time]
        self.steps += [(time + i * spacing, dict(s)) for i, s in enumerate(steps)]

    def maps(self) -> tuple[list[int], list[list[int]]]:
        times: list[int] = []
        maps: list[list[int]] = []
        cur = list(self.initial)
        for t, step in sorted(self.steps, key=lambda p: p[0]):
            cur = list(cur)
            for b, w in step.items():
                cur[b] = w
            if times and times[-1] == t:
                maps[-1] = cur
            else:
                times.append(t)
                maps.append(cur)
        return times, maps

    def owners_at(self, t: int) -> list[int]:
        times, maps = self.maps()
        i = bisect.bisect_right(times, t)
        return maps[i - 1] if i else self.initial

    def moves(self) -> list[tuple[int, int, int, int]]:
        times, maps = self.maps()
        out = []
        prev = self.initial
        for t, cur in zip(times, maps):
            out += [(t, b, a, c) for b, (a, c) in enumerate(zip(prev, cur)) if a != c]
            prev = cur
        return out


maps = st.integers(1, 6).flatmap(
    lambda w: st.tuples(st.just(w), st.lists(st.integers(0, w - 1), min_size=1, max_size=64))
)


@given(maps, st.integers(1, 8))
def test_batched_plan_is_the_greedy_matching(m, workers) -> None:
    _, current = m
    target = rescale_map(current, workers)
    steps = plan(current, target, "batched")
    assert steps == greedy_reference(current, target)
    done = list(current)
    for step in steps:
        assert len({current[b] for b in step}) == len(step) == len(set(step.values()))
        for b, w in step.items():
            done[b] = w
    assert done == target


step_lists = st.lists(st.dictionaries(st.integers(0, 15), st.integers(0, 3), max_size=4), max_size=KEYFRAME + 10)
commands = st.lists(st.tuples(st.integers(0, 200), step_lists, st.integers(1, 3)), min_size=1, max_size=4)


@given(st.lists(st.integers(0, 3), min_size=16, max_size=16), commands)
def test_history_answers_like_whole_map_copies(initial, cmds) -> None:
    h, ref = ConfigHistory(initial), HistoryReference(initial)
    for at, steps, spacing in cmds:
        assert h.schedule(at, steps, spacing) == [at + i * spacing for i in range(len(steps))]
        ref.schedule(at, steps, spacing)
        last = max([t for t, _ in ref.steps], default=0)
        for t in [*range(-1, last + 2), *range(last + 1, -2, -7)]:  # forwards, then jumping back
            assert h.owners_at(t) == ref.owners_at(t), t
        assert h.moves() == ref.moves()
        assert h.final() == ref.owners_at(last + 1)
        for w in range(4):
            assert h.moves_from(w) == [(t, b, c) for t, b, a, c in ref.moves() if a == w]


def test_planning_thousands_of_steps_is_not_a_pause() -> None:
    """Rescaling 4,096 bins 4 -> 8 in one-bin steps (2,048 of them) is planned in a
    few milliseconds of the processing thread, not steps x bins."""
    h = ConfigHistory(balanced_map(4096, 4))
    target = rescale_map(h.initial, 8)
    t0 = time.process_time()
    for strategy in ("fluid", "batched"):
        h.schedule(10, [])  # the newest command wins, planned from the map at its time
        times = h.schedule(10, plan(h.owners_at(10), target, strategy))
        assert len(times) == (2048 if strategy == "fluid" else 512)
        moves = [h.moves_from(w) for w in range(8)]
        assert sum(map(len, moves)) == 2048
        assert h.owners_at(times[-1]) == target
    assert time.process_time() - t0 < 0.5  # was ~2 s (a whole map per step, per worker)


def rescale_reference(current: Sequence[int], workers: int) -> list[int]:
    """Bins stay on remaining workers under their share; each other bin, in bin order,
    goes to the worker furthest under its share (lowest index on ties)."""
    bins = len(current)
    base, extra = divmod(bins, workers)
    quota = [base + (1 if w < extra else 0) for w in range(workers)]
    load = [0] * workers
    out = [-1] * bins
    for b, w in enumerate(current):
        if w < workers and load[w] < quota[w]:
            out[b], load[w] = w, load[w] + 1
    for b in range(bins):
        if out[b] < 0:
            w = min(range(workers), key=lambda x: (load[x] - quota[x], x))
            out[b], load[w] = w, load[w] + 1
    return out


@given(maps, st.integers(1, 9))
def test_rescale_map_is_the_greedy_reference(m, workers) -> None:
    _, current = m
    assert rescale_map(current, workers) == rescale_reference(current, workers)
