"""The embedded engine's checkpoint driver: choosing consistent times, capturing bins and
committing after the sinks (:mod:`~tstate.engine.checkpointing.coordinator`, each
captured checkpoint a :mod:`~tstate.engine.checkpointing.pending` record until
committed), restoring (:mod:`~tstate.engine.checkpointing.restore`,
:mod:`~tstate.engine.checkpointing.lazy`), with copy-on-write freezing
(:mod:`~tstate.engine.checkpointing.freeze`), encoding in paced slices
(:mod:`~tstate.engine.checkpointing.slices`), the helper process that writes data files
(:mod:`~tstate.engine.checkpointing.writer`) and the forked snapshot processes of
``mode="fork"`` (:mod:`~tstate.engine.checkpointing.fork_capture`,
:mod:`~tstate.engine.checkpointing.forked`).  The format it writes -- shared with the
Spark backend -- is :mod:`tstate.checkpoint`."""
