"""Putting it together: one dataflow for all the algorithms, and a driver per epoch.

:func:`build` wires ``updates -> consolidate`` (validation, then the edge counts with
the per-epoch sums and the sliding window in one operator, :func:`~apps.graph.edges.consolidate`)
and the chosen algorithms onto a :class:`tstate.Dataflow`; :class:`GraphStream` owns
such a dataflow with an input, feeds it epoch by epoch and returns each epoch's
changes (and keeps a :class:`~apps.graph.views.GraphView` of the current results)::

    >>> g = GraphStream(workers=2)
    >>> [r.epoch for r in g.advance(0, [("a", "b"), ("b", "c")])]
    [0]
    >>> g.view.component_count(), g.view.triangle_total
    (1, 0)
    >>> _ = g.advance(1, [("c", "a")]); g.view.triangle_total
    1
    >>> _ = g.close()
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from attrs import define, field

import tstate as ts
from apps.graph.components import Components, components
from apps.graph.degrees import Degrees, degrees
from apps.graph.edges import EdgeChanges, GraphInputError, InputStats, consolidate
from apps.graph.pagerank import BLOCKS, PageRank, block_keys, pagerank
from apps.graph.triangles import Triangles, triangles
from apps.graph.views import GraphView
from tstate.io.sinks import Sink
from tstate.keys import bin_of, key_hash

__all__ = ["ALGORITHMS", "Analytics", "build", "EpochResult", "GraphStream", "spread_keys"]

ALGORITHMS = ("degrees", "components", "pagerank", "triangles")


@define
class Analytics:
    """The streams of one graph dataflow (``None``: algorithm not built)."""

    edges: EdgeChanges
    degrees: Optional[Degrees] = None
    components: Optional[Components] = None
    pagerank: Optional[PageRank] = None
    triangles: Optional[Triangles] = None

    def outputs(self) -> dict[str, ts.Stream]:
        """Output name -> stream (the names :class:`~apps.graph.views.GraphView` reads)."""
        out: dict[str, ts.Stream] = {}
        if self.degrees is not None:
            out["degrees"] = self.degrees.per_vertex
            out["distribution"] = self.degrees.distribution
        if self.components is not None:
            out["components"] = self.components.labels
            out["summary"] = self.components.summary
        if self.pagerank is not None:
            out["pagerank"] = self.pagerank.ranks
        if self.triangles is not None:
            out["triangles"] = self.triangles.per_vertex
            out["triangle_total"] = self.triangles.total
        return out


def build(
    flow: ts.Dataflow,
    updates: ts.Stream,
    algorithms: Sequence[str] = ALGORITHMS,
    window_width: Optional[int] = None,
    horizon: Optional[int] = None,
    validate: bool = True,
    on_invalid: str = "raise",
    stats: Optional[InputStats] = None,
    alpha: float = 0.85,
    tol: float = 1e-10,
    bins: int = 256,
    blocks: int = BLOCKS,
    rank_threshold: float = 0.0,
    undirected: bool = False,
    buckets: int = 1,
    spread: bool = False,
) -> Analytics:
    """Wire the graph analytics onto ``flow`` (see the module docstring).

    ``updates`` carries ``(src, dst[, delta])`` records at integer epochs;
    ``validate=False`` skips the validation for updates already known to be valid
    ``(src, dst, delta)`` tuples without self-loops; ``window_width`` retracts every
    insertion that many epochs later (expiries at epochs ``>= horizon`` are dropped);
    ``undirected`` makes every update one of the undirected edge ``{src, dst}`` (PageRank
    then sees it both ways, :func:`~apps.graph.edges.consolidate`); ``rank_threshold``
    goes to :func:`~apps.graph.pagerank.pagerank`.

    ``blocks`` is how the work is laid out (part of the state's layout: a restore must
    use the same).  ``1`` (the default): each algorithm keeps its whole graph in one key
    and updates it in proportion to the epoch's changes, and the edge counts are one
    bucket -- the embedded engine runs every worker in one process, so this is the
    fastest there.  More spreads the work over keys exchanging messages in loop rounds
    (for Spark partitions): PageRank in ``blocks`` blocks of vertices, components,
    triangles and degrees one key per vertex.  The edge counts are one bucket either
    way (:func:`~apps.graph.edges.consolidate`).  The results are the same.

    For Spark partitions without loop rounds (``blocks=1``): ``buckets`` spreads the
    edge counts over that many keys (:func:`~apps.graph.edges.consolidate`), and
    ``spread=True`` gives each algorithm's one key a bin of its own parity class
    (:func:`spread_keys`): on ``P`` partitions (bin ``b`` on partition ``b % P``) the
    algorithms run side by side in one stage (on 2: PageRank and degrees on one,
    components and triangles on the other; on 4 or more each on its own);
    the edge changes then travel as lists (``consolidate(lists=True)``: cheap to ship).
    Both are part of the state's layout (a restore must use the same); the results are
    the same."""
    unknown = set(algorithms) - set(ALGORITHMS)
    if unknown:
        raise ValueError(f"unknown algorithm(s) {sorted(unknown)}; choose from {list(ALGORITHMS)}")
    if not (isinstance(blocks, int) and 1 <= blocks <= 1 << 16):
        raise ValueError(f"blocks must be an int in [1, 65536], got {blocks!r}")
    edges = consolidate(
        flow, updates, bins=bins, window_width=window_width, horizon=horizon, validate=validate,
        on_invalid=on_invalid, stats=stats, undirected=undirected, buckets=buckets, lists=spread and blocks == 1,
    )
    a = Analytics(edges)
    keys = spread_keys(bins) if spread else (0, 0, 0)
    if "degrees" in algorithms:
        a.degrees = degrees(flow, edges, bins=bins, blocks=blocks, key=keys[2])
    if "components" in algorithms:
        a.components = components(flow, edges, bins=bins, blocks=blocks, key=keys[0])
    if "pagerank" in algorithms:
        a.pagerank = pagerank(
            flow, edges, alpha=alpha, tol=tol, bins=bins, blocks=blocks, rank_threshold=rank_threshold
        )
    if "triangles" in algorithms:
        a.triangles = triangles(flow, edges, bins=bins, blocks=blocks, key=keys[1])
    return a


def spread_keys(bins: int) -> tuple[int, int, int]:
    """Three int keys (components', triangles', degrees') whose bins are PageRank's
    (one block: :func:`~apps.graph.pagerank.block_keys`, bin 0) plus 1, 3 and 2 modulo
    ``min(bins, 8)``: with the default bin assignment (bin ``b`` on partition ``b % P``)
    on 2 partitions PageRank and degrees share one, components and triangles the other
    (the two halves cost about the same: on the 50k-vertex power-law graph's load, CPU
    seconds in the task PageRank 3.5, components 2.7, triangles 1.5, degrees 0.7 --
    ``benchmarks/graph_spark_profile.py``); on 4 or 8 each has its own.

    >>> from tstate.keys import bin_of, key_hash
    >>> [bin_of(key_hash(k), 256) % 8 for k in spread_keys(256)]
    [1, 3, 2]
    """
    m = min(bins, 8)
    base = bin_of(key_hash(block_keys(1, bins)[0]), bins)
    out: list[int] = []
    for offset in (1, 3, 2):
        want = (base + offset) % m
        k = 1
        while bin_of(key_hash(k), bins) % m != want or k in out:
            k += 1
        out.append(k)
    return out[0], out[1], out[2]


@define
class EpochResult:
    """The changes of one epoch: output name -> records (in arrival order)."""

    epoch: int
    changes: dict[str, list[Any]] = field(factory=dict)

    def sorted(self) -> dict[str, list[Any]]:
        """The changes with each output's records sorted (arrival order varies with
        the number of workers; the sets never do)."""
        return {k: sorted(v, key=repr) for k, v in self.changes.items()}


class GraphStream:
    """A running graph dataflow driven epoch by epoch (see the module docstring).

    Keeps a :class:`~apps.graph.views.GraphView` of the current results (``view``)
    unless ``keep_view=False``; :meth:`edges` reads the current edge set.
    ``undirected=True``: every update is one of the undirected edge ``{src, dst}``
    (PageRank sees it both ways; without it PageRank uses the updates' orientation).
    ``blocks``: the layout (:func:`build`; 1, the default, is the fastest on the
    embedded engine); ``rank_threshold``: see :mod:`apps.graph.pagerank` (with a
    threshold, a rank change is emitted only once it exceeds it, so the output does not
    grow with the graph every epoch).  ``max_workers`` and ``reconfigure`` go to
    :meth:`tstate.Dataflow.start` (migration: see :mod:`apps.graph`); ``execution``
    is the running :class:`tstate.Execution`.

    >>> import numpy as np
    >>> g = GraphStream(undirected=True)
    >>> _ = g.advance(0, np.array([[1, 2], [2, 3], [3, 1], [4, 4]]))
    >>> sorted(g.edges())[:3], g.stats.self_loops, g.view.triangle_total
    ([(1, 2), (1, 3), (2, 1)], 1, 1)
    >>> _ = g.advance(1, [(2, 1, -1)])  # the undirected edge {1, 2}, either way round
    >>> (1, 2) in g.edges() or (2, 1) in g.edges()
    False
    >>> _ = g.close()"""

    def __init__(
        self,
        algorithms: Sequence[str] = ALGORITHMS,
        workers: int = 1,
        window: Optional[int] = None,
        horizon: Optional[int] = None,
        validate: bool = True,
        on_invalid: str = "raise",
        alpha: float = 0.85,
        tol: float = 1e-10,
        keep_view: bool = True,
        bins: int = 256,
        batch_size: int = 8192,
        max_workers: Optional[int] = None,
        reconfigure: Sequence[tuple[int, Any]] = (),
        blocks: int = BLOCKS,
        rank_threshold: float = 0.0,
        undirected: bool = False,
    ) -> None:
        self.flow = ts.Dataflow("graph")
        self.input = self.flow.input("updates", batch_size=batch_size)
        self.stats = InputStats()
        self.analytics = build(
            self.flow, self.input, algorithms, window, horizon, validate, on_invalid, self.stats, alpha, tol, bins,
            blocks, rank_threshold, undirected,
        )
        self.undirected = undirected
        self._buffers: dict[str, dict[int, list[Any]]] = {}
        self._probes = []
        for name, stream in self.analytics.outputs().items():
            buf: dict[int, list[Any]] = {}
            self._buffers[name] = buf
            stream.sink(_Buffer(buf), name=f"out.{name}")
            self._probes.append(stream.probe(name=f"probe.{name}"))
        self.view: Optional[GraphView] = GraphView() if keep_view else None
        self.execution = self.flow.start(workers, max_workers=max_workers, reconfigure=reconfigure)
        self._done = -1  # every epoch <= this was returned

    def _pending(self, t: int) -> bool:
        return any(p.less_equal(t) for p in self._probes)

    def advance(self, epoch: int, updates: Union[Iterable[Any], np.ndarray] = ()) -> list[EpochResult]:
        """Send ``updates`` at ``epoch`` (not before the previous call's), run until
        every epoch ``<= epoch`` is complete, and return the results of the epochs
        completed since the last call that have changes (and always ``epoch``'s).

        ``updates`` is an iterable of ``(src, dst[, delta])``, or a numpy integer array
        of shape ``(n, 2)`` or ``(n, 3)`` (the fast path for integer ids: converted in
        bulk, self-loops and zero deltas dropped and counted)."""
        inp = self.input
        if epoch != inp.time:
            inp.advance_to(epoch)
        if isinstance(updates, np.ndarray):
            recs = self._from_array(updates)
        else:
            recs = updates if isinstance(updates, list) else list(updates)
        if recs:
            inp.send(recs)
        inp.advance_to(epoch + 1)
        self.execution.step_while(lambda: self._pending(epoch))
        return self._harvest(epoch, always=epoch)

    def _from_array(self, a: np.ndarray) -> list[Any]:
        if a.ndim != 2 or a.shape[1] not in (2, 3) or not np.issubdtype(a.dtype, np.integer):
            raise GraphInputError(
                f"an update array must be integers of shape (n, 2) or (n, 3), got {a.dtype} of shape {a.shape}"
            )
        if a.dtype.kind == "u" and len(a) and int(a.max()) > np.iinfo(np.int64).max:
            raise GraphInputError("vertex ids in an update array must fit in 64 bits")
        a = a.astype(np.int64, copy=False)
        loops = a[:, 0] == a[:, 1]
        zero = a[:, 2] == 0 if a.shape[1] == 3 else np.zeros(len(a), dtype=bool)
        keep = ~(loops | zero)
        self.stats.self_loops += int(np.count_nonzero(loops))
        self.stats.zero += int(np.count_nonzero(zero & ~loops))
        a = a[keep]
        if a.shape[1] == 2:
            return list(zip(a[:, 0].tolist(), a[:, 1].tolist(), [1] * len(a)))
        return list(zip(a[:, 0].tolist(), a[:, 1].tolist(), a[:, 2].tolist()))

    def edges(self) -> set[tuple[Any, Any]]:
        """The current directed edge set (with ``undirected``, every edge both ways):
        the pairs whose occurrence count is positive, after the last completed epoch."""
        out: set[tuple[Any, Any]] = set()
        for bucket in self.flow.state(self.analytics.edges.op, format="dict").values():
            for (a, b), (fwd, bwd) in bucket.counts.items():
                if fwd > 0:
                    out.add((a, b))
                if bwd > 0:
                    out.add((b, a))
        return out

    def close(self) -> list[EpochResult]:
        """Close the input, run to the end, and return the remaining epochs' results."""
        self.input.close()
        self.execution.run()
        return self._harvest(None)

    def _harvest(self, upto: Optional[int], always: Optional[int] = None) -> list[EpochResult]:
        times: set[int] = set()
        for buf in self._buffers.values():
            times.update(t for t in buf if upto is None or t <= upto)
        if always is not None and always > self._done:
            times.add(always)
        out = []
        for t in sorted(times):
            res = EpochResult(t, {name: buf.pop(t, []) for name, buf in self._buffers.items()})
            if self.view is not None:
                self.view.apply(t, res.changes)
            out.append(res)
        if upto is not None:
            self._done = max(self._done, upto)
        return out


class _Buffer(Sink):
    def __init__(self, buf: dict[int, list[Any]]) -> None:
        self.buf = buf

    def write(self, worker: int, time: Any, records: list[Any]) -> None:
        lst = self.buf.get(time)
        if lst is None:
            self.buf[time] = list(records)
        else:
            lst.extend(records)
