"""How Spark counts a batch run's epochs for the cut (``tstate.spark.cuts.span``): the
exact rows per epoch for an input of few epochs (one job), slices of about
``rows / GRAIN`` rows past ``EXACT_EPOCHS`` epochs; both give cuts that cover every
epoch once."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tstate.spark import cuts


def _frame(spark: Any, times: list[int]) -> Any:
    return spark.createDataFrame([(t, i) for i, t in enumerate(times)], "t long, v long").repartition(3)


TIMES = [t for t in range(40) for _ in range(t % 4)] + [7] * 9


def test_few_epochs_are_counted_exactly(spark: Any) -> None:
    found = cuts.span([(_frame(spark, TIMES), "t")], None, 80)  # (slices would be ~10 rows)
    assert found.loads == dict(Counter(TIMES)) and (found.first, found.top) == (1, 39)
    later = cuts.span([(_frame(spark, TIMES), "t")], 20, 80)  # (from a committed frontier on)
    assert later.loads == {t: n for t, n in Counter(TIMES).items() if t >= 20} and later.first == 21


def test_past_the_exact_limit_the_epochs_are_sliced(spark: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(cuts, "EXACT_EPOCHS", 5)
    found = cuts.span([(_frame(spark, TIMES), "t")], None, 16)  # (slices of 2 rows)
    assert sum(found.loads.values()) == len(TIMES) and (found.first, found.top) == (1, 39)
    assert len(found.loads) < len(set(TIMES))  # (epochs grouped: not one entry per epoch)
    counts = Counter(TIMES)
    firsts = sorted(found.loads)
    for a, b in zip(firsts, firsts[1:] + [40]):  # a slice's rows are its epochs' rows
        assert found.loads[a] == sum(n for t, n in counts.items() if a <= t < b)


def test_no_rows_no_epochs(spark: Any) -> None:
    empty = spark.createDataFrame([], "t long, v long")
    found = cuts.span([(empty, "t")], None, 10)
    assert (found.loads, found.first, found.top) == ({}, None, None)
