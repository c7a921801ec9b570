"""Where the graph app's time goes: a cProfile of :class:`apps.graph.GraphStream` per
algorithm, on the graph and churn of :mod:`benchmarks.graph` (default: the airport
graph at 0.1% churn, the setting of issue 14's ">= 5x networkx" target).

For each algorithm alone and all four together, the stream is loaded (epoch 0, not
profiled), then ``--epochs`` epochs of churn run under cProfile.  Reported per row:
CPU ms per epoch with and without the profiler (its overhead inflates small calls),
the share of the profiled time by *where* it is spent (own time of the functions,
grouped: the algorithm's code in ``apps/graph``, numpy, the engine in ``tstate``, the
app's driving code -- input, consolidation, sinks, the view -- and the rest), and the
top functions by own time.

    python -m benchmarks.graph_profile                       # airports, 0.1%
    python -m benchmarks.graph_profile --graph powerlaw --churn 0.01
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from typing import Any, Optional

from apps.graph.stream import ALGORITHMS, GraphStream
from benchmarks.graph import ALL
from benchmarks.graph_inputs import Churn, airport_edges, powerlaw_edges

#: own-time groups, by the file a function is in (first match wins)
GROUPS = [
    ("PageRank (apps/graph/pagerank.py)", "apps/graph/pagerank.py"),
    ("components (apps/graph/components.py, forest.py)", ("apps/graph/components.py", "apps/graph/forest.py")),
    ("triangles (apps/graph/triangles.py)", "apps/graph/triangles.py"),
    ("degrees (apps/graph/degrees.py)", "apps/graph/degrees.py"),
    ("app driving (apps/graph: edges, stream, views)", "apps/graph/"),
    ("engine: stateful operator (tstate/operators/stateful.py)", "tstate/operators/stateful.py"),
    ("engine: progress tracking (tstate/progress)", "tstate/progress/"),
    ("engine: scheduling (tstate/engine)", "tstate/engine/"),
    ("engine: other (tstate)", "tstate/"),
    ("numpy", ("numpy", "<built-in method numpy", "<method '", "{method '")),
]


def _group(file: str, fn: str) -> str:
    for name, pats in GROUPS:
        for p in (pats,) if isinstance(pats, str) else pats:
            if p in file or (file == "~" and p in fn):
                return name
    return "Python builtins and the rest"


def profile_row(alg: str, graph: str, churn: float, epochs: int, tol: float) -> dict[str, Any]:
    edges = airport_edges() if graph == "airports" else powerlaw_edges(20_000)
    algs = ALGORITHMS if alg == ALL else (alg,)
    out: dict[str, Any] = {"alg": alg}
    for profiled in (False, True):
        ch = Churn(edges, churn, seed=11)
        g = GraphStream(algs, workers=1, validate=False, tol=tol)
        g.advance(0, [(u, v, 1) for u, v in edges])
        ups = [ch.epoch() for _ in range(epochs)]
        gc.collect()
        gc.freeze()
        prof = cProfile.Profile() if profiled else None
        t0 = time.process_time()
        if prof is not None:
            prof.enable()
        for t, u in enumerate(ups, start=1):
            g.advance(t, u)
        if prof is not None:
            prof.disable()
        ms = (time.process_time() - t0) * 1000 / epochs
        g.close()
        gc.unfreeze()
        if prof is None:
            out["ms"] = ms
            continue
        out["ms_profiled"] = ms
        st = pstats.Stats(prof)
        total = 0.0
        groups: dict[str, float] = {}
        rows = []
        for (file, line, fn), (cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
            total += tt
            grp = _group(file, fn)
            groups[grp] = groups.get(grp, 0.0) + tt
            rows.append((tt, nc, ct, f"{_short(file)}:{line}({fn})"))
        rows.sort(reverse=True)
        out["total"] = total
        out["groups"] = sorted(groups.items(), key=lambda kv: -kv[1])
        out["top"] = rows[:15]
        out["passes"] = _passes(st) / epochs
    return out


def _passes(st: pstats.Stats) -> float:
    # one pass = one `big.any()` in PageRank's _push (the last one finds nothing to push)
    n = 0
    for (f, _l, fn), (_cc, _nc, _tt, _ct, callers) in st.stats.items():  # type: ignore[attr-defined]
        if fn == "<method 'any' of 'numpy.ndarray' objects>":
            n += sum(v[1] for (cf, _cl, cfn), v in callers.items() if cf.endswith("pagerank.py") and cfn == "_push")
    return float(n)


def _short(file: str) -> str:
    for root in ("/apps/", "/tstate/", "/numpy/"):
        i = file.rfind(root)
        if i >= 0:
            return file[i + 1 :]
    return file


def render(rows: list[dict[str, Any]], graph: str, churn: float, epochs: int) -> str:
    lines = [
        f"cProfile of apps.graph.GraphStream: {graph}, {churn:.1%} churn, {epochs} epochs, one worker, CPU time",
        "",
    ]
    for r in rows:
        lines.append(
            f"== {r['alg']}: {r['ms']:.2f} ms/epoch ({r['ms_profiled']:.2f} under the profiler)"
            + (f"; PageRank push passes per epoch: {r['passes']:.1f}" if r["passes"] else "")
        )
        lines.append("   own time by where it is spent:")
        for name, tt in r["groups"]:
            lines.append(f"   {100 * tt / r['total']:5.1f}%  {name}")
        lines.append("   top functions by own time (share, calls per epoch, function):")
        for tt, nc, _ct, name in r["top"][:10]:
            lines.append(f"   {100 * tt / r['total']:5.1f}%  {nc / epochs:8.1f}  {name}")
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="airports", choices=["airports", "powerlaw"])
    ap.add_argument("--churn", type=float, default=0.001)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--tol", type=float, default=1e-10)
    ap.add_argument("--algorithms", default=",".join([*ALGORITHMS, ALL]))
    a = ap.parse_args(argv)
    rows = [profile_row(alg, a.graph, a.churn, a.epochs, a.tol) for alg in a.algorithms.split(",")]
    print(render(rows, a.graph, a.churn, a.epochs))


if __name__ == "__main__":
    main()
