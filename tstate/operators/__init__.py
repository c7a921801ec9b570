"""Operator runtimes of the embedded engine (internal): one per plan node type, built
from the node (:mod:`tstate.engine.lowering`), talking to the engine through
:class:`~tstate.operators.base.Host` and to the progress tracker through a
:class:`~tstate.progress.shared.SharedProgress`.  The Spark backend hosts the stateful
one in its tasks (:mod:`tstate.spark.host`)."""
