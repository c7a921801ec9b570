"""The dataflow whose checkpoints are the *format 1* fixture (tests/fixtures/checkpoint-format1).

Format 1 is the state encoding of tstate before the msgspec codec (cattrs builtins
packed by msgpack: dicts with non-``str`` keys as ``[key, value]`` pairs, manifests
without a ``format`` field).  The fixture directory was written by that code with

    python -m tests.checkpoint.format1_flow tests/fixtures/checkpoint-format1

(at commit "tests: a format-1 checkpoint fixture", before the codec changed) and must
not be regenerated with a later tstate: it stands for checkpoints written by the
previous release.  The state types below are part of the stored schemas (module path
and field names are fingerprinted): do not rename or move them.

The state covers every kind of the codec: a struct with scalars, bytes, aware and naive
datetimes, dates, int and str enums, lists, dicts with ``str``, ``int`` and tuple keys,
sets of frozen structs, frozensets, fixed tuples, a union, a private field, tracked
``Map`` / ``Array`` fields; an ``int`` state under keys of every kind (big ints,
datetimes, dates, frozensets, bytes, floats, tuples holding a date); a ``Map`` of lists
of strings; timers pending at the checkpoint and keys cleared between checkpoints.
"""

from __future__ import annotations

import datetime as dt
import enum
import shutil
import sys
from typing import Any, Optional

from attrs import define, field, frozen

import tstate as ts
from tstate.types import Array, Map

#: the checkpoint's epochs: a checkpoint every 2 epochs; the fixture run stops after EPOCHS_RUN
EPOCHS = 12
EPOCHS_RUN = 8
EVERY = 2


class Color(enum.Enum):
    RED = 1
    BLUE = 30000


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@frozen
class Leg:
    origin: str
    delay: Optional[int] = None


@define
class Route:
    flights: int = 0
    ratio: float = 0.0
    name: str = ""
    blob: bytes = b""
    ok: bool = False
    when: Optional[dt.datetime] = None
    naive: Optional[dt.datetime] = None
    day: dt.date = dt.date(2020, 1, 1)
    color: Color = Color.RED
    mode: Mode = Mode.FAST
    delays: list[int] = field(factory=list)
    by_hour: dict[int, int] = field(factory=dict)
    by_pair: dict[tuple[str, int], list[float]] = field(factory=dict)
    names: dict[str, Leg] = field(factory=dict)
    seen: set[Leg] = field(factory=set)
    tags: frozenset[str] = frozenset()
    pair: tuple[int, str] = (0, "")
    either: int | str = 0
    _secret: int = 0
    counts: Map[str, int] = field(factory=Map)
    log: Array[int] = field(factory=Array)
    legs: Map[tuple[int, str], Leg] = field(factory=Map)


ORIGINS = ["ATL", "BOS", "SFO", "JFK", "ORD"]
ODD_KEYS: list[Any] = [
    "ATL", 7, -3, 2**70, 1.5, b"\x00b", None, ("ATL", 3), ("x", dt.date(2024, 1, 1)),
    dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    dt.date(2024, 1, 2), frozenset({1, 2}),
]


def batches(epochs: int = EPOCHS) -> list[tuple[int, list[Any]]]:
    """Deterministic input: per epoch a few route records and odd-key records."""
    out = []
    for t in range(epochs):
        recs: list[Any] = []
        for i in range(6):
            n = t * 6 + i
            recs.append(("route", (ORIGINS[n % 5], n % 3), n))
        for j, k in enumerate(ODD_KEYS):
            if (t + j) % 3 != 0:
                recs.append(("odd", k, t + j))
        recs.append(("tracked", t % 4, t))
        out.append((t, recs))
    return out


def _route(r: Route, rec: Any, ctx: ts.Context) -> None:
    n = rec[2]
    if n % 17 == 16:
        ctx.clear()  # a key cleared between checkpoints
        return
    r.flights += 1
    r.ratio = n / 7
    r.name = f"r{n}"
    r.blob = bytes([n % 256, 0])
    r.ok = n % 2 == 0
    r.when = dt.datetime(2024, 3, 1, n % 24, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30)))
    r.naive = dt.datetime(2024, 3, 1, 0, 0, n % 60, n)
    r.day = dt.date(2024, 1 + n % 12, 1)
    r.color = Color.BLUE if n % 2 else Color.RED
    r.mode = Mode.SLOW if n % 3 else Mode.FAST
    r.delays.append(n * 1000 - 5)
    r.by_hour[n % 24] = r.by_hour.get(n % 24, 0) + 1
    r.by_pair.setdefault((ctx.key[0], n % 2), []).append(n / 3)
    r.names[f"n{n % 4}"] = Leg(ctx.key[0], n if n % 2 else None)
    r.seen.add(Leg("s", n % 3))
    r.tags = r.tags | {f"t{n % 5}"}
    r.pair = (n, str(n))
    r.either = n if n % 2 else str(n)
    r._secret = -n
    r.counts[str(n % 3)] = r.counts.get(str(n % 3), 0) + n
    r.log.append(n)
    r.legs[(n % 2, "x")] = Leg("l", n)
    ctx.notify_at(ctx.time + 3)


def build(epochs: int = EPOCHS) -> tuple[ts.Dataflow, dict[str, Any], Any]:
    """The fixture dataflow over the first ``epochs`` epochs: operators ``routes``,
    ``odd`` and ``tracked``, and a collected stream of everything they emit."""
    flow = ts.Dataflow("format1")
    src = flow.source(ts.io.from_batches(lambda: batches(epochs)), name="src")
    routes_in = src.filter(lambda r: r[0] == "route")
    odd_in = src.filter(lambda r: r[0] == "odd")
    tracked_in = src.filter(lambda r: r[0] == "tracked")

    routes = flow.stateful(routes_in, key=lambda r: r[1], state=Route, bins=8, name="routes")(_route)

    @routes.on_notify
    def _fired(r: Route, time: Any, ctx: ts.Context) -> None:
        ctx.emit(("fired", ctx.key, time, r.flights, sorted(r.by_hour.items())))

    @flow.stateful(odd_in, key=lambda r: r[1], state=int, bins=4, name="odd")
    def odd(total: int, rec: Any, ctx: ts.Context) -> int:
        ctx.emit(("odd", repr(ctx.key), total + rec[2]))
        return total + rec[2]

    @flow.stateful(tracked_in, key=lambda r: r[1], state=Map[int, list[str]], bins=2, name="tracked")
    def tracked(m: Map[int, list[str]], rec: Any, ctx: ts.Context) -> None:
        m.setdefault(rec[2] % 3, []).append(f"v{rec[2]}")
        if rec[2] % 5 == 4:
            m.pop(rec[2] % 3, None)

    out = routes.concat(odd, tracked).collect()
    return flow, {"routes": routes, "odd": odd, "tracked": tracked}, out


def write_fixture(directory: str) -> None:
    """Run the first EPOCHS_RUN epochs with a checkpoint every EVERY epochs (sync, all
    chains kept: snapshots then deltas), then abandon the run."""
    from tstate.engine.checkpointing.coordinator import Checkpoints

    shutil.rmtree(directory, ignore_errors=True)
    flow, _ops, _out = build()
    cfg = Checkpoints(directory, every_epochs=EVERY, mode="sync", retain=1, compact_after=8)
    ex = flow.start(2, checkpoint=cfg)
    while ex.coordinator.committed[-1:] != [EPOCHS_RUN] if ex.coordinator.committed else True:
        if not ex.step():
            break
    ex.coordinator.abort()


if __name__ == "__main__":
    write_fixture(sys.argv[1])
