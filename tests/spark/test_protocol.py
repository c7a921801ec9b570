"""The Spark backend implements tstate.backend.Backend: it takes the embedded engine's
``checkpoint=`` (a directory or ``ts.Checkpoints``) and reports ``tstate.metrics.Metrics``."""

from __future__ import annotations

from typing import Any

import pytest

import tstate as ts
from tstate.backend import Backend as BackendProtocol
from tstate.errors import ConfigurationError
from tstate.metrics import Metrics
from tstate.spark import Backend, Source

from .flows import embedded, keyed

ROW = "k string, v long, t long"


def test_spark_takes_checkpoints_settings_and_reports_metrics(spark: Any, tmp_path: Any) -> None:
    rows = [{"k": k, "v": v, "t": t} for t in range(4) for k, v in (("a", t), ("b", 2 * t))]
    ref_out, _ = embedded(rows)
    flow, _ev, _stats, out = keyed()
    df = spark.createDataFrame(rows, ROW)
    backend = Backend(
        spark, checkpoint=ts.Checkpoints(str(tmp_path), retain=2, compact_after=3), partitions=2,
        sources={"events": Source(df, time="t")},
    )
    assert isinstance(backend, BackendProtocol)
    assert backend.checkpoints is backend.store and (backend.store.retain, backend.store.compact_after) == (2, 3)
    flow.run(backend)
    assert sorted(out.items, key=repr) == ref_out
    assert flow.backend is backend and flow.metrics is backend.metrics and isinstance(backend.metrics, Metrics)
    assert backend.metrics.late == 0
    # one micro-batch (its cut also closes the input), one manifest (retain=2 is read
    # from the Checkpoints above; the store's retention is tested in tests/checkpoint)
    assert len(backend.metrics.batches) == len(backend.checkpoints.manifests()) == 1


def test_a_setting_given_twice_is_refused(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="retain given both as arguments and in checkpoint=Checkpoints"):
        Backend(spark, checkpoint=ts.Checkpoints(str(tmp_path)), retain=5)
