"""The ``tstate`` command line (also ``python -m tstate``): inspect checkpoints, plot metrics.

``tstate checkpoints DIR``
    List the committed checkpoints in ``DIR``: id, logical time, creation time (UTC),
    size of the data files, number of files, and every operator with its bin count and
    how many bins hold state.  Unreadable (torn, corrupt) manifests are reported on
    stderr.  Nothing is written to ``DIR``.  A directory with neither ``manifests/`` nor
    ``data/`` is "not a checkpoint directory" (exit code 1).

    **Times.**  A checkpoint's time is an epoch of the dataflow.  When its sources said
    what an epoch is (:class:`tstate.io.sources.EpochUnit`, recorded in the manifest's
    metadata: ``ts.io.parquet(..., time="date", epoch="1h")``, the CEP app's flight
    source), the ``time`` column shows the epoch's start as the user's time -- a date
    (``2001-01-01 06:00``, UTC) or the time column's number -- and an ``epoch`` column
    the raw epoch; otherwise ``time`` is the epoch.

``tstate checkpoints DIR --verify``
    Also read every data file (and attached file: the Spark backend's held-back
    records) and check its size and xxh64 checksum; the table gets a
    ``status`` column and every problem is printed with the file's path.  Exit code 1
    if anything is wrong (a torn manifest included), else 0.

``tstate checkpoints DIR --state OPERATOR [--at ID]``
    Print one operator's state at checkpoint ``ID`` (default: the newest one that
    verifies; an ``ID`` that is not there is an error listing the ids that are): every
    bin's chain (snapshot, then deltas) decoded into one row per key: ``bin``, ``key``,
    ``state`` (the stored builtins as JSON: no Python state type is needed) and
    ``timers`` (the times the key has a timer at, as the user's times like the listing's).

``--format csv`` prints any of these tables as CSV (without the summary lines).

``tstate plot-latency METRICS.json [MORE.json ...] --out latency.png [--title T]``
    Plot the epoch latencies of one or more runs, each a JSON file written from
    :meth:`tstate.metrics.Metrics.to_json`, with :func:`tstate.metrics.plot_latency`
    (needs matplotlib: ``pip install -e '.[bench]'``).  Series are named after the files.

Exit codes (the same convention as ``python -m apps.cep`` and ``python -m apps.graph``):
0 success, 1 a problem found or an error (bad data, a missing or broken checkpoint;
printed on stderr as ``error: ...``), 2 a usage error (a bad option).

>>> main(["checkpoints", "/nonexistent/ckpt"])   # prints the error on stderr
1
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import sys
from typing import Any, Sequence, TextIO

__all__ = ["main"]

#: the ``--help`` epilog on exit codes (the same convention as the sample apps')
EXIT_CODES = (
    "exit status: 0 success; 1 a problem found, bad data or a runtime error (printed on stderr as "
    "'error: ...'); 2 a usage error (a bad option)"
)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tstate", description="tstate command line tools", epilog=EXIT_CODES)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ck = sub.add_parser(
        "checkpoints",
        help="list, verify or read the checkpoints in a directory",
        description="List the committed checkpoints in DIR; --verify checks every file; "
        "--state prints one operator's state.  Times are shown as the dates (or numbers) the "
        "dataflow's epochs stand for when its sources recorded their epoch unit.",
        epilog=EXIT_CODES,
    )
    ck.add_argument("directory", metavar="DIR", help="the checkpoint directory")
    ck.add_argument(
        "--verify", action="store_true", help="check every file's size and checksum (exit 1 if any problem)"
    )
    ck.add_argument("--state", metavar="OPERATOR", help="print this operator's state")
    ck.add_argument("--at", metavar="ID", type=int, help="the checkpoint id for --state (default: the latest good one)")
    ck.add_argument("--format", choices=("table", "csv"), default="table", help="output format (default: table)")
    pl = sub.add_parser(
        "plot-latency",
        help="plot epoch latencies from Metrics.to_json() files",
        description="Plot the epoch latencies recorded in METRICS.json files (Metrics.to_json()) to a PNG.",
        epilog=EXIT_CODES,
    )
    pl.add_argument("metrics", metavar="METRICS.json", nargs="+", help="JSON written from Metrics.to_json()")
    pl.add_argument("--out", required=True, metavar="X.png", help="the PNG to write")
    pl.add_argument("--title", default="epoch latency", help="the plot title")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit
    code (see the module docstring)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (argparse printed it)
        return exc.code if isinstance(exc.code, int) else 2
    from tstate.errors import TstateError

    try:
        if args.command == "checkpoints":
            if args.at is not None and args.state is None:
                print("tstate checkpoints: error: --at needs --state OPERATOR", file=sys.stderr)
                return 2
            if args.state is not None:
                return _state(args.directory, args.state, args.at, args.format, sys.stdout)
            return _list(args.directory, args.verify, args.format, sys.stdout)
        return _plot(args.metrics, args.out, args.title)
    except TstateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------------- output helpers


def _table(header: list[str], rows: list[list[str]], fmt: str, out: TextIO) -> None:
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        return
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip(), file=out)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "TiB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} B"  # pragma: no cover


def _created(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _jsonable(v: Any) -> Any:
    """Stored builtins / decoded keys as something ``json.dumps`` accepts."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((_jsonable(x) for x in v), key=repr)
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {k: _jsonable(x) for k, x in v.items()}
        return [[_jsonable(k), _jsonable(x)] for k, x in v.items()]
    if isinstance(v, (bytes, bytearray)):
        return repr(bytes(v))
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    return repr(v)


