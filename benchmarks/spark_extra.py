"""The in-process rows of ``python -m benchmarks.spark_apps`` (issue 25), one Spark
``local[2]`` session for both, printed as one JSON line:

- **keyed count**: :mod:`benchmarks.spark_keyed_count`'s measurement of tstate on
  Spark and Spark's native ``groupBy().count()`` (a streaming file source, one
  micro-batch per file; each contender's untimed one-file run first; both checked
  against plain Python) -> ``keyed_count_over_native``;
- **Python key**: a keyed aggregation written as the README teaches -- a Python key
  function, an ``int`` state per key, a per-epoch timer emitting each touched key's
  count -- over ``--rows`` rows in 20 epochs, on the embedded engine (fed epoch by
  epoch through its input handle, the rows as dicts) and on Spark ``local[2]``
  (``Backend.run`` over the same rows as a DataFrame, time column ``t``); both
  outputs must be equal -> ``python_key_local2_over_embedded`` (run seconds; the
  Spark session is already up).

    python -m benchmarks.spark_extra [--rows 2000000] [--files 10 --rows-per-file 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

EPOCHS = 20
KEYS = 50_000


def python_key_flow() -> tuple[Any, Any]:
    """The README-style keyed aggregation; returns the flow and its collected output."""
    import tstate as ts

    flow = ts.Dataflow("python-key")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["user"], state=int, bins=64)
    def per_user(n: int, r: dict, ctx: ts.Context) -> int:
        ctx.notify_at(ctx.time)  # once the epoch is complete
        return n + r["amount"]

    @per_user.on_notify
    def report(n: int, t: int, ctx: ts.Context) -> int:
        ctx.emit((ctx.key, t, n))
        return n

    return flow, per_user.collect()


def python_key_table(rows: int) -> Any:
    """The Python-key workload: ``rows`` rows of ``user`` (string, :data:`KEYS` users),
    ``amount`` and ``t`` (the epoch, :data:`EPOCHS` of them, in order), as an Arrow table."""
    import pyarrow as pa

    return pa.table({
        "user": pa.array([f"u{(i * 7919) % KEYS}" for i in range(rows)]),
        "amount": pa.array([i % 97 for i in range(rows)], pa.int64()),
        "t": pa.array([i * EPOCHS // rows for i in range(rows)], pa.int64()),
    })  # fmt: skip


def python_key_embedded(table: Any) -> Any:
    """:func:`python_key_flow` on the embedded engine over ``table`` (fed epoch by epoch
    through its input handle, the rows as dicts); returns its collected output."""
    flow, out = python_key_flow()
    ex = flow.start(1)
    (handle,) = flow.inputs
    rows = table.num_rows
    bounds = [i * rows // EPOCHS for i in range(EPOCHS + 1)]
    for e in range(EPOCHS):
        handle.send(table.slice(bounds[e], bounds[e + 1] - bounds[e]).select(["user", "amount"]).to_pylist(), e)
        handle.advance_to(e + 1)
    handle.close()
    ex.run()
    return out


def python_key(spark: Any, rows: int) -> dict[str, Any]:
    """Embedded vs Spark ``local[2]`` run seconds of :func:`python_key_flow` over ``rows``."""
    from tstate.spark import Backend, Source

    table = python_key_table(rows)
    t0 = time.perf_counter()
    out = python_key_embedded(table)
    embedded_s = time.perf_counter() - t0
    want = sorted(out.items)
    df = spark.createDataFrame(table.to_pandas()).repartition(2).cache()
    df.count()  # (the DataFrame is in Spark before the clock starts, as a file read would be)
    flow2, out2 = python_key_flow()
    ck = tempfile.mkdtemp(prefix="pykey-")
    try:
        backend = Backend(spark, checkpoint=ck, partitions=2, progress=False)
        t0 = time.perf_counter()
        backend.run(flow2, {"events": Source(df, time="t")})
        spark_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(ck, ignore_errors=True)
        df.unpersist()
    same = sorted(out2.items) == want
    batches = backend.metrics.batches
    return {
        "rows": rows, "embedded_s": embedded_s, "spark_s": spark_s, "same": same,
        "driver_share": sum(b.driver_own_seconds for b in batches) / spark_s if spark_s else 0.0,
    }  # fmt: skip


def keyed_count(spark: Any, files: int, rows_per_file: int, keys: int) -> dict[str, Any]:
    """tstate on Spark vs native ``groupBy().count()`` (spark_keyed_count's measurement)."""
    from benchmarks.spark_common import Collector, TempDirs, check, default_data_dir, generate
    from benchmarks.spark_keyed_count import run_native, run_python, run_tstate

    data_dir = default_data_dir(files, rows_per_file, keys)
    paths = generate(data_dir, files, rows_per_file, keys)
    ref = Collector()
    _py, _b, touched = run_python(paths, ref)
    reference = dict(ref.latest)
    tmp = TempDirs()
    res: dict[str, Any] = {}
    try:
        one = tmp.new("one-file")
        os.makedirs(one)
        shutil.copy(paths[0], one)
        for name, fn in (("tstate", run_tstate), ("native", run_native)):
            fn(spark, one, tmp.new(name + "-warmup"), Collector())
            out = Collector()
            total, _per = fn(spark, data_dir, tmp.new(name), out)
            res[name] = total
            res[name + "_check"] = check(name, out, reference, sum(touched), files * rows_per_file)
    finally:
        tmp.cleanup()
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_extra", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000, help="Python-key rows")
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--rows-per-file", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--skip", default="", help="comma-separated: keyed, pykey")
    args = p.parse_args(argv)
    from benchmarks.spark_common import spark_session

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    spark = spark_session("spark-extra", "local[2]")
    out: dict[str, Any] = {}
    try:
        if "keyed" not in skip:
            print("[extra] keyed count ...", file=sys.stderr, flush=True)
            out["keyed"] = keyed_count(spark, args.files, args.rows_per_file, args.keys)
        if "pykey" not in skip:
            print("[extra] python key ...", file=sys.stderr, flush=True)
            out["pykey"] = python_key(spark, args.rows)
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
