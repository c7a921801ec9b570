"""Where the driver JVM of a local Spark session spends its CPU, from Java Flight
Recorder's execution samples (the JDK's own ``jfr`` and ``jcmd`` tools; no agent).

:func:`recording_options` are the driver's Java options that start a recording (set
them before the session starts: ``PYSPARK_SUBMIT_ARGS``); :func:`dump` writes what was
recorded so far (``jcmd <pid> JFR.dump``); :func:`breakdown` sorts the executor
threads' samples into the categories of :data:`CATEGORIES` (the first whose fragment
is anywhere on the sample's stack: inclusive) and names the hottest leaf frames.  Used
by ``python -m benchmarks.spark_cep_profile --jfr FILE``.
"""

from __future__ import annotations

import collections
import json
import subprocess
from typing import Any

__all__ = ["CATEGORIES", "breakdown", "dump", "recording_options"]

#: category -> fragments of frame names (class.method) that put a sample in it
CATEGORIES = [
    ("rows -> Arrow for a Python task: per-row batch size check", ("ArrowWriter.sizeInBytes", "underBatchSizeLimit")),
    ("rows -> Arrow for a Python task", ("ArrowWriter", "ArrowFieldWriter", "PythonArrowInput")),
    ("Arrow from a Python task -> rows", ("ArrowColumnVector", "PythonArrowOutput", "ColumnarBatchRow")),
    ("in-memory cache (build, scan, stats)", ("InMemoryRelation", "CachedBatch", "CachedRDDBuilder", "ColumnBuilder",
                                             "ColumnAccessor", "ColumnStats", "columnar.compression")),
    ("sort", ("UnsafeExternalRowSorter", "UnsafeExternalSorter", "UnsafeInMemorySorter", "sort_addToSorter")),
    ("shuffle write/read", ("ShuffleWriter", "ShuffleBlockFetcher", "UnsafeRowSerializer", "ExternalSorter")),
    ("parquet read", ("parquet",)),
    ("hash (bin column)", ("XXH64",)),
    ("codegen, planning", ("codegen.CodeGenerator", "janino", "catalyst.analysis", "catalyst.optimizer", "RuleExecutor")),
]  # fmt: skip


def recording_options(path: str) -> str:
    """``PYSPARK_SUBMIT_ARGS`` starting a recording (profile settings) into ``path``."""
    return f"--driver-java-options -XX:StartFlightRecording=filename={path},settings=profile pyspark-shell"


def dump(spark: Any, path: str) -> None:
    """Write the driver JVM's recording so far to ``path`` (``jcmd``)."""
    pid = str(spark._jvm.java.lang.ProcessHandle.current().pid())
    subprocess.run(["jcmd", pid, "JFR.dump", f"filename={path}"], check=True, capture_output=True, timeout=120)


def _frames(event: dict) -> list[str]:
    return [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}" for f in event["values"]["stackTrace"]["frames"]]


def breakdown(path: str, top: int = 12) -> dict[str, Any]:
    """The executor threads' execution samples of recording ``path``: their share by
    category (:data:`CATEGORIES`, else ``other``), the hottest leaf frames, and the
    samples by thread kind."""
    text = subprocess.run(
        ["jfr", "print", "--json", "--events", "jdk.ExecutionSample", path], capture_output=True, text=True, check=True,
        timeout=600,
    ).stdout
    events = json.loads(text)["recording"]["events"]
    threads: collections.Counter[str] = collections.Counter()
    cats: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for e in events:
        name = (e["values"].get("sampledThread") or {}).get("javaName") or "?"
        kind = "executor task" if name.startswith("Executor task") else name.split("-")[0].strip()
        threads[kind] += 1
        if kind != "executor task":
            continue
        frames = _frames(e)
        where = " ".join(frames)
        cats[next((c for c, frags in CATEGORIES if any(f in where for f in frags)), "other")] += 1
        leaves[frames[0] if frames else "?"] += 1
    n = max(1, sum(cats.values()))
    return {
        "samples": len(events), "executor_samples": sum(cats.values()),
        "executor_share_by_category": {k: round(v / n, 3) for k, v in cats.most_common()},
        "hottest_leaves": {k: round(v / n, 3) for k, v in leaves.most_common(top)},
        "samples_by_thread": dict(threads.most_common(8)),
    }  # fmt: skip
