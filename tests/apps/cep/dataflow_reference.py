"""Oracles for the CEP dataflow tests (:mod:`apps.cep.dataflow`).

* :func:`sequential` -- the matcher run sequentially per key: each key's non-late
  events in (event time, arrival) order through ``process``, then one final
  ``advance_time``; the matches per key in order, the timeouts per key as a set.
  The *matches* are what the operator must find; its *timeouts* may differ, since
  which partial matches time out depends on where ``advance_time`` is called (under
  ``skip_past_last_event``, a held match released by an expiry at an earlier watermark
  prunes partial matches that a single late ``advance_time`` reports as timed out).
* :func:`timed` -- the same, epoch by epoch, following the module docstring's rule for
  *when* every output is emitted: at every dataflow time ``T`` the arrivals at ``T``
  are split into late / buffered, then the buffered events below ``W(T)`` are released
  and ``advance_time(W(T))`` is called.  It gives every output with its exact dataflow
  time, which the operator must reproduce on any number of workers, across migrations
  and across a restore.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from apps.cep import Match, Matcher, Pattern, TimedOut

Batches = Sequence[tuple[int, Sequence[Any]]]


def mkey(m: Match) -> tuple:
    """A hashable rendering of a match: its stages and events, first and last times."""
    return (tuple((k, tuple(v)) for k, v in m.items()), m.first_time, m.last_time)


def tkey(t: TimedOut) -> tuple:
    return (mkey(t.partial), t.timeout_time)


def _arrivals(batches: Batches, key: Callable, time: Callable) -> dict[Any, list[tuple[int, Any, Any]]]:
    per_key: dict[Any, list[tuple[int, Any, Any]]] = {}
    for ta, recs in batches:
        for r in recs:
            per_key.setdefault(key(r), []).append((ta, time(r), r))
    return per_key


def is_late(ta: int, t: Any, epoch: Any, lateness: Any) -> bool:
    return bool(t < ta * epoch - lateness)


def sequential(
    pattern: Pattern,
    batches: Batches,
    *,
    key: Callable,
    time: Callable,
    epoch: Any = 1,
    lateness: Any = 0,
    report_timeouts: bool = True,
    end: Any = 10**12,
) -> tuple[dict[Any, list[tuple]], dict[Any, set], dict[Any, list]]:
    """(matches per key in order, timeouts per key as a set, late records per key)."""
    m = Matcher(pattern, report_timeouts=report_timeouts)
    matches: dict[Any, list[tuple]] = {}
    timeouts: dict[Any, set] = {}
    late: dict[Any, list] = {}
    for k, arr in _arrivals(batches, key, time).items():
        ok = [(t, i, r) for i, (ta, t, r) in enumerate(arr) if not is_late(ta, t, epoch, lateness)]
        late_k = [r for ta, t, r in arr if is_late(ta, t, epoch, lateness)]
        if late_k:
            late[k] = late_k
        ok.sort(key=lambda x: (x[0], x[1]))
        st = m.new_state()
        out: list[Match] = []
        for t, _, r in ok:
            out += m.process(st, r, t)
        ms, tos = m.advance_time(st, end)
        out += ms
        if out:
            matches[k] = [mkey(x) for x in out]
        if tos:
            timeouts[k] = {tkey(x) for x in tos}
    return matches, timeouts, late


def timed(
    pattern: Pattern,
    batches: Batches,
    *,
    key: Callable,
    time: Callable,
    epoch: Any = 1,
    lateness: Any = 0,
    report_timeouts: bool = True,
) -> tuple[Counter, Counter, Counter]:
    """Multisets of ``(time, key, rendering)`` for matches, timeouts and late records."""
    m = Matcher(pattern, report_timeouts=report_timeouts)
    matches: Counter = Counter()
    timeouts: Counter = Counter()
    late: Counter = Counter()
    for k, arr in _arrivals(batches, key, time).items():
        st = m.new_state()
        buf: list[tuple[Any, Any]] = []
        T = arr[0][0]
        i = 0
        while True:
            while i < len(arr) and arr[i][0] == T:
                _, t, r = arr[i]
                if is_late(T, t, epoch, lateness):
                    late[(T, k, r)] += 1
                else:
                    buf.append((t, r))
                i += 1
            wm = (T + 1) * epoch - lateness
            buf.sort(key=lambda x: x[0])
            ready = [x for x in buf if x[0] < wm]
            buf = [x for x in buf if x[0] >= wm]
            for t, r in ready:
                for x in m.process(st, r, t):
                    matches[(T, k, mkey(x))] += 1
            ms, tos = m.advance_time(st, wm)
            for x in ms:
                matches[(T, k, mkey(x))] += 1
            for y in tos:
                timeouts[(T, k, tkey(y))] += 1
            if i >= len(arr) and not buf and (m.window is None or not st.runs):
                break
            T += 1
    return matches, timeouts, late


def collected(items: Iterable[tuple[int, tuple[Any, Any]]], kind: str) -> Counter:
    """The operator's output as a multiset comparable with :func:`timed`."""
    c: Counter = Counter()
    for t, (k, v) in items:
        if kind == "match":
            c[(t, k, mkey(v))] += 1
        elif kind == "timeout":
            c[(t, k, tkey(v))] += 1
        else:
            c[(t, k, v)] += 1
    return c


def per_key_in_order(items: Iterable[tuple[int, tuple[Any, Match]]]) -> dict[Any, list[tuple]]:
    """Matches per key in emission order (stable within an epoch: one key's matches of
    one epoch come from one timer call, in the matcher's order)."""
    out: dict[Any, list[tuple]] = {}
    for t, (k, x) in sorted(items, key=lambda p: p[0]):
        out.setdefault(k, []).append(mkey(x))
    return out
