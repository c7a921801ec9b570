"""A committed batch's output handed to driver sinks (:mod:`tstate.spark.delivery`): the
records of each time, with the garbage collector resting while a sink takes them."""

from __future__ import annotations

import gc
import threading
import time as _time
from pathlib import Path
from typing import Any

from tstate.checkpoint.fs import LocalFS
from tstate.progress.frontier import Antichain
import tstate.spark.delivery as delivery_mod
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


class Slow(Recording):
    """A driver sink taking ``seconds`` over each ``write`` (its records' decoding, say)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def write(self, worker: int, time: Any, records: Any) -> None:
        _time.sleep(self.seconds)
        super().write(worker, time, records)


class Files(Recording):
    """A file sink (its epoch files written by a Spark job: ``finalise``)."""

    on_driver = False

    def commit_epoch(self, time: Any, records: Any) -> None:  # pragma: no cover - finalise is replaced
        raise AssertionError("written by finalise")


def _slow_delivery(tmp_path: Path, monkeypatch: Any, job: float, driver: float) -> tuple[Delivery, Any]:
    """A background delivery whose Spark job (a file sink's epoch files) takes ``job``
    seconds and whose driver sink takes ``driver`` seconds (at the same time), under way;
    and the driver sink."""
    fs = LocalFS(str(tmp_path))
    body = _arrow_part([3], [encode_records([(1, "a")], "op")])
    fs.write_atomic("p.arrow", body)
    parts = [Part(7, "p.arrow", ((3, 1),), _digest(body)), Part(9, "p.arrow", ((3, 1),), _digest(body))]
    monkeypatch.setattr(delivery_mod, "finalise", lambda *a, **k: _time.sleep(job))
    sink = Slow(driver)
    d = Delivery(None, str(tmp_path), fs, None, background=True)
    assert d.deliver({7: sink, 9: Files()}, parts, Antichain([4])) < 0.05  # (nothing was under way)
    return d, sink


def test_waiting_on_a_delivery_counts_its_spark_job_as_waiting_on_spark(tmp_path: Path, monkeypatch: Any) -> None:
    d, sink = _slow_delivery(tmp_path, monkeypatch, job=0.3, driver=0.7)
    waited = d.wait()
    assert sink.got == [(3, [(1, "a")])]
    assert waited.seconds >= 0.65
    # the job's part of the wait is waiting on Spark; the driver sink's part is the driver's own
    assert 0.25 <= waited.job_seconds <= 0.5
    assert d.wait().job_seconds == 0.0  # nothing under way: no job waited on


def test_the_last_hand_over_counts_its_spark_job_in_the_last_batchs_job_seconds(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from tstate.metrics import BatchMetrics, Metrics

    metrics = Metrics()
    metrics.batches.append(BatchMetrics(0, None, 2.0, 2, 10, 0, 0, 0, 0, job_seconds=1.9))
    d, _sink = _slow_delivery(tmp_path, monkeypatch, job=0.3, driver=0.7)
    d.finish(metrics)
    (m,) = metrics.batches
    hand_over = m.output_seconds
    assert hand_over >= 0.65 and abs(m.seconds - (2.0 + hand_over)) < 1e-9
    # the driver's own time grew by the driver sink's part only, not by the Spark job's
    assert 0.2 <= m.driver_own_seconds - 0.1 <= hand_over - 0.25
    assert m.job_seconds >= 1.9 + 0.25


def test_driver_sinks_take_their_records_while_the_epoch_files_job_runs(tmp_path: Path, monkeypatch: Any) -> None:
    fs = LocalFS(str(tmp_path))
    body = _arrow_part([3], [encode_records([(1, "a")], "op")])
    fs.write_atomic("p.arrow", body)
    parts = [Part(7, "p.arrow", ((3, 1),), _digest(body)), Part(9, "p.arrow", ((3, 1),), _digest(body))]
    events: list[str] = []

    def job(spark: Any, directory: str, sinks: dict[int, Any], parts_: list[Part], types: Any) -> None:
        assert set(sinks) == {9} and parts_ == parts
        _time.sleep(0.5)
        events.append("files")

    monkeypatch.setattr(delivery_mod, "finalise", job)
    driver, files = Slow(0.5), Files()
    t = _time.perf_counter()
    job_s = Delivery(None, str(tmp_path), fs, None).deliver({7: driver, 9: files}, parts, Antichain([4]))
    took = _time.perf_counter() - t
    assert driver.got == [(3, [(1, "a")])] and events == ["files"]
    assert took < 0.85  # the two at once: not 0.5 + 0.5
    assert 0.45 <= job_s < 0.85
    # each sink's frontier moved once its records (and the other sinks') were handed over
    assert driver.front == files.front == [Antichain([4])]


def test_a_failed_epoch_files_job_fails_the_delivery_and_moves_no_frontier(tmp_path: Path, monkeypatch: Any) -> None:
    import pytest

    fs = LocalFS(str(tmp_path))
    body = _arrow_part([3], [encode_records([(1, "a")], "op")])
    fs.write_atomic("p.arrow", body)
    parts = [Part(7, "p.arrow", ((3, 1),), _digest(body)), Part(9, "p.arrow", ((3, 1),), _digest(body))]

    def job(*a: Any, **k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(delivery_mod, "finalise", job)
    driver, files = Recording(), Files()
    d = Delivery(None, str(tmp_path), fs, None, background=True)
    d.deliver({7: driver, 9: files}, parts, Antichain([4]))
    with pytest.raises(OSError, match="disk full"):
        d.wait()
    assert driver.front == files.front == []


def test_a_delivery_without_file_sinks_waited_on_no_spark_job(tmp_path: Path, monkeypatch: Any) -> None:
    fs = LocalFS(str(tmp_path))
    body = _arrow_part([3], [encode_records([(1, "a")], "op")])
    fs.write_atomic("p.arrow", body)
    parts = [Part(7, "p.arrow", ((3, 1),), _digest(body)), Part(9, "p.arrow", ((3, 1),), _digest(body))]
    monkeypatch.setattr(delivery_mod, "finalise", lambda *a, **k: _time.sleep(0.3))
    d = Delivery(None, str(tmp_path), fs, None)
    assert d.deliver({7: Recording(), 9: Files()}, parts, Antichain([4])) >= 0.25  # the epoch files' job
    # the next delivery has only a driver sink: it ran no job, whatever the last one did
    assert d.deliver({7: Recording()}, parts[:1], Antichain([5])) < 0.1
