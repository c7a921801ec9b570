"""What a Spark run does before its first micro-batch (driver side): bind the
DataFrames to the dataflow's inputs (:func:`bind`), check that the checkpoint it
resumes from fits the dataflow (:func:`check_resumed`), choose who verifies the
checkpoint's files (:func:`verifier`), and put the last committed batch's output back
in place (:func:`recover_output`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from tstate.errors import ConfigurationError, SparkError
from tstate.plan import Stateful
from tstate.spark.source import Source, check_source

if TYPE_CHECKING:  # pragma: no cover
    from tstate.metrics import Metrics
    from tstate.spark.batch import Job
    from tstate.spark.committed import Committed
    from tstate.spark.plan import Plan

__all__ = ["bind", "check_resumed", "verifier", "recover_output"]


def bind(plan: "Plan", flow_name: str, given: dict[str, Any]) -> dict[str, Source]:
    """The inputs' bindings (a bare DataFrame is a :class:`Source` without a time
    column): one per input of the dataflow and none else, each passing
    :func:`~tstate.spark.source.check_source`."""
    bound = {k: (v if isinstance(v, Source) else Source(v)) for k, v in given.items()}
    for name in bound:
        if name not in plan.inputs:
            raise SparkError(f"a DataFrame is bound to {name!r}, but the dataflow has no such input (inputs: {', '.join(plan.inputs) or 'none'})")
    for name in plan.inputs:
        if name not in bound:
            raise SparkError(f"input {name!r} of dataflow {flow_name!r} has no DataFrame: pass {{{name!r}: df}}")
    for name, src in bound.items():
        check_source(name, src)
    return bound


def check_resumed(plan: "Plan", head: Any) -> None:
    """Checkpoint ``head`` holds state the dataflow's stateful operators can read: the
    same schema (or a compatible one), bin count and key hash."""
    from tstate.checkpoint.schema_check import check_compatible
    from tstate.hash_kind import check_hash_kind, hash_kind_of

    for b in plan.boundaries:
        pn = plan.nodes[b]
        entry = head.operators.get(pn.name)
        if not isinstance(pn.op, Stateful) or entry is None:
            continue
        check_compatible(pn.name, entry.schema, pn.stateful.schema)
        if entry.bins != pn.bins:
            raise ConfigurationError(
                f"operator {pn.name!r}: checkpoint {head.id} has {entry.bins} bins, the dataflow {pn.bins}"
            )
        check_hash_kind(pn.name, head.id, entry.hash, hash_kind_of(pn.stateful.key))


def verifier(
    spark: Any, store: Any, directory: str, plan: "Plan", owners: dict[int, list[int]], partitions: int, verify_by: str,
    metrics: "Metrics",
) -> Callable[[Any], list[str]]:
    """How recovery checks a candidate checkpoint's files of ``store`` (at ``directory``): by the executors
    (``owners``: per boundary, the partition of each bin over ``partitions``) when
    ``verify_by`` says so (:mod:`tstate.spark.restore`), else on the driver; says which
    in ``metrics.verified_by``."""
    from tstate.checkpoint.fs import LocalFS
    from tstate.checkpoint.schema_check import fingerprint_check, stored_fingerprints
    from tstate.spark.restore import use_executors, verify_on_executors

    by_name = {plan.nodes[b].name: list(o) for b, o in owners.items()}
    local = isinstance(store.fs, LocalFS)

    stateful = [plan.nodes[b].name for b in plan.boundaries if isinstance(plan.nodes[b].op, Stateful)]

    def verify(m: Any) -> list[str]:
        # a stored schema that does not parse, or that its files were not written
        # with (altered), makes the checkpoint unusable like a damaged file
        fingerprints, bad = stored_fingerprints(m, stateful)
        if bad:
            return bad
        check = fingerprint_check(m, fingerprints)
        if not use_executors(verify_by, m, local=local):
            metrics.verified_by = "driver"
            return store.verify(m, check=check)
        metrics.verified_by = "executors"
        bad = verify_on_executors(spark, directory, m, by_name, partitions, check)
        if bad and store.replica is not None:
            return store.verify(m, check=check)  # the driver reads the bad files from the replica and repairs them
        return bad

    return verify


def recover_output(store: Any, spark: Any, directory: str, job: "Job", committed: "Committed") -> None:
    """At a (re)start: delete the output an uncommitted batch left, and write the last
    committed batch's epoch files again (the driver may have died between its commit
    and them; the same bytes again otherwise)."""
    from tstate.spark.output import clean, finalise, read_index, sink_dir

    fs, plan = store.fs, job.plan
    keep = {p.path for p in committed.pending}
    last: list[Any] = []
    if committed.output is not None:
        b, _prev, parts = read_index(fs, committed.output)
        if b == committed.batch:
            keep |= {p.path for p in parts} | {committed.output}
            last = parts
    clean(fs, [sink_dir(plan, node) for node in plan.sinks], max(committed.batch, 0), keep)
    files = {node: sink for node, sink in job.sinks.items() if not sink.on_driver and hasattr(sink, "commit_epoch")}
    finalise(spark, directory, files, last, plan.records)
