"""The driver of the deployment test, run by ``spark-submit`` (see tests/spark/test_deploy.py
and docs/spark-deploy.md): ``spark-submit --master local-cluster[2,1,1024] --archives
env.tar#environment --py-files deploy_flow.py deploy_job.py ROOT CKPT OUT``.

The driver imports tstate from ``ROOT`` (the working copy the wheel was built from); the
executors have only what was shipped: the packed environment and ``deploy_flow.py``."""

from __future__ import annotations

import json
import sys


def main() -> None:
    root, ckpt, out = sys.argv[1:4]
    sys.path.insert(0, root)
    from pyspark.sql import SparkSession

    import deploy_flow  # from --py-files
    from tstate.spark import Backend, Source

    spark = SparkSession.builder.appName("tstate-deploy").getOrCreate()
    flow, _events, total, got = deploy_flow.build()
    df = spark.createDataFrame(deploy_flow.ROWS, "k string, v long, t long")
    backend = Backend(spark, checkpoint=ckpt, partitions=2)
    backend.run(flow, {"events": Source(df, time="t")})
    state = sorted(map(tuple, backend.state(total).frame.collect()))
    where = spark.sparkContext.parallelize(range(4), 4).map(deploy_flow.where).collect()
    with open(out, "w") as f:
        json.dump({"records": sorted([t, r.key, r.total] for t, r in got.items), "state": state, "where": where}, f)
    spark.stop()


if __name__ == "__main__":
    main()
