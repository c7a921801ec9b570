"""Recovery (issue 16): time to the first output and to a full restore after a restart,
vs state size, for eager and lazy recovery on the embedded engine; time to the first
completed batch after a driver restart vs partitions on Spark; and a plain-Python floor.

Workload: keyed state of ``--sizes`` keys (default 250k, 1M and 4M), each a list of 25
ints (``benchmarks.checkpoints``'s state: ~75 B encoded, ~0.9 KB in memory, ~1.5 us to
decode), in ``--bins`` bins (default 4096, the issue's migration setting), one logical
worker.  A *build* process gives every key its
state and commits one checkpoint (sync mode: every bin a snapshot).  Then, for each
size, one fresh process per contender resumes from it (the page cache holds the files
for every contender alike) and drives epochs of ``--first`` records on random existing
keys (default 1000: about a fifth of 4096 bins per epoch; the first epoch's bins are
what a lazy restore must decode before its first output):

- **eager** (``ts.Checkpoints(restore="eager")``): every bin decoded before the first
  step;
- **lazy** (``restore="lazy"``, the default): processing resumes at once; the first
  epoch decodes the bins it touches, later epochs theirs, and the rest is decoded in
  paced slices between steps (:mod:`tstate.engine.checkpointing.lazy`);
- **plain Python floor**: one process reads one file holding the same keys and states
  as one msgpack map and decodes it with msgspec, typed (``dict[int, list[int]]``), the
  garbage collector paused: what any restore of this state in Python must pay at least.

Per contender: *resume* (process start of the restore to the engine ready to step:
flow built, checkpoint verified, bins decoded (eager) or their timers indexed (lazy)),
*first output* (to the first epoch's output complete: its probe passed), *full restore*
(to every bin decoded; eager: = resume), the first epoch's latency, and the worst epoch
while bins were still being decoded against the steady p99 after.  And, lazy only, the
first output after a first epoch of ``--first-small`` records (default 50): what a
restart costs when the first records touch little of the state.

Spark (``--spark-keys``, default 1M, 256 bins; ``--master``, default ``local[2]``: two
task slots, each task in its own Python worker process; ``local-cluster[2,1,1024]``
adds two executor JVMs, which on a 2-core machine only adds start-up): a build process
commits the state in one batch; then, per ``--partitions`` (1, 2, 4), a new driver
process (a driver restart: new executors, no cached bins) starts a Backend on a copy of
the checkpoint and runs one batch of ``--first`` rows at the next epoch, which touches
every bin: its bins are read and decoded by the executors, in parallel.  Rows:
``driver`` (the checkpoint's files checked on the driver: ``verify="auto"`` on a local
disk), ``executors`` (checked by one Spark job, at 2 partitions) and ``control`` (the
same batch on an empty checkpoint directory: the batch without any restore; first
batch - control = the restore).  Seconds from creating the Backend to the first
completed batch (Spark session start-up reported apart, not counted), median of
``--spark-repeat`` restarts (default 2).

    python -m benchmarks.recovery [--sizes 250000,1000000,4000000] [--bins 4096]
        [--first 1000] [--first-small 50] [--spark-keys 1000000] [--partitions 1,2,4]
        [--spark-repeat 2] [--master local[2]] [--no-spark] [--quick]

Prints tables, writes ``benchmarks/results/recovery.txt`` and ``recovery.png`` (not with
``--quick``); the last line is JSON with the ratios (``lazy_first_output_over_eager_<n>``
and ``lazy_small_...`` at each size; ``<mode>_first_output_<largest>_over_<smallest>``:
the growth with state size; ``spark_driver_first_batch_p<P>_over_p1`` and
``spark_restore_p<P>_over_p1``: time to the first batch and the restore part of it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

WIDTH = 25
CHUNK = 250_000  # keys per build epoch
SPARK_BINS = 256
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- the embedded engine


def _update(values: list[int], rec: tuple[int, int], ctx: Any) -> None:
    if not values:
        values.extend(range(rec[1], rec[1] + WIDTH))
    else:
        values[rec[1] % WIDTH] += 1


def build_flow(bins: int) -> tuple[Any, Any, Any]:
    import tstate as ts

    flow = ts.Dataflow("recovery")
    inp = flow.input("updates", batch_size=1 << 16)
    op = flow.stateful(inp, key=lambda r: r[0], state=list[int], bins=bins, name="state")(_update)
    return flow, inp, op.probe()


def build(directory: str, keys: int, bins: int) -> dict[str, Any]:
    """Give keys 0..keys-1 their state and commit one checkpoint after them."""
    from benchmarks.common import EpochDriver
    from tstate.checkpoint.settings import Checkpoints

    epochs = -(-keys // CHUNK)
    flow, inp, probe = build_flow(bins)
    ex = flow.start(1, checkpoint=Checkpoints(directory, every_epochs=epochs, mode="sync"))
    driver = EpochDriver(inp, probe, ex)
    for i in range(0, keys, CHUNK):
        driver.run([(k, k % 1000) for k in range(i, min(keys, i + CHUNK))])
    while not ex.coordinator.committed:
        assert ex.step(), "the checkpoint after the build did not commit"
    ex.coordinator.abort()
    size = sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(directory) for n in ns)
    return {"epochs": epochs, "checkpoint_bytes": size}


def floor_file(path: str, keys: int) -> dict[str, Any]:
    """The floor's file: the same keys and states as the dataflow's, one msgpack map."""
    import msgspec

    state = {k: list(range(k % 1000, k % 1000 + WIDTH)) for k in range(keys)}
    with open(path, "wb") as f:
        f.write(msgspec.msgpack.encode(state))
    return {"bytes": os.path.getsize(path)}


def floor(path: str, keys: int) -> dict[str, Any]:
    """Read and decode the floor's file (typed, gc paused)."""
    import gc

    import msgspec

    t0 = time.perf_counter()
    gc.disable()
    with open(path, "rb") as f:
        data = f.read()
    state = msgspec.msgpack.decode(data, type=dict[int, list[int]])
    took = time.perf_counter() - t0
    assert len(state) == keys
    return {"seconds": took}


