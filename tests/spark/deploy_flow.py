"""The user's own module in the deployment test (tests/spark/test_deploy.py): shipped to
the executors with ``--py-files`` and imported there as ``deploy_flow``; tstate itself
comes from the packed environment shipped with ``--archives``."""

from __future__ import annotations

import os
import sys
from typing import Any

from attrs import frozen

import tstate as ts

#: (key, value, epoch) rows
ROWS = [{"k": f"k{i % 7}", "v": i % 5, "t": i // 10} for i in range(60)]


@frozen
class Total:
    """A record the flow emits: a key's running total (an attrs class of this module,
    registered with ``flow.record_types``)."""

    key: str
    total: int


def build() -> tuple[ts.Dataflow, ts.InputStream, ts.Stream, ts.Collected]:
    flow = ts.Dataflow("deploy")
    events = flow.input("events")

    # the input feeds the operator directly: the tasks' vectorised routing (numpy, pyarrow)
    @flow.stateful(events, key=lambda r: r["k"], state=int)
    def total(n: int, r: dict, ctx: ts.Context) -> int:
        if r["v"] == 0:
            return n
        ctx.emit(Total(ctx.key, n + r["v"]))
        return n + r["v"]

    flow.record_types(Total)
    return flow, events, total, total.collect()


def where(_: Any) -> dict[str, Any]:
    """Run in a Spark task: which Python and which tstate the executor uses."""
    import msgpack
    import tstate

    return {
        "executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
        "tstate": tstate.__file__, "msgpack": msgpack.__file__, "path": list(sys.path), "cwd": os.getcwd(),
        "pid": os.getpid(),
    }
