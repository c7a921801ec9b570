"""The embedded engine: N logical workers in one process, scheduled deterministically."""
