"""Every algorithm equals networkx, computed from scratch, at every epoch.

On networkx's bundled real graphs streamed in random orders with random deletions,
on random graphs (hypothesis), with sliding windows, and on 1 to 8 workers.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.graph.stream import ALGORITHMS
from tests.apps.graph.helpers import (
    exact_changes,
    pagerank_close,
    real_graphs,
    run_all_at_once,
    run_checked,
    stream_of,
)
from tests.apps.graph.oracle import PR_TOL, EdgeMultiset

GRAPHS = real_graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_real_graphs_streamed_with_deletions(name):
    rng = random.Random(name)
    epochs = stream_of(list(GRAPHS[name].edges()), rng, epochs=6)
    run_checked(epochs, workers=1)


@pytest.mark.parametrize("name", ["karate", "florentine"])
def test_real_graphs_through_a_sliding_window(name):
    rng = random.Random(f"{name}-window")
    epochs = stream_of(list(GRAPHS[name].edges()), rng, epochs=8, delete=0.1)
    epochs += [(t, []) for t in range(8, 11)]  # let the window drain the graph
    run_checked(epochs, workers=2, window=3, algorithms=("components", "triangles", "degrees"))


@pytest.mark.parametrize("blocks", [1, 3])
def test_same_results_on_1_to_8_workers(blocks):
    """Every output, PageRank's floats included, is identical on any number of workers
    (PageRank sums in an order fixed by the data, not by arrival)."""
    rng = random.Random(8)
    epochs = stream_of(list(GRAPHS["florentine"].edges()), rng, epochs=5)
    base = run_checked(epochs, workers=1, tol=1e-7, blocks=blocks)
    for workers in (2, 3, 8):
        other = run_checked(epochs, workers=workers, tol=1e-7, blocks=blocks)
        assert [r.sorted() for r in other] == [r.sorted() for r in base]


def test_pagerank_blocks_change_only_the_rounding():
    """The same stream with 1, 2 and 5 blocks: each within tol of the exact vector, so
    within 2 tol of each other; more blocks take more rounds (one per exchange)."""
    rng = random.Random(5)
    epochs = stream_of(list(GRAPHS["les_miserables"].edges()), rng, epochs=4)
    runs = {b: run_checked(epochs, workers=2, tol=1e-9, algorithms=("pagerank",), blocks=b) for b in (1, 2, 5)}
    for b in (2, 5):
        pagerank_close(runs[1], runs[b], tol=2e-9)


@pytest.mark.parametrize("iterations", [0, 1, 3])
def test_pagerank_one_block_without_or_with_a_partial_krylov_start(monkeypatch, iterations):
    """With one block the pushes start from BiCGSTAB's result; with none (0 iterations)
    or a partial one the pushes do the rest: every epoch stays within tol of networkx
    (run_checked) and within 2 tol of the full start."""
    import importlib

    pr = importlib.import_module("apps.graph.pagerank")  # (apps.graph.pagerank is also the function)
    rng = random.Random(6)
    epochs = stream_of(list(GRAPHS["les_miserables"].edges()), rng, epochs=4)
    full = run_checked(epochs, workers=1, tol=1e-9, algorithms=("pagerank",))
    monkeypatch.setattr(pr, "_KRYLOV_ITERATIONS", iterations)
    part = run_checked(epochs, workers=1, tol=1e-9, algorithms=("pagerank",))
    pagerank_close(full, part, tol=2e-9)


def test_pagerank_block_with_work_left_and_nothing_coming_back():
    """A block that stops its passes because most of what it pushes leaves it must go on
    in the next round even when no other block sends it anything (here: b loses its
    in-edge and pushes its loss to 1's block, whose 1 then has no out-edge; 2 -> 4 is
    new in b's block)."""
    epochs = [(0, [(1, "b", 1)]), (1, [("b", 1, 1)]), (2, [(2, 4, 1)])]
    run_checked(epochs, workers=1, window=2, tol=1e-7, blocks=3, algorithms=("pagerank",))


def test_pagerank_is_within_tol_of_the_exact_vector():
    import networkx as nx

    from apps.graph.stream import GraphStream

    rng = random.Random(11)
    g = GraphStream(("pagerank",), tol=1e-10, blocks=2)
    ref = EdgeMultiset()
    for t, ups in stream_of(list(GRAPHS["les_miserables"].edges()), rng, epochs=5):
        ref.epoch(t, ups)
        g.advance(t, ups)
        exact = nx.pagerank(ref.digraph(), tol=1e-16, max_iter=10_000)
        assert sum(abs(g.view.ranks.data[v] - exact[v]) for v in exact) <= 1e-10
    g.close()


def test_rank_changes_below_the_threshold_are_not_emitted():
    """With rank_threshold, a vertex's rank is emitted when it moved by more than the
    threshold since it was last emitted: the view is within it of the exact ranks, and
    a small change elsewhere in a big graph emits a few changes, not every vertex."""
    import networkx as nx

    from apps.graph.stream import GraphStream

    edges = list(nx.powerlaw_cluster_graph(400, 3, 0.1, seed=3).edges())
    g = GraphStream(("pagerank",), rank_threshold=1e-4)
    g.advance(0, [(u, v, 1) for u, v in edges] + [(v, u, 1) for u, v in edges])
    (r,) = g.advance(1, [(edges[0][0], edges[0][1], -1)])
    assert 0 < len(r.changes["pagerank"]) < 40
    exact = nx.pagerank(nx.DiGraph(edges[1:] + [(v, u) for u, v in edges]), tol=1e-14)
    assert max(abs(g.view.ranks.data[v] - exact[v]) for v in exact) <= 1e-4 + 1e-10
    g.close()
    with pytest.raises(ValueError, match="rank_threshold"):
        GraphStream(("pagerank",), rank_threshold=-1)
    with pytest.raises(ValueError, match="tol"):
        GraphStream(("pagerank",), tol=1e-13)


def test_epochs_sent_all_at_once_are_still_sequenced():
    """With every epoch queued before the run, rounds of different epochs would
    interleave in the loops; the per-epoch gate must keep the results identical."""
    rng = random.Random(3)
    epochs = stream_of(list(GRAPHS["florentine"].edges()), rng, epochs=6, delete=0.4)
    stepwise = {r.epoch: r.sorted() for r in run_checked(epochs, workers=2)}
    for workers in (1, 4):
        at_once = run_all_at_once(epochs, workers=workers)
        for t, changes in at_once.items():
            got = {k: sorted(v, key=repr) for k, v in changes.items() if k not in ("pagerank", "scores")}
            want = {k: v for k, v in stepwise[t].items() if k not in ("pagerank", "scores")}
            assert got == want, t


def test_a_split_and_a_merge_in_one_epoch():
    # a path 1-2-3-4-5 (labels 1), then cut 2-3 and join 4-9, 9-0 in the same epoch
    epochs = [
        (0, [(1, 2, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1), (9, "x", 1)]),
        (1, [(2, 3, -1), (4, 9, 1), (9, 0, 1)]),
        (2, [(9, 0, -1), (0, 1, 1)]),
        (3, [(1, 2, -1), (3, 4, -1), (4, 5, -1), (4, 9, -1), (9, "x", -1), (0, 1, -1)]),
    ]
    results = run_checked(epochs, workers=3)
    labels = {r.epoch: set(r.changes["components"]) for r in results}
    assert labels[1] == {(3, 1, 0), (4, 1, 0), (5, 1, 0), (9, 9, 0), ("x", 9, 0), (0, None, 0)}
    summaries = [s for r in results for s in r.changes["summary"]]
    assert summaries[0] == (2, 5) and summaries[-1] == (0, 0)


vertices = st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", "c", "d"]))
updates = st.lists(st.tuples(vertices, vertices, st.sampled_from([1, 1, 1, 2, -1, -1])), max_size=8)


@settings(max_examples=25)
@given(
    st.lists(updates, min_size=1, max_size=5), st.integers(1, 8), st.sampled_from([None, 1, 2]),
    st.sampled_from([1, 2, 3, 8]),
)
def test_random_graphs_equal_networkx(epochs, workers, window, blocks):
    run_checked(list(enumerate(epochs)), workers=workers, window=window, tol=1e-7, blocks=blocks)


@settings(max_examples=15)
@given(st.lists(updates, min_size=1, max_size=4), st.integers(2, 8), st.sampled_from([1, 3]))
def test_random_graphs_same_on_any_worker_count(epochs, workers, blocks):
    """The same changes on any number of workers, and with either layout (one key per
    algorithm, or one per vertex)."""
    es = list(enumerate(epochs))
    algs = ("degrees", "components", "triangles")
    want = exact_changes(run_checked(es, 1, algs))
    assert exact_changes(run_checked(es, workers, algs, blocks=blocks)) == want


def test_pagerank_tolerance_is_respected_for_a_coarse_tol():
    # tol is a bound on the L1 error: a coarse tol still lands within it
    import networkx as nx

    from apps.graph.stream import GraphStream

    g = GraphStream(("pagerank",), tol=1e-3)
    edges = list(GRAPHS["les_miserables"].edges())
    g.advance(0, [(u, v, 1) for u, v in edges])
    exact = nx.pagerank(nx.DiGraph(edges), tol=1e-14, max_iter=1000)
    assert sum(abs(g.view.ranks.data[v] - exact[v]) for v in exact) <= 1e-3
    assert PR_TOL < 1e-3


def test_unknown_algorithm_is_rejected():
    import tstate as ts
    from apps.graph.stream import build

    flow = ts.Dataflow()
    with pytest.raises(ValueError, match="unknown algorithm"):
        build(flow, flow.input(), ("pagerank", "betweenness"))
    assert set(ALGORITHMS) == {"degrees", "components", "pagerank", "triangles"}


def test_rounds_per_epoch_are_in_the_metrics():
    """An epoch-sequenced loop counts its rounds per epoch (PageRank in blocks, components
    per vertex); with one block (the default) no algorithm needs a loop at all: an epoch
    is one timer per algorithm, and no rounds are counted."""
    from apps.graph.stream import GraphStream

    rng = random.Random(2)
    epochs = stream_of(list(GRAPHS["les_miserables"].edges()), rng, epochs=4)
    rounds = {}
    for blocks in (1, 2, 4):
        g = GraphStream(("pagerank", "components"), tol=1e-10, blocks=blocks)
        for t, ups in epochs:
            g.advance(t, ups)
        rounds[blocks] = g.execution.metrics.rounds("pagerank")
        if blocks == 1:
            assert rounds[1] == {} and g.execution.metrics.rounds("components") == {}
        else:
            assert set(rounds[blocks]) == {t for t, _ in epochs}
            # components' vertices apply their messages to their own worker's bins within
            # the round (local_rounds): on one worker the loop needs no round at all
            assert g.execution.metrics.rounds("components") == {}
            assert g.execution.metrics.local_passes("components.vertex")
        g.close()
    for blocks in (2, 4):  # rounds 0-2, the pushes, and the sum's two
        assert all(n >= 5 for n in rounds[blocks].values())


def test_components_in_blocks_take_fewer_rounds_with_local_rounds(monkeypatch):
    """Components per vertex on 3 workers: the messages for a worker's own bins are
    applied within the round, so an epoch takes fewer rounds than its longest chain of
    messages (the loop without local rounds: the same dataflow, the option off) -- and
    the same labels."""
    import importlib

    from apps.graph.stream import GraphStream

    cc = importlib.import_module("apps.graph.components")  # (apps.graph.components is also the function)
    rng = random.Random(3)
    epochs = stream_of(list(GRAPHS["les_miserables"].edges()), rng, epochs=4)
    got, rounds = {}, {}
    for local in (True, False):
        monkeypatch.setattr(cc, "LOCAL_ROUNDS", local)
        g = GraphStream(("components",), blocks=4, workers=3)
        got[local] = [(r.epoch, r.sorted()) for t, ups in epochs for r in g.advance(t, ups)]
        rounds[local] = g.execution.metrics.rounds("components")
        g.close()
    assert got[True] == got[False]
    assert sum(rounds[True].values()) < sum(rounds[False].values())