def restore(directory: str, keys: int, bins: int, mode: str, first: int, first_only: bool = False, steady: int = 30) -> dict[str, Any]:
    """Resume from the build's checkpoint and drive epochs of ``first`` random updates
    (see the module docstring); ``first_only``: stop after the first epoch."""
    from benchmarks.common import EpochDriver
    from tstate.checkpoint.settings import Checkpoints

    rng = random.Random(7)

    def epoch_records() -> list[tuple[int, int]]:
        return [(rng.randrange(keys), rng.randrange(200)) for _ in range(first)]

    batches = [epoch_records() for _ in range(4)]  # drawn before the clock starts
    t0 = time.perf_counter()
    flow, inp, probe = build_flow(bins)
    ex = flow.start(1, checkpoint=Checkpoints(directory, every_epochs=10**9, restore=mode))
    resumed = time.perf_counter() - t0
    assert ex.restored is not None
    lazy = ex.coordinator.lazy
    driver = EpochDriver(inp, probe, ex)
    driver.epoch = ex.restored.time
    lat = [driver.run(batches[0])]
    first_output = time.perf_counter() - t0
    on_demand_first = lazy.on_demand if lazy is not None else 0
    if first_only:
        return {"resume": resumed, "first_output": first_output, "first_epoch": lat[0], "on_demand_first": on_demand_first}
    restoring: list[float] = []
    i = 1
    while lazy is not None and not lazy.done:
        restoring.append(driver.run(batches[i % len(batches)] if i < 4 else epoch_records()))
        i += 1
    full = lazy.finished - t0 if lazy is not None and lazy.finished is not None else resumed
    after = [driver.run(epoch_records()) for _ in range(steady)]
    return {
        "resume": resumed,
        "first_output": first_output,
        "full": full,
        "first_epoch": lat[0],
        "epochs_restoring": len(restoring),
        "max_restoring": max(restoring) if restoring else None,
        "p99_restoring": _p99(restoring) if len(restoring) >= 2 else (restoring[0] if restoring else None),
        "steady_p50": statistics.median(after),
        "steady_p99": _p99(after),
        "bins": lazy.total if lazy is not None else None,
        "on_demand_first": on_demand_first,
        "on_demand": lazy.on_demand if lazy is not None else 0,
        "background": lazy.background if lazy is not None else 0,
        "decode_seconds": lazy.seconds if lazy is not None else None,
    }


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


