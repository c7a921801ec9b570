"""Counting a micro-batch's input rows (``BatchMetrics.records``) without a Spark job.

What a batch reports as ``records`` ("``N in``" on the progress bar) is the number of
rows its inputs gave: every row of each input's DataFrame for the batch, counted once
by the input task that reads it (late rows and rows held back for a later batch
included; a held row is not counted again when it goes in).  Not the records the
keyed operators received: two operators keyed alike on one stream, an exchange after
a stateful operator or a loop's rounds would count one input row several times.

The count rides along rows the driver collects anyway, so it costs no Spark job:

- :func:`counted` wraps an input task: after the task's own output it emits one
  ``STATS`` row for the input node, ``{"input_rows": n}``;
- where the batch collects the input's wave itself (sink references, loop times, held
  rows) the ``STATS`` row is collected with them; otherwise the first root boundary
  stage fed by the input takes it in with its records, and :func:`passing` (wrapping
  that stage's task) hands it back out with the stage's rows.

>>> counted_kinds(["1", "2"])
'1, 2, 3'
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from tstate.spark.heap import quiet_heap
from tstate.spark.wire import SCHEMA, STATS, arrow, stats_row

__all__ = ["INPUT_ROWS", "counted", "passing", "counted_kinds"]

#: the ``STATS`` counter an input task reports
INPUT_ROWS = "input_rows"

Task = Callable[[Iterable[Any]], Iterator[Any]]
#: the columns of a task's output rows (:data:`tstate.spark.wire.SCHEMA`)
_COLUMNS = [f.split()[0] for f in SCHEMA.split(",")]


def counted_kinds(kinds: list[str]) -> str:
    """The SQL ``kind in (...)`` list of ``kinds`` plus ``STATS``."""
    return ", ".join([*kinds, str(STATS)])


def counted(task: Task, node: int) -> Task:
    """Input task ``task`` of input node ``node``, followed by a ``STATS`` row with the
    rows it read (``{"input_rows": n}``)."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        seen = [0]

        def counting() -> Iterator[Any]:
            for b in batches:
                seen[0] += b.num_rows
                yield b

        with quiet_heap():  # (the executor's cached bins out of the collector's reach)
            yield from task(counting())
        yield arrow([stats_row(node, 0, {INPUT_ROWS: seen[0]})])

    return run


def passing(task: Task) -> Task:
    """Boundary task ``task`` (which ignores ``STATS`` rows), with the ``STATS`` rows
    among its input handed out again after its own output (in the task's output schema:
    without the columns the stage's shuffle added, :data:`~tstate.spark.wire.ORDER`)."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc

        kept: list[Any] = []

        def watching() -> Iterator[Any]:
            for b in batches:
                if b.num_rows:
                    mask = pc.equal(b.column("kind"), STATS)
                    if pc.any(mask).as_py():
                        kept.append(b.filter(mask).select(_COLUMNS))
                yield b

        with quiet_heap():  # (the executor's cached bins out of the collector's reach)
            yield from task(watching())
        yield from kept

    return run
