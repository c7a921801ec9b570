"""A committed batch's output handed to driver sinks (:mod:`tstate.spark.delivery`): the
records of each time, with the garbage collector resting while a sink takes them."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

from tstate.checkpoint.fs import LocalFS
from tstate.progress.frontier import Antichain
from tstate.spark.delivery import Delivery, collector_paused
from tstate.spark.output import Part, _arrow_part, _digest
from tstate.spark.records import encode_records


class Recording:
    """A driver sink recording its records and whether the collector ran automatically
    during each ``write``."""

    on_driver = True

    def __init__(self) -> None:
        self.got: list[tuple[int, list[Any]]] = []
        self.collector: list[bool] = []
        self.front: list[Any] = []

    def write(self, worker: int, time: Any, records: Any) -> None:
        self.collector.append(gc.isenabled())
        self.got.append((time, list(records)))

    def frontier(self, worker: int, frontier: Any) -> None:
        self.front.append(frontier)


def test_driver_sink_gets_each_time_with_the_collector_paused(tmp_path: Path) -> None:
    fs = LocalFS(str(tmp_path))
    recs: dict[int, list[Any]] = {3: [(1, "a"), (2, "b")], 5: [(3, None)]}
    body = _arrow_part(sorted(recs), [encode_records(recs[t], "op") for t in sorted(recs)])
    fs.write_atomic("p.arrow", body)
    part = Part(7, "p.arrow", tuple((t, len(r)) for t, r in sorted(recs.items())), _digest(body))
    sink = Recording()
    assert gc.isenabled()
    Delivery(None, str(tmp_path), fs, None).deliver({7: sink}, [part], Antichain([6]))
    assert sink.got == sorted(recs.items())
    assert sink.collector == [False, False]  # paused while the sink took its records
    assert gc.isenabled()  # and on again after
    assert sink.front == [Antichain([6])]


def test_collector_paused_nests_across_threads_and_keeps_a_disabled_collector_off() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(30)

    t = threading.Thread(target=other)
    with collector_paused():
        t.start()
        assert inside.wait(30)
    assert not gc.isenabled()  # the other thread's pause still holds
    leave.set()
    t.join(30)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