# ---------------------------------------------------------------- Spark


def spark_flow() -> tuple[Any, Any, Any]:
    import tstate as ts

    flow = ts.Dataflow("recovery-spark")
    ev = flow.input("events")

    @flow.stateful(ev, key=lambda r: r["k"], state=list[int], bins=SPARK_BINS, name="state")
    def state(values: list[int], r: dict, ctx: ts.Context) -> None:
        if not values:
            values.extend(range(r["v"], r["v"] + WIDTH))
        else:
            values[0] += 1
            ctx.emit((r["k"], values[0]))  # only the restart's rows (existing keys) emit

    return flow, state, state.collect()


ROW = "k string, v long, t long"


def spark_build(directory: str, keys: int, master: str) -> dict[str, Any]:
    from benchmarks.spark_common import spark_session
    from tstate.spark import Backend, Source

    spark = spark_session("tstate-recovery-build", master)
    try:
        df = spark.range(keys).selectExpr("concat('k', cast(id as string)) as k", "id % 1000 as v", "cast(0 as bigint) as t")
        flow, _op, _out = spark_flow()
        b = Backend(spark, checkpoint=directory, partitions=2, progress=False)
        src = Source(df, time="t")
        b._prepare(flow, {"events": src})
        t0 = time.perf_counter()
        b._batch({"events": df}, {"events": src}, 0, 0, 1, None)  # epoch 0; the run goes on (no closing batch)
        took = time.perf_counter() - t0
    finally:
        spark.stop()
    size = sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(directory) for n in ns)
    return {"seconds": took, "checkpoint_bytes": size}


def spark_restart(directory: str, keys: int, partitions: int, rows: int, master: str, verify: str) -> dict[str, Any]:
    """A new driver on ``directory``: a batch of ``rows`` rows at epoch 1 (every bin:
    restored from the store).  ``verify="control"``: the same batch on a new, empty
    checkpoint directory (no state to restore: the batch's cost without a restore)."""
    from benchmarks.spark_common import spark_session
    from tstate.io.sinks import Sink
    from tstate.spark import Backend, Source

    s0 = time.perf_counter()
    spark = spark_session("tstate-recovery-restart", master)
    spark.range(1).collect()  # executors up
    session = time.perf_counter() - s0
    try:
        df = spark.range(rows).selectExpr(
            f"concat('k', cast(pmod(xxhash64(id), {keys}) as string)) as k", "cast(1 as bigint) as v", "cast(1 as bigint) as t"
        ).cache()
        df.count()
        flow, op, out = spark_flow()
        first: list[float] = []

        class FirstBatch(Sink):
            def frontier(self, worker: int, frontier: Any) -> None:
                if not first and not frontier.less_equal(1):
                    first.append(time.perf_counter())

        op.sink(FirstBatch())
        t0 = time.perf_counter()
        control = verify == "control"
        if control:
            directory, verify = directory + "-control", "driver"
        b = Backend(spark, checkpoint=directory, partitions=partitions, progress=False, verify=verify)
        prepared: list[float] = []
        orig = b._prepare

        def timed(*a: Any) -> Any:
            p0 = time.perf_counter()
            r = orig(*a)
            prepared.append(time.perf_counter() - p0)
            return r

        b._prepare = timed  # type: ignore[method-assign]
        b.run(flow, {"events": Source(df, time="t")})
        bm = b.metrics.batches[0]
        assert control or len(out.items) == rows, (bm, len(out.items))  # (every row's key has state)
        assert bm.batch == (0 if control else 1), bm
        return {
            "session": session,
            "first_batch": first[0] - t0,
            "prepare": prepared[0],
            "batch_seconds": bm.seconds,
            "spark_seconds": bm.spark_seconds,
            "misses": bm.cache_misses,
            "take": bm.take_seconds,
            "take_max": bm.take_max_seconds,
            "verified_by": b.metrics.verified_by,
        }
    finally:
        spark.stop()


