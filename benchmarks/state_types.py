"""State types side by side: a struct, a map of lists, and a tracked ``Map``, 1M
entries in total each, vs a plain dict + msgpack baseline.

For each: updates/s through the ``stateful`` operator (1 worker), point reads/s
(``flow.read``), full scans into Arrow (rows/s, ``flow.state``), split + merge of every
bin (s), encode and decode of every bin (MB/s of CPU time, ``tstate.state.payload``:
every state checked against its declaration), and the size on the wire.  The baseline
keeps the same values in a dict, updates them in a loop, reads them by key, builds an
Arrow table with ``pyarrow.Table.from_pylist`` and encodes the whole dict with msgpack.

The row ``tstate format 1`` encodes and decodes the same bins the way tstate did before
the msgspec codec (checkpoint format 1: every state unstructured by cattrs, checked,
packed by msgpack-python; decoded by msgpack-python and structured by cattrs -- the
reader tstate keeps for format-1 checkpoints), interleaved with tstate's rounds in the
same run, so ``speedup`` is measured side by side.  The row ``dict + msgpack, bin
order`` encodes the baseline's very dict grouped into tstate's bins (one ``packb`` per
bin, the keys of each bin together): the same encoder and values, read in the order a
binned store reads them -- a key's bin is its hash, so a bin's values lie all over the
heap, and on a large heap reading them (cache misses) is most of what encoding costs.
Encoding and decoding are timed in CPU time (``time.process_time``), the best of
:data:`ROUNDS` rounds (the machine's noise only ever adds).  The last line is JSON: per
state, the encode and decode speedups over format 1 (same bins: a ratio of seconds) and
the baseline's MB/s over tstate's (target <= 1.5), also in bin order.

    python -m benchmarks.state_types [--entries N]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import Any, Callable

import json

import msgpack
import pyarrow as pa
from attrs import define

import tstate as ts
from benchmarks.common import table
from tstate.state.payload import bin_from_builtins, bin_to_builtins, decode_bin, encode_bin
from tstate.types.codec import MAGIC_FORMAT_1
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
    out = {"updates/s": upd, "reads/s": reads, "scan rows/s": scan, "split+merge s": split_merge}
    _quiet_heap()
    f1 = {"updates/s": nan, "reads/s": nan, "scan rows/s": nan, "split+merge s": nan}
    impls = ((f1, _encode_format_1, _decode_format_1), (out, encode_bin, decode_bin))
    enc = {id(row): float("inf") for row, _, _ in impls}
    dec = dict(enc)
    blobs: dict[int, list[bytes]] = {}
    for _ in range(ROUNDS):  # interleaved, the best of ROUNDS in CPU time: the machine's noise only ever adds
        for row, enc_fn, dec_fn in impls:
            t0 = time.process_time()
            blobs[id(row)] = [enc_fn(b, codec) for b in bins.values()]
            enc[id(row)] = min(enc[id(row)], time.process_time() - t0)
            t0 = time.process_time()
            for blob in blobs[id(row)]:
                dec_fn(blob, codec)
            dec[id(row)] = min(dec[id(row)], time.process_time() - t0)
    for row, _, _ in impls:
        size = sum(len(b) for b in blobs[id(row)])
        e, d = enc[id(row)], dec[id(row)]
        row.update({"encode MB/s": size / e / 1e6, "decode MB/s": size / d / 1e6, "MB": size / 1e6, "encode s": e, "decode s": d})
    gc.unfreeze()
    # tstate's bins, by key: the baseline encodes the same keys grouped the same way (bin order)
    out["bins"] = [list(b.states) for b in bins.values()]  # type: ignore[assignment]
    inp.close()
    ex.run()
    out["format 1"] = f1  # type: ignore[assignment]
    return out


#: rounds of encoding and decoding (each implementation's best counts)
ROUNDS = 7


def _quiet_heap() -> None:
    """Before timing encode and decode (every implementation alike): collect, then
    freeze the long-lived heap out of the cyclic GC (``gc.freeze``), as a
    latency-sensitive process does (``benchmarks.common.EpochDriver``) -- otherwise a
    full collection walking every state object lands in whichever row runs then."""
    gc.collect()
    gc.freeze()


nan = float("nan")


def _encode_format_1(b: Any, codec: Any) -> bytes:
    """A bin as tstate wrote it before the msgspec codec (checkpoint format 1)."""
    return msgpack.Packer(use_bin_type=True).pack([MAGIC_FORMAT_1, codec.fingerprint, bin_to_builtins(b, codec)])


def _decode_format_1(data: bytes, codec: Any) -> Any:
    """...and as it read it back."""
    return bin_from_builtins(msgpack.unpackb(data, strict_map_key=False)[2], codec)


def run_baseline(name: str, entries: int, bins: list[list[Any]]) -> dict[str, float]:
    """The dict + msgpack baseline; ``bins``: tstate's bins (their keys), for the row
    encoding the same dict bin by bin."""
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
        for k in range(keys):  # the same values tstate's operator builds from every entry once
            for v in range(per_key):
                if name == "map of lists":
                    d[k].setdefault(str(v % 10), []).append(v)
                else:
                    d[k][v] = 1
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
    per_bin = [{k: d[k] for k in b} for b in bins]  # the same dicts, grouped like tstate's bins
    _quiet_heap()
    enc = dec = enc_bins = float("inf")
    for _ in range(ROUNDS):  # the best of ROUNDS in CPU time, like tstate's rows
        t0 = time.process_time()
        blob = msgpack.packb(d)
        enc = min(enc, time.process_time() - t0)
        t0 = time.process_time()
        msgpack.unpackb(blob, strict_map_key=False)
        dec = min(dec, time.process_time() - t0)
        t0 = time.process_time()
        for pb in per_bin:
            msgpack.packb(pb)
        enc_bins = min(enc_bins, time.process_time() - t0)
    gc.unfreeze()
    return {"updates/s": upd, "reads/s": reads, "scan rows/s": scan, "split+merge s": float("nan"),
            "encode MB/s": len(blob) / enc / 1e6, "decode MB/s": len(blob) / dec / 1e6, "MB": len(blob) / 1e6,
            "bin order encode MB/s": len(blob) / enc_bins / 1e6}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    cols = ["updates/s", "reads/s", "scan rows/s", "split+merge s", "encode MB/s", "decode MB/s", "MB"]
    rows = []
    ratios: dict[str, dict[str, float]] = {}
    fmt = lambda r: [f"{r[c]:,.0f}" if r[c] >= 100 else ("-" if r[c] != r[c] else f"{r[c]:.2f}") for c in cols]  # noqa: E731
    for name in CASES:
        t = run_case(name, args.entries)
        f1 = t.pop("format 1")  # type: ignore[misc]
        base = run_baseline(name, args.entries, t.pop("bins"))  # type: ignore[arg-type]
        rows.append((name, "tstate", *fmt(t)))
        rows.append((name, "tstate format 1", *fmt(f1)))  # type: ignore[arg-type]
        rows.append((name, "dict + msgpack", *fmt(base)))
        in_bins = dict(base, **{"encode MB/s": base["bin order encode MB/s"]})
        for c in cols:
            if c != "encode MB/s":
                in_bins[c] = nan
        rows.append((name, "dict + msgpack, bin order", *fmt(in_bins)))
        ratios[name] = {
            "encode_speedup_over_format_1": round(f1["encode s"] / t["encode s"], 2),  # type: ignore[index]
            "decode_speedup_over_format_1": round(f1["decode s"] / t["decode s"], 2),  # type: ignore[index]
            "baseline_encode_mbps_over_tstate": round(base["encode MB/s"] / t["encode MB/s"], 2),
            "baseline_decode_mbps_over_tstate": round(base["decode MB/s"] / t["decode MB/s"], 2),
            "baseline_bin_order_encode_mbps_over_tstate": round(base["bin order encode MB/s"] / t["encode MB/s"], 2),
        }
    print(f"state types, {args.entries:,} entries in total each, 256 bins, 1 worker")
    print(table(["state", "implementation", *cols], rows))
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
