"""Checkpoint settings: :class:`Checkpoints`, what both engines take as ``checkpoint=``.

The embedded engine uses every field (:meth:`tstate.Dataflow.run`, ``checkpoint=``); the
Spark backend commits a checkpoint after every micro-batch and takes the location and
store settings (``directory``, ``retain``, ``compact_after``, ``resume``,
``fresh_if_unusable``, ``replica``) from it -- the cadence, ``mode`` and ``restore`` do
not apply there.  A plain string is ``Checkpoints(directory)``.

>>> Checkpoints("/tmp/ckpt", every_epochs=5).mode
'async'
>>> Checkpoints("/tmp/ckpt", mode="later")
Traceback (most recent call last):
...
tstate.errors.ConfigurationError: checkpoint mode must be one of 'async', 'fork', 'thread', 'sync', got 'later'
"""

from __future__ import annotations

import os
import sys

from typing import Any, Literal, Optional, Union, get_args

from attrs import field, frozen

from tstate.errors import ConfigurationError

__all__ = ["Checkpoints", "Mode", "MODES", "Restore", "RESTORES", "settings", "fork_available"]


def fork_available() -> bool:
    """Whether snapshot processes (``mode="fork"``) can be used here: ``os.fork`` exists
    and forking an interpreter is safe (Linux and the BSDs; not Windows, nor macOS,
    whose system frameworks may crash a forked child: there ``mode="async"`` uses a
    thread)."""
    return hasattr(os, "fork") and (sys.platform.startswith("linux") or "bsd" in sys.platform)

#: a checkpoint mode (see the module docstring)
Mode = Literal["async", "fork", "thread", "sync"]
MODES: tuple[Mode, ...] = get_args(Mode)


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, (int, float)) or value <= 0):
        raise ConfigurationError(f"{attribute.name} must be positive, got {value!r}")


#: how an execution restores its bins (the embedded engine's tstate.engine.checkpointing.lazy)
Restore = Literal["lazy", "eager"]
RESTORES: tuple[Restore, ...] = get_args(Restore)


def _restore_mode(instance: Any, attribute: Any, value: str) -> None:
    if value not in RESTORES:
        raise ConfigurationError(f"checkpoint restore must be one of {', '.join(map(repr, RESTORES))}, got {value!r}")


def _mode(instance: Any, attribute: Any, value: str) -> None:
    if value not in MODES:
        raise ConfigurationError(f"checkpoint mode must be one of {', '.join(map(repr, MODES))}, got {value!r}")
    if value == "fork":
        if not fork_available():
            raise ConfigurationError(
                "checkpoint mode 'fork' needs a platform that can fork safely (Linux, BSD); "
                "use 'async' (a background thread here) or 'thread'"
            )


@frozen
class Checkpoints:
    """Checkpoint settings for both engines (see the module docstring).

    ``directory``: where checkpoints live: a local directory (created if missing) or an
    object-store URL (``s3://bucket/prefix``, ``gs://``, ``abfs://``, ``hdfs://``; see
    :mod:`tstate.checkpoint.location`; ``mode="fork"`` writes from a thread there);
    ``every_epochs`` /
    ``every_seconds``: how often (either or both; default every 10 epochs);
    ``mode``: ``"async"`` (freeze on the processing path, encode in paced slices between
    steps, write from a helper process: see the module docstring), ``"thread"`` (encode
    and write on a background thread), ``"fork"`` (in a forked snapshot process) or
    ``"sync"`` (all on the processing path); ``retain``: how many
    committed checkpoints to keep; ``compact_after``: deltas per bin before a full
    snapshot is written; ``resume``: start from the latest usable checkpoint if there
    is one (``False``: start from empty state, ignoring the directory's checkpoints).

    Resuming never starts from empty state by surprise: newer checkpoints that are
    unusable (torn, corrupt, missing files) are skipped with a
    :class:`~tstate.errors.CheckpointSkippedWarning` naming each and why; if
    checkpoints exist but none is usable, the run stops with a
    :class:`~tstate.errors.CheckpointError` listing them, unless
    ``fresh_if_unusable=True`` (then it starts from empty state, with the warning).
    Unusable checkpoints are never deleted automatically (evidence; see
    :mod:`tstate.checkpoint.store`).

    ``replica``: a second directory or URL that receives a copy of every committed
    checkpoint, for a store that is not replicated itself; recovery reads whichever copy
    is reachable and intact and repairs the other (see :mod:`tstate.checkpoint.store`).

    ``restore`` (embedded engine): how a resumed run installs the checkpoint's bins:
    ``"lazy"`` (the default) resumes processing at once and decodes each bin when a
    record, a timer, a migration or a state query first needs it, and the rest between
    steps, paced so no step absorbs the restore: the time to the first output depends on
    the bins the first records touch, not on the whole state
    (:mod:`tstate.engine.checkpointing.lazy`); ``"eager"`` decodes every bin before the first step
    (a run then never pays a bin's decoding later, on its processing path).  Either way
    the checkpoint is verified first and the output is the same.  (On Spark the
    executors always read each bin when a batch first needs it:
    :mod:`tstate.spark.restore`.)"""

    directory: str = field(converter=str)
    every_epochs: Optional[int] = field(default=10, validator=_positive)
    every_seconds: Optional[float] = field(default=None, validator=_positive)
    mode: Mode = field(default="async", validator=_mode)
    retain: int = 3
    compact_after: int = 8
    resume: bool = True
    fresh_if_unusable: bool = False
    replica: Optional[str] = field(default=None, converter=lambda v: None if v is None else str(v))
    restore: Restore = field(default="lazy", validator=_restore_mode)


def settings(checkpoint: Union[str, Checkpoints]) -> Checkpoints:
    """``checkpoint`` as :class:`Checkpoints` (a string is its directory)."""
    return checkpoint if isinstance(checkpoint, Checkpoints) else Checkpoints(checkpoint)