def _show(v: Any) -> str:
    return json.dumps(_jsonable(v), ensure_ascii=False)


def _time(t: Any) -> str:
    return str(t) if isinstance(t, (int, float, str)) else repr(t)


def _unit(m: Any) -> Any:
    """The epoch unit a manifest's metadata records (None: times are plain epochs)."""
    from tstate.io.sources import EpochUnit

    return EpochUnit.from_builtins(m.meta.get("epoch_unit"))


def _user_time(t: Any, unit: Any) -> str:
    """Time ``t`` as the user's time when the unit is known, else the epoch."""
    return unit.label(t) if unit is not None else _time(t)


def _open(directory: str) -> Any:
    """The store at ``directory``, read-only; CheckpointError if it is not one."""
    from tstate.checkpoint.store import CheckpointStore
    from tstate.errors import CheckpointError

    store = CheckpointStore(directory, readonly=True)
    try:
        found = set(store.fs.list_dirs(""))
    except OSError as exc:
        raise CheckpointError(f"{directory}: cannot be listed ({exc})") from None
    if not found & {"manifests", "data"}:
        raise CheckpointError(f"{directory}: not a checkpoint directory (it has no manifests/ or data/)")
    return store


def _available(store: Any) -> str:
    """What ``--at`` can name: the readable checkpoints' ids and times."""
    ms = store.manifests()
    if not ms:
        return "there is no readable checkpoint"
    listed = ", ".join(f"{m.id} (time {_user_time(m.time, _unit(m))})" for m in ms)
    return f"the checkpoints there are {listed}"


# ---------------------------------------------------------------------- checkpoints


def _list(directory: str, verify: bool, fmt: str, out: TextIO) -> int:
    store = _open(directory)
    manifests = store.manifests()
    unreadable = list(store.problems)
    units = [_unit(m) for m in manifests]
    dated = any(u is not None for u in units)  # then an "epoch" column too
    header = ["id", "time", *(["epoch"] if dated else []), "created", "size", "files", "operators"]
    if verify:
        header.append("status")
    rows = []
    problems: list[str] = list(unreadable)
    for m, unit in zip(manifests, units):
        ops = ", ".join(
            f"{name}:{e.bins} bins ({len(e.chains)} with state)" for name, e in m.operators.items()
        )
        size = str(m.total_size) if fmt == "csv" else _size(m.total_size)
        times = [_user_time(m.time, unit), _time(m.time)] if dated else [_time(m.time)]
        row = [str(m.id), *times, _created(m.created), size, str(m.file_count), ops or "-"]
        if verify:
            found = store.verify(m)
            problems.extend(f"checkpoint {m.id}: {p}" for p in found)
            row.append("ok" if not found else f"{len(found)} problem{'s' if len(found) > 1 else ''}")
        rows.append(row)
    _table(header, rows, fmt, out)
    if fmt == "table":
        print(f"{len(manifests)} checkpoint{'s' if len(manifests) != 1 else ''} in {directory}", file=out)
    if verify:
        if problems:
            where = out if fmt == "table" else sys.stderr
            print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''}:", file=where)
            for p in problems:
                print(f"  {p}", file=where)
            return 1
        if fmt == "table":
            print("all files verified", file=out)
        return 0
    for p in unreadable:
        print(f"warning: {p}", file=sys.stderr)
    return 0


