"""Whether Spark's size estimate of a frame bounds it: a logical plan with an operator
that can give more rows than it reads.

Spark's optimizer sizes most operators from their children's statistics: a unary
operator's estimate is its child's, scaled by the ratio of the row widths.  That bounds
a filter or a projection, but not an operator that makes rows: a Python function's
(``mapInArrow``, ``mapInPandas``, grouped and co-grouped maps, Python UDTFs), a
generator's (``explode``) or a Scala / R partition map's.  A source that reads a file per
task in a ``mapInArrow`` over a few-row ``spark.range`` is a few hundred bytes by
Spark's estimate, whatever the file holds.  :func:`unbounded` finds such an operator in
an optimized plan (by the JVM classes of :data:`ROW_MAKERS`, those this Spark has), so
that a rule on the estimate (:func:`tstate.spark.local_batch.input_bytes`) treats the
size as unknown.  A cached frame is a leaf of the optimized plan (its cache's own
statistics, exact once read): it is bounded whatever built it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ROW_MAKERS", "unbounded"]

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."

#: the logical plan operators (JVM class names) whose output Spark's estimate does not
#: bound (module docstring); a class this Spark lacks is skipped
ROW_MAKERS = tuple(
    _LOGICAL + c
    for c in (
        "MapInArrow", "MapInPandas", "FlatMapGroupsInArrow", "FlatMapGroupsInPandas", "FlatMapCoGroupsInArrow",
        "FlatMapCoGroupsInPandas", "FlatMapGroupsInPandasWithState", "BaseEvalPythonUDTF", "Generate",
        "MapPartitions", "MapPartitionsInR", "MapPartitionsInRWithArrow", "FlatMapGroupsWithState",
        "FlatMapGroupsInR", "FlatMapGroupsInRWithArrow",
    )
)  # fmt: skip


#: py4j view of a JVM -> the classes of :data:`ROW_MAKERS` it has (looked up once per JVM:
#: one Py4J round trip each, and a streaming query asks at every micro-batch)
_found: dict[Any, list[Any]] = {}


def _classes(jvm: Any) -> list[Any]:
    """The JVM classes of :data:`ROW_MAKERS` this Spark has (cached per ``jvm``: a
    process's py4j view lives as long as its JVM, across SparkContexts)."""
    out = _found.get(jvm)
    if out is None:
        out = []
        for name in ROW_MAKERS:
            try:
                out.append(jvm.java.lang.Class.forName(name))
            except Exception:  # noqa: BLE001  (py4j's error for a class this Spark lacks)
                continue
        _found[jvm] = out
    return out


def unbounded(jvm: Any, plan: Any) -> bool:
    """Whether the logical ``plan`` (a JVM ``LogicalPlan``; ``jvm``: the session's py4j
    view) holds an operator of :data:`ROW_MAKERS`."""
    classes = _classes(jvm)
    todo = [plan]
    while todo:
        node = todo.pop()
        if any(c.isInstance(node) for c in classes):
            return True
        children = node.children()
        todo.extend(children.apply(i) for i in range(children.length()))
    return False
