"""Driver memory as the output grows: sink output written by the executors vs fed to
the driver.  ``python -m benchmarks.spark_output [--rows N]``

One dataflow (a keyed count emitting one record per input row, 4 epochs, 2 partitions on
``local[2]``) runs with N and 10 N rows, each in a fresh process, with its output going

- ``executors``: to ``ts.io.keep()`` (written by the tasks, read back by
  ``backend.output(op).count()`` on the executors), or
- ``driver``: to ``stream.collect()`` (delivered to an in-memory sink on the driver,
  which is what every sink did before ``tstate.spark.output``).

The table shows the driver's peak RSS (the Python process: Spark's workers are other
processes) and the output records; the JSON line holds the RSS growth 1x -> 10x of each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile


def child(mode: str, rows: int) -> None:
    import tstate as ts
    from tstate.spark import Backend, Source, local_session

    spark = local_session("local[2]", app_name="bench-output", **{"spark.driver.memory": "2g"})
    flow = ts.Dataflow("grow")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=int, bins=32)
    def count(c: int, r: dict, ctx: ts.Context) -> int:
        ctx.emit((r["k"], r["v"], c + 1, "x" * 40))
        return c + 1

    sink = count.sink(ts.io.keep(), name="kept") if mode == "executors" else count.collect()
    df = spark.range(rows).selectExpr("concat('k', cast(id % 1000 as string)) as k", "id as v", f"id * 4 div {rows} as t")
    with tempfile.TemporaryDirectory() as d:
        backend = Backend(spark, checkpoint=d, partitions=2, progress=False)
        backend.run(flow, {"events": Source(df, time="t")})
        out = backend.output(count).count() if mode == "executors" else len(sink)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "rows": rows, "out": out, "rss": rss}))
    spark.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = {}
    for mode in ("executors", "driver"):
        for rows in (args.rows, 10 * args.rows):
            r = subprocess.run(
                [sys.executable, "-m", "benchmarks.spark_output", "--child", mode, str(rows)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            res[mode, rows] = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"{'output to':<10} {'rows':>10} {'output records':>15} {'driver peak RSS':>16}")
    for (mode, rows), r in res.items():
        print(f"{mode:<10} {rows:>10,} {r['out']:>15,} {r['rss'] / 2**20:>13.0f} MB")
    growth = {
        f"{mode}_rss_10x_over_1x": round(res[mode, 10 * args.rows]["rss"] / res[mode, args.rows]["rss"], 2)
        for mode in ("executors", "driver")
    }
    print(json.dumps(growth))


if __name__ == "__main__":
    main()
