"""The examples are tests too: each is compared with a plain sequential computation."""

from __future__ import annotations

from collections import Counter, deque

from hypothesis import given
from hypothesis import strategies as st

from examples import bfs, windowed_count, wordcount

words = st.sampled_from(["a", "b", "c", "dd", "e"])
lines = st.lists(words, max_size=6).map(" ".join)


@given(epochs=st.lists(st.lists(lines, max_size=4), max_size=6), workers=st.integers(1, 8))
def test_wordcount_matches_sequential(epochs, workers):
    totals: Counter = Counter()
    expected = {}
    for t, batch in enumerate(epochs):
        seen = set()
        for line in batch:
            for w in line.split():
                totals[w] += 1
                seen.add(w)
        if seen:
            expected[t] = sorted((w, totals[w]) for w in seen)
    assert wordcount.run(epochs, workers=workers) == expected


events = st.tuples(st.sampled_from("abc"), st.integers())


@given(
    batches=st.lists(st.tuples(st.integers(0, 3), st.lists(events, max_size=5)), max_size=8),
    width=st.integers(1, 4),
    workers=st.integers(1, 8),
)
def test_windowed_count_matches_sequential(batches, width, workers):
    timed, t = [], 0
    for gap, batch in batches:
        t += gap
        timed.append((t, batch))
    counts: Counter = Counter()
    for t, batch in timed:
        for key, _ in batch:
            counts[(t - t % width, key)] += 1
    expected = sorted((start, key, n) for (start, key), n in counts.items())
    assert windowed_count.run(timed, width, workers=workers) == expected


def plain_bfs(edges, roots):
    adj: dict = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
    seen = set(roots)
    todo = deque(roots)
    while todo:
        n = todo.popleft()
        for m in adj.get(n, ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return sorted(seen)


node = st.integers(0, 12)
query = st.tuples(st.lists(st.tuples(node, node), max_size=25), st.lists(node, max_size=3))


@given(queries=st.lists(query, max_size=4), workers=st.integers(1, 8))
def test_bfs_matches_plain_bfs(queries, workers):
    expected = {t: plain_bfs(es, rs) for t, (es, rs) in enumerate(queries) if rs}
    assert bfs.run(queries, workers=workers) == expected


def test_main_prints(capsys):
    wordcount.main()
    windowed_count.main()
    bfs.main()
    out = capsys.readouterr().out
    assert "epoch 1: [('dog', 2), ('fox', 2)" in out
    assert "(3, 'a', 9)" in out
    assert "epoch 1: reachable [2, 3, 4, 5]" in out
