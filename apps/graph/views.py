"""Views: the current results, folded from the per-epoch change streams.

The algorithms emit *changes*; a :class:`View` applies them to a ``dict`` and checks
that every change starts from the value the view holds (``old``), so a consumer that
saw every epoch's changes holds exactly the current result.  :class:`GraphView` keeps
one view per output of :func:`apps.graph.stream.build` and answers the app's questions
(number of components, largest component, top PageRank vertices, triangle total).
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable, Mapping, Optional

from apps.graph.edges import vertex_rank

__all__ = ["View", "GraphView", "InconsistentChange"]


class InconsistentChange(AssertionError):
    """A change whose ``old`` is not the value the view holds."""


class View:
    """``{key: value}`` maintained from ``(key, old, new)`` changes (``None`` = absent)."""

    def __init__(self, name: str = "view", strict: bool = True) -> None:
        self.name = name
        self.strict = strict
        self.data: dict[Any, Any] = {}

    def apply(self, changes: Iterable[Any]) -> None:
        data = self.data
        for key, old, new in changes:
            if self.strict:
                cur = data.get(key)
                if cur != old:
                    raise InconsistentChange(f"{self.name}: change of {key!r} from {old!r}, but the view has {cur!r}")
            if new is None:
                data.pop(key, None)
            else:
                data[key] = new

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"View({self.name!r}, {len(self.data)} entries)"


class GraphView:
    """The current results of every algorithm (see the module docstring)."""

    def __init__(self, strict: bool = True) -> None:
        self.degrees = View("degrees", strict)
        self.distribution = View("degree distribution", strict)
        self.labels = View("components", strict)
        self.summary: Optional[tuple[int, int]] = None
        self.ranks = View("pagerank", strict)
        self.triangles = View("triangles", strict)
        self.triangle_total = 0
        self.epoch: Optional[int] = None

    def apply(self, epoch: int, changes: Mapping[str, list[Any]]) -> None:
        """Apply one epoch's changes (a :class:`~apps.graph.stream.EpochResult`'s)."""
        self.epoch = epoch
        for name, recs in changes.items():
            if not recs:
                continue
            if name == "degrees":
                self.degrees.apply(recs)
            elif name == "distribution":
                self.distribution.apply(recs)
            elif name == "components":
                self.labels.apply(recs)
            elif name == "summary":
                if len(recs) != 1:
                    raise InconsistentChange(f"{len(recs)} component summaries at epoch {epoch}")
                self.summary = tuple(recs[0])  # type: ignore[assignment]
            elif name == "pagerank":
                self.ranks.apply(recs)
            elif name == "triangles":
                self.triangles.apply(recs)
            elif name == "triangle_total":
                for _key, old, new in recs:
                    if self.triangles.strict and old != self.triangle_total:
                        raise InconsistentChange(f"triangle total from {old}, but the view has {self.triangle_total}")
                    self.triangle_total = new
            else:
                raise KeyError(f"unknown output {name!r}")

    # -- questions --------------------------------------------------------------------
    def component_count(self) -> int:
        return self.summary[0] if self.summary else 0

    def largest_component(self) -> int:
        return self.summary[1] if self.summary else 0

    def components(self) -> dict[Any, set[Any]]:
        """label -> the set of its vertices."""
        out: dict[Any, set[Any]] = {}
        for v, lab in self.labels.data.items():
            out.setdefault(lab, set()).add(v)
        return out

    def top_ranks(self, k: int = 10) -> list[tuple[Any, float]]:
        """The ``k`` vertices with the highest PageRank (ties by vertex order)."""
        return heapq.nsmallest(k, self.ranks.data.items(), key=lambda p: (-p[1], vertex_rank(p[0])))

    def histogram(self) -> list[int]:
        """The degree histogram as ``nx.degree_histogram`` (index = degree)."""
        data = self.distribution.data
        if not data:
            return []
        out = [0] * (max(data) + 1)
        for d, n in data.items():
            out[d] = n
        return out
