"""A restartable graph job for the crash tests: ``python -m tests.apps.graph.job CKPT OUT ...``.

One of networkx's real graphs streamed with random deletions (``stream_of``, seeded:
replayable by position) through the graph dataflow, with checkpoints in ``CKPT`` and
every output in an exactly-once file sink ``OUT`` (one JSON line ``[output, *record]``
per change).  ``--delay`` sleeps before each epoch's batch is read (so a kill at a
random instant lands inside the run); ``--die-after N`` makes the process exit
(``os._exit``) once ``N`` epoch files have been committed by it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

import tstate as ts
from apps.graph.stream import ALGORITHMS, build
from tstate.io.sinks import FileSink


def epochs(graph: str, seed: int, n: int, delete: float) -> list[tuple[int, list[Any]]]:
    from tests.apps.graph.helpers import real_graphs, stream_of

    return stream_of(list(real_graphs()[graph].edges()), random.Random(seed), epochs=n, delete=delete)


class DyingFiles(FileSink):
    """:class:`FileSink` that exits the process after committing ``limit`` epochs, once
    a checkpoint is committed too (asynchronous checkpoints commit a few epochs after
    their time, the first one after the writer process has started)."""

    def __init__(self, directory: str, limit: int) -> None:
        super().__init__(directory)
        self.limit = limit
        self.done = 0
        self.flow: ts.Dataflow | None = None

    def _commit(self, time: Any, records: list[Any]) -> None:
        super()._commit(time, records)
        self.done += 1
        if self.done >= self.limit and self.flow is not None and self.flow.execution.coordinator.committed:
            sys.stdout.flush()
            os._exit(9)


def make(args: argparse.Namespace) -> ts.Dataflow:
    data = epochs(args.graph, args.seed, args.epochs, args.delete)

    def batches():
        for t, ups in data:
            if args.delay:
                time.sleep(args.delay)
            yield t, ups

    flow = ts.Dataflow("graph-job")
    src = flow.source(ts.io.from_batches(batches), name="edge-updates")
    a = build(flow, src, args.algorithms.split(","), window_width=args.window or None, tol=1e-7)
    tagged = [s.map(lambda r, n=name: [n, *r], name=f"tag.{name}") for name, s in a.outputs().items()]
    sink = DyingFiles(args.out, args.die_after) if args.die_after else ts.io.files(args.out)
    if isinstance(sink, DyingFiles):
        sink.flow = flow
    flow.sink(tagged[0].concat(*tagged[1:]), sink, name="out")
    return flow


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--graph", default="les_miserables")  # str vertex ids: hashes differ per process
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--delete", type=float, default=0.3)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--mode", default="async")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--die-after", type=int, default=0)
    args = ap.parse_args(argv)
    flow = make(args)
    flow.run(workers=args.workers, checkpoint=ts.Checkpoints(args.ckpt, every_epochs=args.every, mode=args.mode))
    r = flow.execution.restored
    print(f"done restored_from={r.time if r else None}")


if __name__ == "__main__":
    main()
