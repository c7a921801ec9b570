"""Streaming graph analytics on tstate: typed graph state updated in proportion to the change.

An edge stream -- ``(src, dst, delta)`` updates at integer epochs, with a sliding
window and/or explicit retractions -- is turned into the per-epoch *topology changes*
of a graph, and four algorithms maintain their results incrementally, emitting per
epoch only what changed (``Change(key, old, new)``, ``None`` = absent):

================  ===========================  ===========================================
algorithm         graph                        output (per epoch)
================  ===========================  ===========================================
degrees           undirected                   vertex degrees; degree distribution
components        undirected                   vertex -> min vertex id of its component;
                                               (count, largest) summary
pagerank          directed (damping 0.85)      vertex -> rank, within an L1 tolerance of
                                               the exact vector (default 1e-10); optionally
                                               only changes above a threshold
triangles         undirected                   triangles per vertex; the total
================  ===========================  ===========================================

All results are exactly networkx's on the current graph (``nx.Graph`` / ``nx.DiGraph``
built from the present edges: ``degree``, ``degree_histogram``, ``connected_components``,
``pagerank`` -- dangling mass redistributed uniformly -- and ``triangles``), on any
number of workers.

**The graph of an epoch** (see :mod:`apps.graph.edges`): the directed pairs whose
occurrence count is positive.  Per epoch and pair the deltas are summed and added to
the count, which is clamped at zero.  So:

- *duplicate edges* raise the count: the simple graph has the edge once, until every
  occurrence is retracted or has left the window (no multi-edges, no weights);
- *retracting an absent edge* does nothing (and is not remembered);
- *self-loops* are ignored (and counted);
- *vertex ids* are ``str`` or ``int`` (``1`` and ``"1"`` differ; ints order before
  strs); anything else -- ``bool``, ``float``, ``None``, tuples -- is rejected:
  :class:`GraphInputError` (``on_invalid="raise"``) or dropped and counted
  (``"skip"``).
- the undirected graph has ``{a, b}`` when ``a -> b`` or ``b -> a`` is present.

**Layouts** (``blocks``, :func:`build`).  With ``blocks=1`` (the default) each
algorithm keeps its whole graph in one key of a root-scope ``@flow.stateful`` operator
and applies an epoch's change lists at once, one timer per epoch: degrees summed per
vertex, triangles by a set intersection per changed edge, components on a spanning
forest (:mod:`~apps.graph.forest`) that replaces a deleted tree edge in ``O(deg)`` when
it can, PageRank's rounds one after another -- the cost of an epoch follows the change,
not the graph.  With ``blocks > 1`` the work is spread over keys exchanging messages in
epoch-sequenced loops (:mod:`apps.graph.loop`): components, triangles and degrees per
vertex, PageRank in ``blocks`` blocks.  The results are the same either way.

**State.**  All of it is typed attrs classes in ``@flow.stateful`` operators (large
maps as :class:`tstate.types.Map`, which checkpoints as deltas), so it lives in bins and
can be encoded by the state codec (checkpoints, migration): the edge counts with the
per-epoch sums and the sliding window's pending expiries
(:class:`~apps.graph.edges.EdgeBucket`), each algorithm's graph state and the global
summaries.  Nothing else carries over from one epoch to the next: the loops' entrances
hold nothing, and the only Python-side objects are the
:class:`~apps.graph.edges.InputStats` counters (diagnostics of what *this process*
dropped) and the consumers' views.

**Migration and recovery.**  Both move or restore bins, so the results do not change:
every output -- PageRank's floats included -- is identical to a run without migration
or crash, and on any number of workers.

- *Migration*: ``GraphStream(workers=2, max_workers=8, reconfigure=[(5,
  ts.Rescale(4))])``, or ``g.execution.reconfigure(ts.MoveBins({...}))`` between two
  ``advance`` calls (takes effect at the next epoch).  Operators inside iterate
  scopes (``blocks > 1``: the per-vertex state of components and triangles, PageRank's
  blocks) move at epoch boundaries: a bin leaves its old owner once every iteration of
  the epochs before the move is done there.
- *Checkpoints*: :func:`build` over a replayable source (``ts.io.from_batches(fn)``,
  ``ts.io.parquet``) with an exactly-once sink (``ts.io.files``), run with
  ``flow.run(workers, checkpoint=ts.Checkpoints(dir, every_epochs=k))``: the same
  command after a crash resumes from the last committed checkpoint on any number of
  workers, and the output files end up as after an uninterrupted run
  (``tests/apps/graph/job.py``); checkpoints are cut at epoch boundaries, after every
  iteration of the epochs before them.  :class:`GraphStream` (fed
  from Python, with in-memory views) is not checkpointed.

Modules: :mod:`~apps.graph.edges` (validation, window, consolidation),
:mod:`~apps.graph.loop`, :mod:`~apps.graph.degrees`, :mod:`~apps.graph.components`
(with :mod:`~apps.graph.forest`),
:mod:`~apps.graph.pagerank`, :mod:`~apps.graph.triangles`, :mod:`~apps.graph.views`
(folding changes into current results), :mod:`~apps.graph.stream` (:func:`build`,
:class:`GraphStream`), :mod:`~apps.graph.io` (CSV / parquet edge lists) and the app,
``python -m apps.graph``.

>>> g = GraphStream(workers=2)
>>> _ = g.advance(0, [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
>>> g.view.component_count(), g.view.triangle_total, g.view.degrees.data["c"]
(1, 1, 3)
>>> [sorted(r.changes["components"]) for r in g.advance(1, [("c", "d", -1)])]
[[Change(key='d', old='a', new=None)]]
>>> _ = g.close()
"""

from apps.graph.components import Components, ComponentsSummary, components
from apps.graph.degrees import Degrees, degrees
from apps.graph.edges import (
    EdgeChanges,
    GraphInputError,
    InputStats,
    clean,
    consolidate,
    vertex_lt,
    vertex_rank,
    window,
)
from apps.graph.loop import Change, sequenced_loop
from apps.graph.pagerank import PageRank, pagerank
from apps.graph.stream import ALGORITHMS, Analytics, EpochResult, GraphStream, build
from apps.graph.triangles import Triangles, triangles
from apps.graph.views import GraphView, InconsistentChange, View

__all__ = [
    "ALGORITHMS",
    "Analytics",
    "Change",
    "Components",
    "ComponentsSummary",
    "Degrees",
    "EdgeChanges",
    "EpochResult",
    "GraphInputError",
    "GraphStream",
    "GraphView",
    "InconsistentChange",
    "InputStats",
    "PageRank",
    "Triangles",
    "View",
    "build",
    "clean",
    "components",
    "consolidate",
    "degrees",
    "pagerank",
    "sequenced_loop",
    "triangles",
    "vertex_lt",
    "vertex_rank",
    "window",
]
