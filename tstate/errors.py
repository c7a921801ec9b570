"""The exceptions tstate raises, and the warnings it gives.  Every error a user can
cause is one of these.

All errors derive from :class:`TstateError`, so ``except tstate.errors.TstateError``
catches everything tstate reports on purpose; all warnings from :class:`TstateWarning`
(a ``RuntimeWarning``: the run goes on).  Messages name what is wrong and where: the
operator, the time, the record, the field path or the file.

>>> issubclass(CheckpointSkippedWarning, TstateWarning) and issubclass(TstateWarning, RuntimeWarning)
True
"""

from __future__ import annotations


class TstateError(Exception):
    """Base class of every error tstate raises on purpose."""


class GraphError(TstateError):
    """The dataflow graph is malformed: a cycle without a feedback edge, an operator
    whose input was never connected, streams from different scopes mixed, ..."""


class ProgressError(TstateError):
    """Time went the wrong way: ``advance_to`` backwards, a capability downgraded to an
    earlier time, records sent at a time the sender holds no capability for."""


class InputClosedError(TstateError):
    """``send`` or ``advance_to`` on an input that was already closed."""


class InputError(TstateError):
    """What was given to an input is not what it takes: ``send`` of a ``str``, ``bytes``
    or ``dict`` (not a batch of records: wrap one record in a list), or a time that is
    not an ``int`` epoch (``2.5``, ``"7"``, a tuple).  The message names the input."""


class CapabilityLeakError(TstateError):
    """The dataflow cannot finish: an operator still holds a capability (or a source is
    still open) but nothing can make progress any more."""


class OperatorError(TstateError):
    """A user function raised.  The message names the operator, worker and time; the
    original exception is chained as ``__cause__``."""


class StateReturnError(OperatorError):
    """A stateful operator's function returned ``None`` for a state that cannot change
    in place (``state=int``, a tuple, a frozen attrs class...): it must return the new
    state.  Raised when the dataflow is built if the function has no ``return`` with a
    value at all, else when it returns ``None``; the message names the operator, the
    function, and (at run time) the key, time and record."""


class StateTypeError(TstateError):
    """A state type cannot be encoded, or a value does not match its declaration.
    The message carries the field path, e.g. ``Route.delays[]``."""


class SchemaMismatchError(TstateError):
    """Encoded state was written with a different state schema (fingerprint)."""


class KeyFunctionError(TstateError):
    """A key function raised, or returned a key that cannot be hashed or encoded."""


class ConfigurationError(TstateError):
    """An invalid option: bins not a power of two, a worker count < 1, ..."""


class CheckpointError(TstateError):
    """A checkpoint directory is missing, unwritable, torn or corrupt."""


class StateStoreError(TstateError):
    """The embedded keyed-state store (RocksDB, :mod:`tstate.state.rocksdb`) cannot be
    opened, written, checkpointed or read: an unwritable directory, a full disk, a
    missing or corrupt file.  The message names the path; a failed write applied
    nothing (a write batch is atomic) and a failed checkpoint left no files behind."""


class SourceError(TstateError):
    """A source could not be read, or a record in it is malformed (file, row, field)."""


class StateQueryError(TstateError):
    """A state query asked for a time the operator's state cannot be read at."""


class SparkError(TstateError):
    """The Spark backend cannot run a dataflow: an operator it cannot lower, a source
    DataFrame whose schema differs from what the dataflow expects, a record that cannot
    cross a Spark exchange, or a failed micro-batch."""


class RecordClassError(SparkError):
    """A record's class is not in the dataflow's allow-list of record classes: a writer
    met an unregistered attrs class or named tuple, or a shuffle cell / held-back
    records file names a class the dataflow never registered (its module is not
    imported).  The message names the class path, where it came from, and how to
    register it (``flow.record_types(cls)``)."""


# -- warnings -----------------------------------------------------------------------


class TstateWarning(RuntimeWarning):
    """Base class of every warning tstate gives: something went wrong or was left out,
    and the run goes on."""


class CheckpointSkippedWarning(TstateWarning):
    """A checkpoint was skipped, and the message names each and why:

    - *recovery* skipped unusable checkpoints (torn, corrupt, missing files, a stored
      schema it cannot read): it resumed from an older one, or
      (``fresh_if_unusable=True``) from empty state; they are kept on disk as evidence;
    - a checkpoint *due* while the previous one was still being encoded or written
      (``mode="async"``) was not taken: the next one holds its changes."""


class CheckpointLostWarning(TstateWarning):
    """A checkpoint was abandoned because its snapshot process died (``mode="fork"``;
    the run goes on, and the next checkpoint writes every bin whole)."""


class CheckpointRepairedWarning(TstateWarning):
    """Recovery found files missing or corrupt in one copy of a replicated store and
    rewrote them from the other copy (the message names each file and which copy)."""


class CheckpointReplicaWarning(TstateWarning):
    """A committed checkpoint could not be copied to the store's replica (the message
    says why); the next commit copies what is missing."""
