"""Loop-heavy dataflows: what progress tracking costs per activation, before and after.

*Before* is tstate's previous progress tracking: the all-pairs tracker
(:mod:`tstate.progress.reference`: every pointstamp change applied to the counts at every
input it can reach) propagated after every activation
(``Execution.eager_propagation``).  *After* is the worklist tracker
(:mod:`tstate.progress.reachability`: a change travels only as far as it moves a
frontier) propagated only in front of operators that read a frontier.

Two workloads, each run once per mode:

- **bounce**: an iterate scope where a stateful operator sends each of 4 keys around
  the loop 1,000 times per epoch (5 epochs), on 1 and 4 workers: nothing but rounds;
- **graph**: ``apps.graph`` (all four algorithms) on the airport graph under 1% edge
  churn per epoch (``benchmarks.graph``'s workload), 1 worker.

Per run: the CPU time per activation (and per loop round for *bounce*), and the
tracker's cost per activation, measured by recording every tracker call of the run
and replaying them into a fresh tracker of the mode's kind (no instrumentation in the
timed part); its share is that over the run's CPU time.  CPU times
(``time.process_time``), so that other processes on the machine matter less.

    python -m benchmarks.loops
    python -m benchmarks.loops --quick
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, Callable, Iterator, Optional

import tstate as ts
import tstate.engine.execution as execution
from tstate.progress.reference import all_pairs
from benchmarks.common import table

MODES = ("before", "after")


class _Recorder:
    """A tracker that logs every call it forwards (for the replay)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.log: list[tuple[int, Any]] = []

    def update_source(self, *a: Any) -> None:
        self.log.append((0, a))
        self.inner.update_source(*a)

    def update_target(self, *a: Any) -> None:
        self.log.append((1, a))
        self.inner.update_target(*a)

    def propagate(self) -> list[tuple[int, int]]:
        self.log.append((2, None))
        return self.inner.propagate()  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def _mode(mode: str, record: bool) -> Iterator[list[Any]]:
    """Executions started inside use the mode's tracker and propagation; with
    ``record`` their trackers log every call (yielded: (builder, recorder) pairs)."""
    runs: list[Any] = []
    orig = execution.Execution._build_tracker

    def build(self: Any) -> Any:
        b = self._graph()
        tracker = all_pairs(b) if mode == "before" else b.build()
        if record:
            tracker = _Recorder(tracker)
            runs.append((b, tracker))
        return tracker

    execution.Execution._build_tracker = build  # type: ignore[method-assign]
    execution.Execution.eager_propagation = mode == "before"
    try:
        yield runs
    finally:
        execution.Execution._build_tracker = orig  # type: ignore[method-assign]
        execution.Execution.eager_propagation = False


def _replay(mode: str, builder: Any, log: list[tuple[int, Any]], repeat: int = 3) -> float:
    """CPU seconds a fresh tracker of ``mode`` takes for the recorded calls (best of
    ``repeat``)."""
    best = float("inf")
    for _ in range(repeat):
        t = all_pairs(builder) if mode == "before" else builder.build()
        us, ut, pr = t.update_source, t.update_target, t.propagate
        t0 = time.process_time()
        for kind, a in log:
            if kind == 0:
                us(*a)
            elif kind == 1:
                ut(*a)
            else:
                pr()
        best = min(best, time.process_time() - t0)
    return best


# -- workloads: each returns (executions started, a function running it) -----------------
def bounce(workers: int, rounds: int, epochs: int = 5, keys: int = 4) -> Callable[[], Any]:
    def run() -> Any:
        flow = ts.Dataflow("bounce")
        inp = flow.input("x")

        @flow.iterate(inp, name="loop")
        def loop(scope: ts.Scope, x: ts.Stream) -> ts.Stream:
            fb = scope.feedback(name="fb")
            both = x.concat(fb.stream)

            @flow.stateful(both, key=itemgetter(0), state=int, name="bounce", bins=64)
            def hop(n: int, rec: tuple[int, int], ctx: ts.Context) -> int:
                if rec[1] > 0:
                    ctx.emit((rec[0], rec[1] - 1))
                return n + 1

            fb.connect(hop)
            return hop.filter(lambda r: r[1] == 0)

        probe = loop.probe()
        ex = flow.start(workers)
        for e in range(epochs):
            inp.send([(k, rounds) for k in range(keys)])
            inp.advance_to(e + 1)
            ex.step_while(lambda: probe.less_equal(e))
        inp.close()
        ex.run()
        return ex

    return run