def _state(directory: str, operator: str, at: int | None, fmt: str, out: TextIO) -> int:
    from tstate.checkpoint.delta import apply_chain
    from tstate.errors import CheckpointError, StateTypeError, TstateError

    store = _open(directory)
    if at is None:
        m = store.latest()
        if m is None:
            detail = "; ".join(store.problems)
            raise CheckpointError(f"no good checkpoint in {directory}" + (f" ({detail})" if detail else ""))
    else:
        try:
            m = store.manifest(at)
        except CheckpointError as exc:
            raise CheckpointError(f"no checkpoint {at} in {directory} ({exc}); {_available(store)}") from None
    unit = _unit(m)
    entry = m.operators.get(operator)
    if entry is None:
        names = ", ".join(m.operators) or "none"
        raise CheckpointError(f"checkpoint {m.id} has no operator {operator!r} (it has: {names})")
    try:
        fingerprint: str | None = entry.fingerprint
    except StateTypeError:  # an unreadable stored schema: take the files' own fingerprint
        fingerprint = None
    rows = []
    keys = timers = 0
    for b, chain in sorted(entry.chains.items()):
        chain_bytes = [store.read(ref) for ref in chain]  # CheckpointError naming a bad file
        try:
            data = apply_chain(chain_bytes, fingerprint)
        except TstateError as exc:  # not a bin payload, a schema mismatch...
            raise CheckpointError(f"checkpoint {m.id}, operator {operator!r}, bin {b}: {exc}") from None
        at_times: dict[Any, list[Any]] = {}
        for t, ks in data["timers"].items():
            timers += len(ks)
            for k in ks:
                at_times.setdefault(k, []).append(t)
        for k, v in data["states"].items():
            keys += 1
            rows.append([str(b), _show(k), _show(v), _timers(at_times.pop(k, []), unit)])
        for k, ts in at_times.items():  # a timer on a key without state
            rows.append([str(b), _show(k), "", _timers(ts, unit)])
    _table(["bin", "key", "state", "timers"], rows, fmt, out)
    if fmt == "table":
        print(
            f"operator {operator!r} at checkpoint {m.id} (time {_user_time(m.time, unit)}): {keys} keys, {timers} timers "
            f"in {len(entry.chains)} of {entry.bins} bins",
            file=out,
        )
    return 0


def _timers(times: list[Any], unit: Any) -> str:
    return _show(times if unit is None else [unit.label(t) for t in times])


# ---------------------------------------------------------------------- plot-latency


def _plot(paths: list[str], out: str, title: str) -> int:
    from tstate.errors import TstateError

    series: dict[str, Sequence[tuple[float, float]]] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, ValueError) as exc:
            raise TstateError(f"{path}: cannot be read as JSON ({exc})") from None
        lat = obj.get("latencies") if isinstance(obj, dict) else None
        if not isinstance(lat, list) or not all(isinstance(p, list) and len(p) == 2 for p in lat):
            raise TstateError(
                f"{path}: no \"latencies\" list of [epoch, seconds] pairs (write it with Metrics.to_json())"
            )
        name = os.path.splitext(os.path.basename(path))[0]
        while name in series:
            name += "'"
        series[name] = [(float(e), float(s)) for e, s in lat]
    try:
        from tstate.metrics import plot_latency

        plot_latency(series, out, title=title)
    except ImportError as exc:
        raise TstateError(f"plot-latency needs matplotlib (pip install -e '.[bench]'): {exc}") from None
    except OSError as exc:
        raise TstateError(f"{out}: cannot be written ({exc})") from None
    points = sum(len(s) for s in series.values())
    print(f"wrote {out} ({len(series)} series, {points} points)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
