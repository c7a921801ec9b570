"""What a Spark run's user reads back (driver side): an operator's committed state
(:func:`state_of`) and a sink's committed output (:func:`output_of`), as DataFrames the
executors read from the checkpoint directory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from tstate.errors import SparkError
from tstate.plan import Sink as SinkNode
from tstate.plan import Stateful

if TYPE_CHECKING:  # pragma: no cover
    from tstate.spark.batch import Job
    from tstate.spark.frame import StateFrame

__all__ = ["state_of", "output_of", "sink_of"]


def state_of(spark: Any, store: Any, directory: str, partitions: int, flow: Any, op: Any) -> "StateFrame":
    """The committed state of stateful operator ``op`` of ``flow`` (None: nothing has
    run) in ``store`` at ``directory``, read by ``partitions`` tasks
    (:meth:`tstate.spark.backend.Backend.state`)."""
    from tstate.spark.frame import StateFrame, state_frame

    if flow is None:
        raise SparkError("nothing has run on this backend yet")
    node = flow.graph[op.node]
    if not isinstance(node, Stateful):
        raise SparkError(f"operator {node.name!r} is not a stateful operator")
    return StateFrame(node.name, state_frame(spark, store, directory, partitions, node.name, node.state))


def output_of(
    spark: Any, store: Any, directory: str, flow: Any, job: "Optional[Job]", op: Any, batch: Optional[int], schema: Any
) -> Any:
    """The committed output of ``op``'s sink in ``flow`` (None: nothing has run; ``job``:
    the run's) in ``store`` at ``directory`` (:meth:`tstate.spark.backend.Backend.output`)."""
    from tstate.spark.output import frame, history

    if flow is None or job is None:
        raise SparkError("nothing has run on this backend yet")
    node = sink_of(flow, op)
    head = store.latest()
    index = head.meta.get("spark", {}).get("output") if head is not None else None
    found = [
        (b, p) for b, parts in history(store.fs, index) if batch is None or b == batch
        for p in parts if p.sink == node
    ]  # fmt: skip
    found.reverse()
    return frame(spark, directory, store.fs, found, schema, job.plan.records)


def sink_of(flow: Any, op: Any) -> int:
    """The sink node of ``op`` in ``flow`` (a stream feeding a sink, a sink or a sink's name)."""
    from tstate.io.sinks import Sink

    graph = flow.graph
    specs = graph.of_type(SinkNode)
    if isinstance(op, str):
        found = [i for i, s in specs if s.name == op]
        what = f"sink {op!r}"
    elif isinstance(op, Sink):
        found = [i for i, s in specs if s.sink is op]
        what = f"sink {op!r}"
    else:
        node, port = getattr(op, "node", None), getattr(op, "port", 0)
        found = [i for i, _s in specs if node is not None and (node, port) in graph.sources(i)]
        what = f"operator {graph[node].name!r}" if isinstance(node, int) else repr(op)
    if not found:
        raise SparkError(
            f"{what} has no sink in dataflow {flow.name!r}: its output is not kept; add one, e.g. "
            "stream.sink(ts.io.keep()) (sinks: " + ", ".join(repr(s.name) for _i, s in specs) + ")"
        )
    return found[0]
