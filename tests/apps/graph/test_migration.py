"""The graph analytics across live migrations: random worker counts and random
schedules of reconfigurations (``Rescale`` to 1-8 workers, ``MoveBins`` of random bins,
every strategy, at random epochs; planned and issued while the dataflow runs) leave
every epoch's results equal to networkx -- and to a run that never moved.

Some tests move only the root scope's operators (the edge counts, and with one block,
the default, every algorithm's state; with more, degrees and the global summaries), the
others every operator, including the per-vertex state of components, PageRank and
triangles inside iterate scopes with ``blocks > 1`` (moved at epoch boundaries).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tstate as ts
from apps.graph.stream import ALGORITHMS
from tests.apps.graph.helpers import (
    exact_changes,
    pagerank_close,
    per_operator,
    real_graphs,
    run_checked,
    stateful_operators,
    stream_of,
)
from tstate.migration.commands import STRATEGIES

BINS = 16  # few bins, so random moves hit bins that hold state
ROOT = stateful_operators(root_only=True)

vertices = st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", "c", "d"]))
updates = st.lists(st.tuples(vertices, vertices, st.sampled_from([1, 1, 1, 2, -1, -1])), max_size=8)
graph_epochs = st.lists(updates, min_size=2, max_size=6).map(lambda es: list(enumerate(es)))
strategy = st.sampled_from(STRATEGIES)
command = st.one_of(
    st.builds(ts.Rescale, st.integers(1, 8), strategy=strategy),
    st.builds(ts.MoveBins, st.dictionaries(st.integers(0, BINS - 1), st.integers(0, 7), min_size=1, max_size=6), strategy=strategy),
)
schedule = st.lists(st.tuples(st.integers(0, 7), command), min_size=1, max_size=3)
live_commands = st.dictionaries(st.integers(0, 5), command, max_size=2)


def run_moving(epochs, workers, planned=(), live=None, algorithms=ALGORITHMS, names=ROOT, window=None, blocks=1):
    """``run_checked`` (networkx at every epoch) with ``planned`` commands given at the
    start and ``live`` ones (epoch -> command) issued as the epochs are sent, each
    applied to the operators ``names`` (``None``: every stateful operator)."""
    live = {t: [c for _, c in per_operator([(t, cmd)], names)] for t, cmd in (live or {}).items()}
    return run_checked(
        epochs, workers, algorithms, window=window, tol=1e-7, live=live,
        bins=BINS, max_workers=8, reconfigure=per_operator(planned, names), blocks=blocks,
    )


@settings(max_examples=15)
@given(epochs=graph_epochs, workers=st.integers(1, 8), planned=schedule, window=st.sampled_from([None, 2]))
def test_random_planned_migrations_equal_networkx(epochs, workers, planned, window):
    run_moving(epochs, workers, planned, window=window)


@settings(max_examples=15)
@given(epochs=graph_epochs, workers=st.integers(1, 8), planned=schedule, live=live_commands)
def test_random_live_migrations_of_the_degrees_dataflow(epochs, workers, planned, live):
    """Degrees have no loop: every operator moves, planned and while running."""
    algs = ("degrees",)
    moved = run_moving(epochs, workers, planned, live, algorithms=algs, names=None, window=2)
    assert exact_changes(moved) == exact_changes(run_checked(epochs, workers, algs, window=2, bins=BINS))


def random_graph_epochs(rng: random.Random, epochs: int = 5) -> list[tuple[int, list[tuple[object, object, int]]]]:
    vs = list(range(7)) + ["a", "b", "c", "d"]
    return [(t, [(rng.choice(vs), rng.choice(vs), rng.choice([1, 1, 1, 2, -1, -1])) for _ in range(rng.randint(0, 8))]) for t in range(epochs)]


@pytest.mark.parametrize("seed", range(3))
def test_random_migrations_of_every_operator(seed):
    # (seeded, not hypothesis: no shrinking, nor patch files, while it is expected to fail)
    rng = random.Random(seed)
    epochs = random_graph_epochs(rng)
    live = {t: cmd for t, cmd in random_schedule(rng, len(epochs))[:2]}
    run_moving(epochs, rng.randint(1, 8), random_schedule(rng, len(epochs)), live, names=None, blocks=1 + 2 * (seed % 2))


def random_schedule(rng: random.Random, epochs: int) -> list[tuple[int, object]]:
    out = []
    for t in sorted(rng.sample(range(1, epochs), 3)):
        s = rng.choice(STRATEGIES)
        if rng.random() < 0.5:
            out.append((t, ts.Rescale(rng.randint(1, 8), strategy=s)))
        else:
            moves = {b: rng.randrange(8) for b in rng.sample(range(BINS), rng.randint(1, BINS // 2))}
            out.append((t, ts.MoveBins(moves, strategy=s)))
    return out


def check_real_graph(name: str, names, blocks: int = 1) -> None:
    rng = random.Random(f"migrate-{name}")
    epochs = stream_of(list(real_graphs()[name].edges()), rng, epochs=6, delete=0.3)
    workers = rng.randint(1, 4)
    planned = random_schedule(rng, len(epochs))
    moved = run_moving(epochs, workers, planned, names=names, blocks=blocks)
    assert run_checked.last.execution.metrics.moves, "the schedule moved no bin"
    still = run_checked(epochs, workers, tol=1e-7, bins=BINS, blocks=blocks)
    assert exact_changes(moved) == exact_changes(still)
    pagerank_close(moved, still)


@pytest.mark.parametrize("name", sorted(real_graphs()))
def test_real_graphs_across_random_migrations(name):
    check_real_graph(name, ROOT)


@pytest.mark.parametrize("blocks", [1, 3])
def test_real_graph_across_migrations_of_every_operator(blocks):
    """With one block every algorithm's state is one key of the root scope; with more,
    the per-vertex state inside iterate scopes moves too (at epoch boundaries)."""
    check_real_graph("karate", None, blocks)
