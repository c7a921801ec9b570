"""The embedded engine's checkpoint driver: choosing consistent times, capturing bins,
committing after the sinks, restoring (:mod:`~tstate.engine.checkpointing.coordinator`),
with copy-on-write freezing (:mod:`~tstate.engine.checkpointing.freeze`), encoding in
paced slices (:mod:`~tstate.engine.checkpointing.slices`), the helper process that
writes data files (:mod:`~tstate.engine.checkpointing.writer`) and the forked snapshot
process of ``mode="fork"`` (:mod:`~tstate.engine.checkpointing.forked`).  The format it
writes -- shared with the Spark backend -- is :mod:`tstate.checkpoint`."""
