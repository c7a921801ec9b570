"""What a Spark run tells its user on stderr: a line or bar per micro-batch, and
whether it resumed.

``Backend(..., progress=...)``:

- ``True``: a tqdm bar with one step per micro-batch (``done/total`` when the run knows
  its batches, as ``Backend.run`` does), showing per batch the output records, the
  input rows (``BatchMetrics.records``: each row once, :mod:`tstate.spark.input_rows`), the committed state's bytes and the batch's seconds; plus the
  notices below.
- ``None`` (the default): only the notices, one line each —
  ``resumed at batch 12 of 40 (11 committed in DIR)`` or
  ``nothing left to do: batch 40 of 40 is committed in DIR``.
- ``False``: silent.

Batches are counted from 1 here (the ``batch`` ids in the manifests and metrics count
from 0).

>>> import io
>>> out = io.StringIO()
>>> p = Progress(None, out)
>>> p.resumed("ckpt", done=11, total=40)
>>> p.finished_already("ckpt", done=40)
>>> print(out.getvalue(), end="")
tstate: resumed at batch 12 of 40 (11 committed in ckpt)
tstate: nothing left to do: batch 40 of 40 is committed in ckpt
"""

from __future__ import annotations

import sys
from typing import Any, Optional, TextIO

__all__ = ["Progress"]


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Progress:
    """Per-batch progress and resume notices of one backend (see the module docs)."""

    def __init__(self, mode: Optional[bool], file: Optional[TextIO] = None) -> None:
        if mode not in (None, True, False):
            from tstate.errors import ConfigurationError

            raise ConfigurationError(f"progress must be True, False or None, got {mode!r}")
        self.mode = mode
        self.file = file
        self._bar: Any = None

    def _out(self) -> TextIO:
        return self.file or sys.stderr

    def _say(self, line: str) -> None:
        if self.mode is False:
            return
        if self._bar is not None:
            self._bar.write(f"tstate: {line}", file=self._out())
        else:
            print(f"tstate: {line}", file=self._out(), flush=True)

    def resumed(self, where: str, done: int, total: Optional[int]) -> None:
        """A run continuing after ``done`` committed batches (of ``total`` if known)."""
        of = f" of {total}" if total is not None else ""
        self._say(f"resumed at batch {done + 1}{of} ({done} committed in {where})")

    def finished_already(self, where: str, done: int) -> None:
        """A run whose every batch (``done``) was committed by an earlier run."""
        self._say(f"nothing left to do: batch {done} of {done} is committed in {where}")

    def start(self, total: Optional[int], done: int) -> None:
        """Batches ``done`` of ``total`` (None: unknown, streaming) are committed."""
        if self.mode is not True:
            return
        from tqdm import tqdm

        self.close()
        self._bar = tqdm(
            total=total, initial=done, unit="batch", file=self._out(), dynamic_ncols=True, leave=True,
            desc="micro-batches",
        )  # fmt: skip

    def batch(self, m: Any, head: Any) -> None:
        """Batch ``m`` (:class:`~tstate.spark.backend.BatchMetrics`) committed as ``head``."""
        if self.mode is not True:
            return
        if self._bar is None:
            self.start(None, m.batch)
        state = head.total_size if head is not None else 0
        self._bar.set_postfix_str(
            f"batch {m.batch + 1}: {m.output_records:,} out, {m.records:,} in, state {_size(state)}, {m.seconds:.2f} s",
            refresh=False,
        )
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
