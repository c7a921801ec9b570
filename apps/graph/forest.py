"""A spanning forest with component labels, maintained edge by edge (``blocks=1`` components).

:class:`SpanningForest` keeps, for an undirected simple graph given by its edge
insertions and deletions, every vertex's **label** -- the smallest vertex id of its
component (:func:`~apps.graph.edges.vertex_lt` order) -- and a spanning tree of every
component, rooted at that smallest vertex.  It works on two tracked maps (so the state
it lives in checkpoints as deltas): ``adj`` (vertex -> set of neighbours; a vertex is in
the graph while it has one) and ``tree`` (vertex -> ``[label, parent, level]``; the
root is its own parent; lists, not tuples: a dict holding only tuples of atomic values
is untracked by every garbage collection and tracked again, as new, by the next tuple
put in it, so each epoch's first young-generation collection would walk it whole).

**Levels.**  Along every tree path the levels strictly increase away from the root:
``level(v) > level(parent(v))`` (they are spaced :data:`GAP` apart when a tree is
built).  So the *descendants* of ``x`` all have levels at least ``m(x)``, the smallest
level of ``x``'s children, and any other neighbour of ``x`` below ``m(x)`` is not a
descendant.  That makes deleting a tree edge cheap in the common case:

- *insert* ``(a, b)``: within a component nothing changes; joining two components, the
  one with the larger label is relabelled and hung below the other by a BFS over it
  (its vertices' labels change: that is the output);
- *delete* a non-tree edge: nothing changes;
- *delete* the tree edge of ``x`` (``x``'s parent edge): if ``x`` has a neighbour ``y``
  below ``m(x)``, ``x`` is re-hung below ``y`` at a level between ``level(y)`` and
  ``m(x)``, in ``O(deg x)``, and no other vertex changes (no room between the two
  integers: as if there were no such ``y``);
- otherwise the subtree of ``x`` is collected, and if any of its vertices has a
  neighbour outside it, it is re-hung from those neighbours by a multi-source search in
  level order (labels unchanged, levels fresh); if none has, it has become a component
  of its own: relabelled with its smallest vertex and re-rooted there.

Why it is exact: before and after every operation the labels are the minimum of each
component and ``tree`` is a spanning forest of the graph with increasing levels (each
case above preserves this; a re-hung subtree's new parents lie outside it, so no cycle
forms).  Changes may be applied one at a time in any order: the labels after a sequence
depend only on the final graph.  Which tree is kept depends on the order (and on the
iteration order of sets), never the labels.

``touched`` (vertex -> label before the first change that touched it, ``None``: the
vertex was absent) collects what a caller needs to emit per-epoch label changes.
"""

from __future__ import annotations

import heapq
from typing import Any, Optional

from apps.graph.edges import Vertex, vertex_rank
from tstate.types import Map

__all__ = ["SpanningForest", "GAP"]

#: The spacing of levels along the paths of a freshly built tree.
GAP = 1 << 20


