"""Arrow arrays built in tasks without pandas (tstate.spark.arrays)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tstate.spark.arrays import binaries, ints


@given(st.lists(st.binary(max_size=20), max_size=30), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30))
def test_same_as_pyarrow(values: list, numbers: list) -> None:
    import pyarrow as pa

    assert binaries(values).equals(pa.array(values, pa.binary()))
    assert ints(numbers).equals(pa.array(numbers, pa.int64()))
    small = [n % 1000 for n in numbers]
    assert ints(np.array(small), "int32").equals(pa.array(small, pa.int32()))


def test_a_task_output_batch_does_not_import_pandas() -> None:
    code = (
        "import sys; from tstate.spark.wire import arrow; "
        "arrow([(1, 2, 3, 4, 5, b'x')]); print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