def graph_app(epochs: int) -> Callable[[], Any]:
    from apps.graph.stream import GraphStream
    from benchmarks.graph_inputs import Churn, airport_edges

    edges = airport_edges()
    ch = Churn(edges, 0.01, seed=11)
    batches = [ch.epoch() for _ in range(epochs)]

    def run() -> Any:
        g = GraphStream(workers=1, validate=False)
        g.advance(0, [(u, v, 1) for u, v in edges])
        for t, ups in enumerate(batches, start=1):
            g.advance(t, ups)
        g.close()
        return g.execution

    return run


def measure(name: str, run: Callable[[], Any], rounds: Optional[int]) -> list[dict[str, Any]]:
    rows = []
    for mode in MODES:
        gc.collect()
        with _mode(mode, record=False):
            t0 = time.process_time()
            ex = run()
            cpu = time.process_time() - t0
        with _mode(mode, record=True) as runs:
            run()
        builder, rec = runs[0]
        replay = _replay(mode, builder, rec.log)
        acts = ex.activations
        row = {
            "workload": name,
            "mode": mode,
            "activations": acts,
            "propagates": sum(1 for k, _ in rec.log if k == 2),
            "cpu_us_per_activation": cpu / acts * 1e6,
            "tracker_us_per_activation": replay / acts * 1e6,
            "tracker_share": replay / cpu,
        }
        if rounds:
            row["us_per_round"] = cpu / rounds * 1e6
        rows.append(row)
    return rows


def tracker_figures(quick: bool = False) -> dict[str, Any]:
    """Run the workloads; return the before/after figures (also printed as a table)."""
    r = 200 if quick else 1000
    rows: list[dict[str, Any]] = []
    rows += measure("bounce, 1 worker", bounce(1, r), 5 * r)
    rows += measure("bounce, 4 workers", bounce(4, r), 5 * r)
    rows += measure("graph app, airports 1% churn", graph_app(3 if quick else 10), None)
    print(
        "progress tracking in loops (CPU time): before = all-pairs tracker propagated after every "
        "activation, after = worklist tracker propagated in front of frontier readers"
    )
    print(
        table(
            ["workload", "mode", "activations", "propagates", "us/activation", "tracker us/activation",
             "tracker share", "us/round"],
            [
                [
                    x["workload"], x["mode"], x["activations"], x["propagates"], f"{x['cpu_us_per_activation']:.1f}",
                    f"{x['tracker_us_per_activation']:.1f}", f"{x['tracker_share']:.0%}",
                    f"{x['us_per_round']:.0f}" if "us_per_round" in x else "",
                ]
                for x in rows
            ],
        )
    )
    out: dict[str, Any] = {}
    for x in rows:
        key = "loops." + x["workload"].split(",")[0].replace(" ", "_") + (
            ".w4" if "4 workers" in x["workload"] else ""
        )
        out[f"{key}.{x['mode']}.tracker_us_per_activation"] = round(x["tracker_us_per_activation"], 2)
        out[f"{key}.{x['mode']}.tracker_share"] = round(x["tracker_share"], 3)
        if "us_per_round" in x:
            out[f"{key}.{x['mode']}.us_per_round"] = round(x["us_per_round"], 1)
    return out


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and epochs")
    args = ap.parse_args(argv)
    print(json.dumps(tracker_figures(args.quick), sort_keys=True))


if __name__ == "__main__":
    main()