class SpanningForest:
    """Labels and a spanning forest over ``adj`` / ``tree`` (see the module docstring)."""

    __slots__ = ("adj", "tree", "touched", "repairs", "searches")

    def __init__(
        self,
        adj: Map[Vertex, set[Vertex]],
        tree: Map[Vertex, list[Vertex]],
        touched: Optional[dict[Vertex, Optional[Vertex]]] = None,
    ) -> None:
        self.adj = adj
        self.tree = tree
        self.touched: dict[Vertex, Optional[Vertex]] = touched if touched is not None else {}
        self.repairs = 0  # tree edges replaced in O(deg) (diagnostics)
        self.searches = 0  # subtrees searched

    # -- queries ---------------------------------------------------------------------
    def label(self, v: Vertex) -> Optional[Vertex]:
        """``v``'s label (``None``: not in the graph)."""
        t = self.tree.peek(v)
        return None if t is None else t[0]

    def _touch(self, v: Vertex) -> None:
        if v not in self.touched:
            t = self.tree.peek(v)
            self.touched[v] = None if t is None else t[0]

    # -- insertions ------------------------------------------------------------------
    def insert(self, a: Vertex, b: Vertex) -> None:
        """Add the edge ``{a, b}`` (``a != b``; nothing happens if it is present)."""
        adj, tree = self.adj, self.tree
        sa = adj.peek(a)
        if sa is None:
            self._touch(a)
            sa = set()
            adj[a] = sa
            tree[a] = [a, a, 0]
        elif b in sa:
            return
        sb = adj.peek(b)
        if sb is None:
            self._touch(b)
            sb = set()
            adj[b] = sb
            tree[b] = [b, b, 0]
        sa.add(b)
        sb.add(a)
        adj.touch(a)
        adj.touch(b)
        la = tree.peek(a)[0]
        lb = tree.peek(b)[0]
        if la == lb:  # (ids are ints or strs: == never mixes them up)
            return
        if vertex_rank(la) < vertex_rank(lb):
            self._hang(b, a, la)
        else:
            self._hang(a, b, lb)

    def _hang(self, x: Vertex, via: Vertex, label: Vertex) -> None:
        """Relabel ``x``'s whole component ``label`` and hang it below ``via`` (a BFS
        from ``x``: parents and levels of a fresh tree)."""
        tree, adj, touch = self.tree, self.adj, self._touch
        old = tree.peek(x)[0]
        touch(x)
        lv = tree.peek(via)[2] + GAP
        tree[x] = [label, via, lv]
        queue = [(x, lv)]
        for z, lz in queue:
            nl = lz + GAP
            for w in adj.peek(z):
                if tree.peek(w)[0] == old:
                    touch(w)
                    tree[w] = [label, z, nl]
                    queue.append((w, nl))

    # -- deletions -------------------------------------------------------------------
    def delete(self, a: Vertex, b: Vertex) -> None:
        """Remove the edge ``{a, b}`` (nothing happens if it is absent); a vertex left
        without edges leaves the graph."""
        adj, tree = self.adj, self.tree
        sa = adj.peek(a)
        sb = adj.peek(b)
        if sa is None or sb is None or b not in sa:
            return
        sa.discard(b)
        sb.discard(a)
        adj.touch(a)
        adj.touch(b)
        if tree.peek(a)[1] == b:
            self._cut(a)
        elif tree.peek(b)[1] == a:
            self._cut(b)
        for v, s in ((a, sa), (b, sb)):
            if not s:  # alone in its component by now: it leaves the graph
                self._touch(v)
                del adj[v]
                del tree[v]

    def _cut(self, x: Vertex) -> None:
        """``x``'s parent edge is gone: re-hang ``x`` (and so its subtree), or split it off."""
        tree = self.tree
        peek = tree.peek
        label, _, lx = peek(x)
        m: Optional[int] = None  # the smallest level of x's children
        best: Optional[Vertex] = None
        bl = 0
        for w in self.adj.peek(x):
            _, pw, lw = peek(w)
            if pw == x:
                if m is None or lw < m:
                    m = lw
            elif best is None or lw < bl:
                best, bl = w, lw
        if best is not None and (m is None or bl + 1 < m):
            if m is None or bl + GAP < m:
                nl = bl + GAP
            else:
                nl = (bl + m) // 2
            tree[x] = [label, best, nl]
            self.repairs += 1
            return
        self._search(x, label)

    def _search(self, x: Vertex, label: Vertex) -> None:
        """Collect ``x``'s subtree; re-hang it from its outside neighbours in level order,
        or make it a component of its own."""
        self.searches += 1
        adj, tree = self.adj, self.tree
        peek, apeek = tree.peek, adj.peek
        sub = [x]
        inside = {x}
        for z in sub:
            for w in apeek(z):
                if w not in inside and peek(w)[1] == z:
                    inside.add(w)
                    sub.append(w)
        # every outside neighbour is in the rest of the tree, validly rooted
        heap: list[tuple[int, int, Vertex, Vertex]] = []
        n = 0
        for z in sub:
            best: Any = None
            bl = 0
            for w in apeek(z):
                if w not in inside:
                    lw = peek(w)[2]
                    if best is None or lw < bl:
                        best, bl = w, lw
            if best is not None:
                heap.append((bl + GAP, n, z, best))
                n += 1
        if not heap:
            self._split(sub, inside)
            return
        heapq.heapify(heap)
        done: set[Vertex] = set()
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            lz, _, z, p = pop(heap)
            if z in done:
                continue
            done.add(z)
            tree[z] = [label, p, lz]
            nl = lz + GAP
            for w in apeek(z):
                if w in inside and w not in done:
                    push(heap, (nl, n, w, z))
                    n += 1
        assert len(done) == len(sub), "a subtree is connected by its tree edges"

    def _split(self, sub: list[Vertex], inside: set[Vertex]) -> None:
        """``sub`` lost its last edge to the rest: a component of its own, labelled and
        rooted at its smallest vertex."""
        tree, apeek, touch = self.tree, self.adj.peek, self._touch
        root = min(sub, key=vertex_rank)
        for z in sub:
            touch(z)
        tree[root] = [root, root, 0]
        seen = {root}
        queue = [(root, 0)]
        for z, lz in queue:
            nl = lz + GAP
            for w in apeek(z):
                if w not in seen:
                    seen.add(w)
                    tree[w] = [root, z, nl]
                    queue.append((w, nl))
