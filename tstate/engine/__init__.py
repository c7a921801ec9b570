"""The embedded engine: N logical workers in one process, scheduled deterministically.

It lowers a plan (:mod:`tstate.plan`) to one operator runtime per node and worker
(:mod:`~tstate.engine.lowering`, :mod:`tstate.operators`), runs it
(:mod:`~tstate.engine.execution`, :mod:`~tstate.engine.channels`), checkpoints it
(:mod:`tstate.engine.checkpointing`), and is a :class:`tstate.backend.Backend`
(:mod:`~tstate.engine.embedded`)."""
