"""Keyed state split into bins: the unit of ownership, migration, checkpoints and recovery."""
