"""Arrow arrays built in Spark tasks without importing pandas.

``pyarrow.array`` checks whether its argument is a pandas object, which imports pandas
(about 3 s the first time in each Python worker); Spark's own ``mapInArrow`` worker
never imports it.  Tasks build their output columns here instead, straight from
buffers: :func:`ints` (a numpy array or a list of ints) and :func:`binaries` (a list of
``bytes``), both without nulls.

>>> ints([3, 1], "int32").to_pylist(), binaries([b"a", b"", b"bc"]).to_pylist()
([3, 1], [b'a', b'', b'bc'])
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["ints", "binaries"]

#: the most bytes one ``binary`` array holds (its offsets are 32-bit)
_BINARY_LIMIT = (1 << 31) - 1


def ints(values: Any, kind: str = "int64") -> Any:
    """An Arrow integer array (``kind``: ``"int32"`` or ``"int64"``) of ``values`` (a
    numpy array or a sequence of ints)."""
    import numpy as np
    import pyarrow as pa

    arr = np.ascontiguousarray(values, dtype=np.int32 if kind == "int32" else np.int64)
    return pa.Array.from_buffers(pa.int32() if kind == "int32" else pa.int64(), len(arr), [None, pa.py_buffer(arr)])


def binaries(values: Sequence[bytes]) -> Any:
    """An Arrow ``binary`` array of ``values``."""
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    if values:
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=offsets[1:])
    if offsets[-1] > _BINARY_LIMIT:  # (too large for one array: pyarrow's own check says so)
        return pa.array(values, pa.binary())
    data = pa.py_buffer(b"".join(values))
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets.astype(np.int32)), data])
