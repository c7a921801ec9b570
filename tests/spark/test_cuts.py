"""How a batch run cuts its epochs into micro-batches (``tstate.spark.cuts.batch_cuts``):
no Spark needed, checked against the rules it states."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tstate.spark.cuts import batch_cuts as _cuts


@given(
    counts=st.dictionaries(st.integers(0, 60), st.integers(0, 50), max_size=30),
    rows=st.integers(1, 120),
    epochs=st.one_of(st.none(), st.integers(1, 7)),
    starts=st.lists(st.integers(-5, 70), max_size=4),
)
def test_cuts_cover_every_epoch_once_and_respect_the_row_budget(
    counts: dict[int, int], rows: int, epochs: int | None, starts: list[int]
) -> None:
    lo = min(counts, default=0)
    top = max(counts, default=-1)
    cuts = _cuts(counts, lo, top, epochs, rows, starts)
    if top < lo:
        assert cuts == []
        return
    # contiguous, non-empty, from lo past top
    assert cuts[0][0] == lo and cuts[-1][1] > top
    assert all(a < b for a, b in cuts)
    assert all(cuts[i][1] == cuts[i + 1][0] for i in range(len(cuts) - 1))
    if epochs is not None:
        assert all(b - a == epochs for a, b in cuts)
        return
    assert cuts[-1][1] == top + 1
    firsts = {a for a, _ in cuts}
    for s in starts:  # a rescale time inside the run starts a micro-batch
        if lo < s <= top:
            assert s in firsts

    def load(a: int, b: int) -> int:
        return sum(n for t, n in counts.items() if a <= t < b)

    for a, b in cuts:  # over budget only when one epoch alone is over it
        if load(a, b) > rows:
            assert sum(1 for t, n in counts.items() if a <= t < b and n) == 1
    for (a, b), (c, d) in zip(cuts, cuts[1:]):  # greedy: the next epoch with rows did not fit
        if c in starts:
            continue
        nxt = min((t for t, n in counts.items() if c <= t < d and n), default=None)
        if nxt is not None and load(a, b):
            assert load(a, b) + counts[nxt] > rows
