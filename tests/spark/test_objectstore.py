"""The Spark backend with its state store in S3 (a moto server on 127.0.0.1): the
driver and the executors open the same ``s3://`` URL.  A run equals the embedded
engine's; a restart on another partition count resumes from S3; under
``local-cluster[2,1,1024]`` an executor SIGKILLed mid-batch and the driver SIGKILLed
mid-commit still give exactly an uninterrupted run's output."""

from __future__ import annotations

from typing import Any

import pytest

from tstate.spark import Backend, Source

from .flows import embedded, keyed
from .test_backend import ROW, as_tuples, run_spark
from .test_faults import read_output, reference, run_job


@pytest.fixture
def s3_spark(spark: Any, s3: Any) -> Any:
    """The session's Python workers get the S3 server's environment (a new worker
    daemon starts for the changed environment)."""
    spark.sparkContext.environment.update(s3.env())
    return s3


def test_run_with_an_s3_checkpoint_equals_embedded(spark: Any, s3_spark: Any) -> None:
    rows = [{"k": f"k{i % 7}", "v": i % 5, "t": i // 15} for i in range(45)]
    ref_out, ref_state = embedded(rows)
    url = s3_spark.url("spark")
    out, state, backend = run_spark(spark, rows, url, 2)
    assert backend.directory == url
    assert out == ref_out and state == as_tuples(ref_state)
    keys = s3_spark.keys(url)
    assert any(k.startswith("manifests/") for k in keys) and any(k.startswith("data/") for k in keys)


def test_restart_on_other_partitions_resumes_from_s3(spark: Any, s3_spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = [{"k": f"k{i % 11}", "v": i % 5, "t": i // 10} for i in range(40)]
    ref_out, ref_state = embedded(rows)
    url = s3_spark.url("restart")
    flow, _ev, _stats, out1 = keyed()
    b1 = Backend(spark, checkpoint=url, partitions=2)
    df_all = spark.createDataFrame(rows, ROW)
    b1._prepare(flow, {"events": Source(df_all.where(F.col("t") < 2), time="t")})
    for lo in range(2):
        b1._batch({"events": df_all.where(F.col("t") == lo)}, {"events": Source(df_all, time="t")}, lo, lo, lo + 1, None)
    b1.store.wait_gc()
    flow2, _ev2, stats2, out2 = keyed()
    b2 = Backend(spark, checkpoint=url + "/", partitions=3)  # the same location, spelled differently
    b2.run(flow2, {"events": Source(df_all, time="t")})
    assert b2.metrics.batches[0].batch == 2 and b2.metrics.batches[0].partitions == 3
    assert sorted(out1.items + out2.items, key=repr) == ref_out
    got = {r["key"]: (r["n"], r["total"], list(r["seen"])) for r in b2.state(stats2).frame.collect()}
    assert got == as_tuples(ref_state)


def test_unwritable_bucket_fails_when_the_backend_is_created(spark: Any, s3_locked: Any, monkeypatch: Any) -> None:
    from tests.objectstore import LOCKED
    from tstate.errors import CheckpointError

    endpoint, key, secret = s3_locked
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("TSTATE_STORE_RETRY_SECONDS", "2")
    url = f"s3://{LOCKED}/spark"
    with pytest.raises(CheckpointError, match=f"checkpoint location {url}: not writable .*Access Denied"):
        Backend(spark, checkpoint=url, partitions=2)


def test_cluster_faults_with_the_store_in_s3(s3: Any, tmp_path: Any) -> None:
    """tests/spark/test_faults.py's scenario with ``checkpoint="s3://..."``: the driver,
    its executors and the restarted driver all reach the store through the URL."""
    ref = reference(tmp_path)
    url, out = s3.url("cluster"), str(tmp_path / "out")
    master = "local-cluster[2,1,1024]"
    first = run_job(master, url, out, "--kill-executor-at", "2", "--die-at", "5")
    assert first.returncode == -9, first.stderr[-3000:]
    assert "killing executor" in first.stdout
    assert read_output(out) != ref
    second = run_job(master, url, out)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "done [5, 6, 7]" in second.stdout  # (7 also closes the inputs)
    assert read_output(out) == ref
    assert any(k.startswith("manifests/") for k in s3.keys(url))
