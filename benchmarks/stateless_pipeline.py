"""Stateless pipeline ``map -> exchange -> filter`` over 1M ints: tstate with 1 and 4
workers vs a plain Python loop calling the same functions, in the same run.

    python -m benchmarks.stateless_pipeline [--records N] [--repeat R]

Target (issue 2): tstate with 1 worker >= 50% of the plain loop's events/s.  The last
line is one JSON object: ``tstate_1w_events_per_s``, ``tstate_1w_over_plain`` and
``tstate_4w_over_plain`` (speed ratios, higher is faster).
"""

from __future__ import annotations

import argparse
import json

import tstate as ts
from benchmarks.common import interleaved, ratio, table


def f(x: int) -> int:
    return x * 3 + 1


def g(y: int) -> bool:
    return y % 7 != 0


def key(y: int) -> int:
    return y


def plain(data: list[int]) -> int:
    out = []
    for x in data:
        y = f(x)
        if g(y):
            out.append(y)
    return len(out)


def tstate_run(data: list[int], workers: int) -> int:
    flow = ts.Dataflow("pipeline")
    inp = flow.input("ints")
    n = [0]
    inp.map(f).exchange(key).filter(g).sink(lambda t, recs: n.__setitem__(0, n[0] + len(recs)))
    inp.send(data)
    inp.close()
    flow.run(workers=workers)
    return n[0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    data = list(range(args.records))
    res = interleaved(
        {
            "plain Python loop": lambda: plain(data),
            "tstate, 1 worker": lambda: tstate_run(data, 1),
            "tstate, 4 workers": lambda: tstate_run(data, 4),
        },
        args.repeat,
    )
    counts = {r for _, r in res.values()}
    assert len(counts) == 1, f"implementations disagree: {res}"
    base = res["plain Python loop"][0]
    rows = [(name, f"{args.records / t / 1e6:.2f}M", f"{base / t:.2f}") for name, (t, _) in res.items()]
    print(f"map -> exchange -> filter over {args.records:,} ints, median of {args.repeat} interleaved runs")
    print(table(["implementation", "events/s", "vs plain loop"], rows))
    one, four = res["tstate, 1 worker"][0], res["tstate, 4 workers"][0]
    print(
        json.dumps(
            {
                "tstate_1w_events_per_s": round(args.records / one),
                "tstate_1w_over_plain": ratio(base / one),
                "tstate_4w_over_plain": ratio(base / four),
            }
        )
    )


if __name__ == "__main__":
    main()
