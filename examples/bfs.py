"""Breadth-first reachability with an iterate scope.

Each epoch carries one query: a graph (its edges) and root nodes.  Inside the loop time
is ``Product(epoch, round)``: nodes reached in round ``i`` send their neighbours around
the feedback edge to round ``i + 1``.  Queries of different epochs run concurrently
(``Product(0, 3)`` and ``Product(1, 0)`` are incomparable), so all state is kept per
epoch.  Emits every node reachable from the epoch's roots, once, at that epoch.

    python -m examples.bfs
"""

from __future__ import annotations

from typing import Any, Iterable

import tstate as ts


def build(flow: ts.Dataflow, edges: ts.Stream, roots: ts.Stream) -> ts.Stream:
    @flow.iterate(edges, roots)
    def reach(scope, edges, roots):
        loop = scope.feedback()
        candidates = roots.concat(loop.stream)

        @flow.binary_frontier(candidates, edges, exchange=(lambda n: n, lambda e: e[0]), state=dict)
        def explore(nodes_in, edges_in, out, ctx):
            queries = ctx.state  # epoch -> (adjacency, reached, pending candidates by time)
            for cap, batch in edges_in:  # edges enter at round 0 of their epoch
                adjacency = queries.setdefault(cap.time.outer, ({}, set(), {}))[0]
                for src, dst in batch:
                    adjacency.setdefault(src, []).append(dst)
            for cap, batch in nodes_in:
                pending = queries.setdefault(cap.time.outer, ({}, set(), {}))[2]
                pending.setdefault(cap.time, []).extend(batch)
                ctx.notify_at(cap)
            for cap in ctx.notifications():  # all edges of the epoch and all candidates are in
                adjacency, reached, pending = queries[cap.time.outer]
                for n in pending.pop(cap.time):
                    if n not in reached:
                        reached.add(n)
                        out.give(cap, ("reached", n))
                        for m in adjacency.get(n, ()):
                            out.give(cap, ("visit", m))
            # An epoch no input can reach any more is finished: forget its state.
            live = [t.outer for t in (*nodes_in.frontier, *edges_in.frontier)]
            for epoch in [e for e in queries if not any(o <= e for o in live)]:
                del queries[epoch]

        loop.connect(explore.filter(lambda r: r[0] == "visit").map(lambda r: r[1]))
        return explore.filter(lambda r: r[0] == "reached").map(lambda r: r[1])

    return reach


def run(epochs: Iterable[tuple[list[tuple[Any, Any]], list[Any]]], workers: int = 1) -> dict[int, list[Any]]:
    flow = ts.Dataflow("bfs")
    edges = flow.input("edges")
    roots = flow.input("roots")
    out = build(flow, edges, roots).collect()
    for t, (es, rs) in enumerate(epochs):
        edges.advance_to(t)
        roots.advance_to(t)
        edges.send(es)
        roots.send(rs)
    edges.close()
    roots.close()
    flow.run(workers=workers)
    return {t: sorted(v) for t, v in out.by_time().items()}


def main() -> None:
    print("== BFS reachability, one query per epoch (3 workers) ==")
    epochs = [
        ([(1, 2), (2, 3), (4, 5), (3, 1)], [1]),
        ([(1, 2), (2, 3), (3, 4), (4, 5)], [2]),
        ([(6, 7), (7, 6)], [6]),
    ]
    for t, nodes in run(epochs, workers=3).items():
        print(f"epoch {t}: reachable {nodes}")


if __name__ == "__main__":
    main()