# ---------------------------------------------------------------- driver


def _sub(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.recovery", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _s(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def _mem_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return float("nan")


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="250000,1000000,4000000")
    ap.add_argument("--bins", type=int, default=4096)
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--first-small", type=int, default=50, help="lazy only: the first output after a first epoch this small")
    ap.add_argument("--spark-keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", default="1,2,4")
    ap.add_argument("--spark-repeat", type=int, default=2, help="restarts per row (the table shows the median)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes, no files written")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "recovery.txt"))
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        what, rest = args.one[0], args.one[1:]
        if what == "build":
            r = build(rest[0], int(rest[1]), int(rest[2]))
        elif what == "floor-file":
            r = floor_file(rest[0], int(rest[1]))
        elif what == "floor":
            r = floor(rest[0], int(rest[1]))
        elif what == "restore":
            r = restore(rest[0], int(rest[1]), int(rest[2]), rest[3], int(rest[4]), first_only=len(rest) > 5)
        elif what == "spark-build":
            r = spark_build(rest[0], int(rest[1]), rest[2])
        else:
            r = spark_restart(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), rest[4], rest[5])
        print(json.dumps(r))
        return
    if args.quick:
        args.sizes, args.spark_keys, args.partitions = "50000,200000", 100_000, "1,2"
    sizes = [int(s) for s in args.sizes.split(",")]
    parts = [int(p) for p in args.partitions.split(",")]
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    from benchmarks.common import table

    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    base = tempfile.mkdtemp(prefix="tstate-recovery-")
    emb: dict[int, dict[str, Any]] = {}
    spark_rows: dict[tuple[int, str], dict[str, Any]] = {}
    spark_info: dict[str, Any] = {}
    try:
        for n in sizes:
            d, ff = os.path.join(base, f"ckpt-{n}"), os.path.join(base, f"floor-{n}.msgpack")
            print(f"embedded {n:,} keys: build ({_mem_gb():.1f} GB available) ...", file=sys.stderr, flush=True)
            info = _sub("--one", "build", d, str(n), str(args.bins))
            _sub("--one", "floor-file", ff, str(n))
            runs = {"floor": _sub("--one", "floor", ff, str(n))}
            for mode in ("eager", "lazy"):
                print(f"  {mode} ...", file=sys.stderr, flush=True)
                runs[mode] = _sub("--one", "restore", d, str(n), str(args.bins), mode, str(args.first))
            print(f"  lazy, a first epoch of {args.first_small} records ...", file=sys.stderr, flush=True)
            runs["lazy-small"] = _sub("--one", "restore", d, str(n), str(args.bins), "lazy", str(args.first_small), "first-only")
            emb[n] = {"info": info, **runs}
            shutil.rmtree(d, ignore_errors=True)
            os.unlink(ff)
        if not args.no_spark:
            d = os.path.join(base, "spark")
            print(f"spark {args.spark_keys:,} keys: build ...", file=sys.stderr, flush=True)
            spark_info = _sub("--one", "spark-build", d, str(args.spark_keys), args.master)
            ff = os.path.join(base, "floor-spark.msgpack")
            _sub("--one", "floor-file", ff, str(args.spark_keys))
            spark_info["floor"] = _sub("--one", "floor", ff, str(args.spark_keys))["seconds"]
            runs_by: dict[tuple[int, str], list[dict[str, Any]]] = {}
            at = 2 if 2 in parts else parts[0]
            kinds = [(p, v) for p in parts for v in ("control", "driver")] + [(at, "executors")]
            for rnd in range(args.spark_repeat):  # round-robin: machine noise hits all rows alike
                for p, verify in kinds:
                    print(f"  restart on {p} partitions, {verify} ({rnd + 1}/{args.spark_repeat}) ...",
                          file=sys.stderr, flush=True)
                    copy = os.path.join(base, f"spark-{p}-{verify}")
                    shutil.copytree(d, copy)
                    runs_by.setdefault((p, verify), []).append(_sub(
                        "--one", "spark-restart", copy, str(args.spark_keys), str(p), str(args.first), args.master, verify))
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.rmtree(copy + "-control", ignore_errors=True)
            for key, rs in runs_by.items():
                spark_rows[key] = {k: (statistics.median([r[k] for r in rs]) if isinstance(rs[0][k], float) else rs[0][k])
                                   for k in rs[0]}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load1 = os.getloadavg()[0]

    say(f"# python -m benchmarks.recovery --sizes {args.sizes} --bins {args.bins} --first {args.first}"
        f"{'' if args.no_spark else f' --spark-keys {args.spark_keys} --partitions {args.partitions} --master {args.master}'}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs shared with other jobs, load average "
        f"{load0:.1f} before, {load1:.1f} after, {time.perf_counter() - started:.0f} s")
    say()
    say(f"Embedded engine, 1 worker, {args.bins} bins, state list[int] x {WIDTH} per key; epochs of {args.first} "
        "random updates after the restart. Seconds from the restore's start (a fresh process).")
    rows = []
    for n, r in emb.items():
        e, lz, sm, fl = r["eager"], r["lazy"], r["lazy-small"], r["floor"]["seconds"]
        rows.append((f"{n:,}", f"{r['info']['checkpoint_bytes'] / 1e6:.1f}", _s(fl),
                     _s(e["resume"]), _s(e["first_output"]),
                     _s(lz["resume"]), _s(lz["first_output"]), f"{lz['on_demand_first']}/{lz['bins']}",
                     _s(lz["full"]), f"{lz['first_output'] / e['first_output']:.2f}",
                     _s(sm["first_output"]), f"{sm['on_demand_first']}", f"{sm['first_output'] / e['first_output']:.2f}"))
    say(table(["keys", "checkpoint MB", "floor: msgspec dict", "eager resume", "eager first output",
               "lazy resume", "lazy first output", "lazy bins decoded by 1st epoch", "lazy full restore",
               "lazy / eager first output", f"lazy first output, 1st epoch of {args.first_small}", "its bins decoded",
               "/ eager"], rows))
    say()
    say("Epoch latency (ms) after the restart: the first epoch, the epochs while bins were still being decoded "
        "(lazy: on demand and in the background), the steady state after (30 epochs).")
    rows = []
    for n, r in emb.items():
        for mode in ("eager", "lazy"):
            x = r[mode]
            rows.append((f"{n:,}", mode, _ms(x["first_epoch"]), x["epochs_restoring"], _ms(x["max_restoring"]),
                         _ms(x["steady_p50"]), _ms(x["steady_p99"]),
                         f"{x['on_demand']} / {x['background']}" if mode == "lazy" else "-",
                         _s(x["decode_seconds"])))
    say(table(["keys", "restore", "first epoch", "epochs restoring", "max epoch restoring", "steady p50",
               "steady p99", "bins on demand / background", "decode s (lazy)"], rows))
    ratios: dict[str, Any] = {}
    for n, r in emb.items():
        ratios[f"lazy_first_output_over_eager_{n}"] = round(r["lazy"]["first_output"] / r["eager"]["first_output"], 3)
        ratios[f"lazy_small_first_output_over_eager_{n}"] = round(
            r["lazy-small"]["first_output"] / r["eager"]["first_output"], 3)
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        for mode in ("eager", "lazy", "lazy-small"):
            ratios[f"{mode.replace('-', '_')}_first_output_{hi}_over_{lo}"] = round(
                emb[hi][mode]["first_output"] / emb[lo][mode]["first_output"], 3)
        ratios["floor_{}_over_{}".format(hi, lo)] = round(emb[hi]["floor"]["seconds"] / emb[lo]["floor"]["seconds"], 3)
    if spark_rows:
        say()
        say(f"Spark, {args.master}, {args.spark_keys:,} keys in {SPARK_BINS} bins "
            f"({spark_info['checkpoint_bytes'] / 1e6:.1f} MB checkpoint), a new driver process per row; one batch of "
            f"{args.first} rows touching every bin, restored from the store by the executors. 'control': the same "
            "batch with no state to restore (a new checkpoint directory). Seconds from creating the Backend (session "
            f"start-up apart), median of {args.spark_repeat} restarts. Plain-Python floor for this state: "
            f"{spark_info['floor']:.3f} s.")
        rows = []
        order = {"control": 0, "driver": 1, "executors": 2}
        for (p, verify), x in sorted(spark_rows.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
            c = spark_rows.get((p, "control"))
            rows.append((p, verify, x["verified_by"] if verify != "control" else "-", _s(x["session"]), _s(x["prepare"]),
                         _s(x["batch_seconds"]), x["misses"], _s(x["take"]), _s(x["take_max"]),
                         _s(x["batch_seconds"] - c["batch_seconds"]) if c and verify != "control" else "-",
                         _s(x["first_batch"])))
        say(table(["partitions", "restart", "files checked by", "session start", "prepare (checkpoint chosen)",
                   "first batch", "bins read", "tasks taking bins: s summed", "slowest task", "first batch - control",
                   "to first completed batch"], rows))
        for verify in ("driver",):
            base_p = spark_rows.get((parts[0], verify))
            for p in parts[1:]:
                x = spark_rows.get((p, verify))
                if base_p and x:
                    ratios[f"spark_{verify}_first_batch_p{p}_over_p{parts[0]}"] = round(x["first_batch"] / base_p["first_batch"], 3)
                    if base_p["take_max"] > 0:
                        ratios[f"spark_restore_slowest_task_p{p}_over_p{parts[0]}"] = round(x["take_max"] / base_p["take_max"], 3)
                    c0, c = spark_rows.get((parts[0], "control")), spark_rows.get((p, "control"))
                    if c0 and c and base_p["batch_seconds"] > c0["batch_seconds"]:
                        ratios[f"spark_restore_p{p}_over_p{parts[0]}"] = round(
                            (x["batch_seconds"] - c["batch_seconds"]) / (base_p["batch_seconds"] - c0["batch_seconds"]), 3)
    if not args.quick:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n" + json.dumps(ratios) + "\n")
        _plot(emb, spark_rows, parts, os.path.splitext(args.out)[0] + ".png")
        say(f"written: {args.out}, {os.path.splitext(args.out)[0]}.png")
    print(json.dumps(ratios))


def _plot(emb: dict[int, dict[str, Any]], spark_rows: dict[tuple[int, str], dict[str, Any]], parts: list[int], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if spark_rows else 1, figsize=(12 if spark_rows else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    xs = sorted(emb)
    ax.plot(xs, [emb[n]["eager"]["first_output"] for n in xs], "o-", color="tab:red", label="eager: first output (= full restore)")
    ax.plot(xs, [emb[n]["lazy"]["first_output"] for n in xs], "o-", color="tab:blue", label="lazy: first output")
    ax.plot(xs, [emb[n]["lazy"]["full"] for n in xs], "o--", color="tab:blue", alpha=0.6, label="lazy: full restore")
    ax.plot(xs, [emb[n]["floor"]["seconds"] for n in xs], "s:", color="tab:gray", label="floor: msgspec dict, one file")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("keys")
    ax.set_ylabel("seconds after restart")
    ax.set_title("embedded engine")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if spark_rows:
        ax = axes[0][1]
        for verify, color in (("executors", "tab:green"), ("driver", "tab:orange")):
            ps = [p for p in parts if (p, verify) in spark_rows]
            ax.plot(ps, [spark_rows[p, verify]["first_batch"] for p in ps], "o-", color=color,
                    label=f"to first completed batch (files checked by the {verify})")
        ax.set_xticks(parts)
        ax.set_xlabel("partitions")
        ax.set_ylabel("seconds after restart")
        ax.set_title("Spark, after a driver restart")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
