"""State types side by side: a struct, a map of lists, and a tracked ``Map``, 1M
entries in total each, vs a plain dict + msgpack baseline.

For each: updates/s through the ``stateful`` operator (1 worker), point reads/s
(``flow.read``), full scans into Arrow (rows/s, ``flow.state``), split + merge of every
bin (s), encode and decode of every bin (MB/s, ``tstate.state.payload``), and the size
on the wire.  The baseline keeps the same values in a dict, updates them in a loop,
reads them by key, builds an Arrow table with ``pyarrow.Table.from_pylist`` and
encodes the whole dict with msgpack.

    python -m benchmarks.state_types [--entries N]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, Callable

import msgpack
import pyarrow as pa
from attrs import define

import tstate as ts
from benchmarks.common import table
from tstate.state.payload import decode_bin, encode_bin
from tstate.state.split import merge_all, split_all
from tstate.types import Map, StateCodec


@define
class Account:
    balance: int = 0
    updates: int = 0
    name: str = ""


def _struct_update(a: Account, r: tuple[int, int], ctx: ts.Context) -> None:
    a.balance += r[1]
    a.updates += 1
    if not a.name:
        a.name = f"acct-{r[0]}"


def _lists_update(d: dict[str, list[int]], r: tuple[int, int], ctx: ts.Context) -> None:
    lst = d.get(str(r[1] % 10))
    if lst is None:
        d[str(r[1] % 10)] = [r[1]]
    else:
        lst.append(r[1])


def _map_update(m: Map[int, int], r: tuple[int, int], ctx: ts.Context) -> None:
    m[r[1]] = m.get(r[1], 0) + 1


CASES: dict[str, tuple[Any, Callable[..., Any], int]] = {
    # name: (state type, update function, entries per key)
    "struct": (Account, _struct_update, 1),
    "map of lists": (dict[str, list[int]], _lists_update, 100),
    "tracked Map": (Map[int, int], _map_update, 1000),
}


def run_case(name: str, entries: int) -> dict[str, float]:
    tp, fn, per_key = CASES[name]
    keys = max(1, entries // per_key)
    rng = random.Random(5)
    records = [(k, v) for k in range(keys) for v in range(per_key)]  # every entry once
    updates = [(rng.randrange(keys), rng.randrange(per_key)) for _ in range(200_000)]
    flow = ts.Dataflow(name.replace(" ", "_"))
    inp = flow.input("updates", batch_size=1 << 30)
    op = flow.stateful(inp, key=lambda r: r[0], state=tp, bins=256, name="state")(fn)
    ex = flow.start(1)
    inp.send(records)
    inp.advance_to(1)
    ex.step_while(lambda: True)
    t0 = time.perf_counter()
    inp.send(updates)
    inp.advance_to(2)
    ex.step_while(lambda: True)
    upd = len(updates) / (time.perf_counter() - t0)
    sample = [rng.randrange(keys) for _ in range(20_000)]
    t0 = time.perf_counter()
    for k in sample:
        flow.read(op, k)
    reads = len(sample) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    tbl = flow.state(op)
    scan = tbl.num_rows * per_key / (time.perf_counter() - t0)
    rt = ex.operators[0][op.node]
    bins = rt.bins
    t0 = time.perf_counter()
    merged = merge_all(split_all(bins, 256), 512)
    split_merge = time.perf_counter() - t0
    assert sum(len(b) for b in merged.values()) == keys
    codec = StateCodec(tp)
    t0 = time.perf_counter()
    blobs = [encode_bin(b, codec) for b in bins.values()]
    enc = time.perf_counter() - t0
    size = sum(len(b) for b in blobs)
    t0 = time.perf_counter()
    for blob in blobs:
        decode_bin(blob, codec)
    dec = time.perf_counter() - t0
    inp.close()
    ex.run()
    return {"updates/s": upd, "reads/s": reads, "scan rows/s": scan, "split+merge s": split_merge,
            "encode MB/s": size / enc / 1e6, "decode MB/s": size / dec / 1e6, "MB": size / 1e6}


def run_baseline(name: str, entries: int) -> dict[str, float]:
    tp, _, per_key = CASES[name]
    keys = max(1, entries // per_key)
    rng = random.Random(5)
    updates = [(rng.randrange(keys), rng.randrange(per_key)) for _ in range(200_000)]
    if name == "struct":
        d: dict[int, Any] = {k: {"balance": 0, "updates": 0, "name": f"acct-{k}"} for k in range(keys)}
        t0 = time.perf_counter()
        for k, v in updates:
            a = d[k]
            a["balance"] += v
            a["updates"] += 1
        upd = len(updates) / (time.perf_counter() - t0)
    else:
        d = {k: {} for k in range(keys)}
        for k in range(keys):
            for v in range(per_key):
                d[k].setdefault(str(v % 10) if name == "map of lists" else v, [] if name == "map of lists" else 0)
        t0 = time.perf_counter()
        for k, v in updates:
            if name == "map of lists":
                d[k].setdefault(str(v % 10), []).append(v)
            else:
                d[k][v] = d[k].get(v, 0) + 1
        upd = len(updates) / (time.perf_counter() - t0)
    sample = [rng.randrange(keys) for _ in range(20_000)]
    t0 = time.perf_counter()
    for k in sample:
        msgpack.unpackb(msgpack.packb(d[k]), strict_map_key=False)  # a copy, as flow.read returns
    reads = len(sample) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    rows = [{"key": k, **v} for k, v in d.items()] if name == "struct" else [
        {"key": k, "value": [{"k": str(k2), "v": v2} for k2, v2 in v.items()]} for k, v in d.items()]
    pa.Table.from_pylist(rows)
    scan = keys * per_key / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    blob = msgpack.packb(d)
    enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    msgpack.unpackb(blob, strict_map_key=False)
    dec = time.perf_counter() - t0
    return {"updates/s": upd, "reads/s": reads, "scan rows/s": scan, "split+merge s": float("nan"),
            "encode MB/s": len(blob) / enc / 1e6, "decode MB/s": len(blob) / dec / 1e6, "MB": len(blob) / 1e6}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    cols = ["updates/s", "reads/s", "scan rows/s", "split+merge s", "encode MB/s", "decode MB/s", "MB"]
    rows = []
    for name in CASES:
        for impl, fn in (("tstate", run_case), ("dict + msgpack", run_baseline)):
            r = fn(name, args.entries)
            rows.append((name, impl, *(f"{r[c]:,.0f}" if r[c] >= 100 else f"{r[c]:.2f}" for c in cols)))
    print(f"state types, {args.entries:,} entries in total each, 256 bins, 1 worker")
    print(table(["state", "implementation", *cols], rows))


if __name__ == "__main__":
    main()
