"""tstate's Python worker daemon (tstate.spark.daemon): the workers of a local_session
are forked with tstate's task code already imported, and a module that fails to
preload never stops the daemon from serving."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from tstate.spark import daemon


def _report(batches: Iterator[Any]) -> Iterator[Any]:
    """A task reporting what the worker's daemon preloaded (read from the module the
    daemon's preload left in the forked worker: a task never imports it itself)."""
    import pyarrow as pa

    for _ in batches:
        pass
    mod = sys.modules.get("tstate.spark.daemon")
    preloaded = ",".join(getattr(mod, "preloaded", ())) if mod is not None else "<not imported>"
    yield pa.RecordBatch.from_pylist([{"preloaded": preloaded}])


def test_workers_are_forked_with_the_task_code_imported(spark: Any) -> None:
    rows = spark.range(0, 2, 1, 2).mapInArrow(_report, "preloaded string").collect()
    assert len(rows) == 2
    for row in rows:
        got = row.preloaded.split(",")
        assert set(daemon.PRELOAD) <= set(got), row.preloaded


def test_a_module_failing_to_import_is_skipped(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "tstate_test_raises_on_import.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(daemon, "preloaded", ())
    done, failed = daemon.preload(["tstate_test_no_such_module", "tstate_test_raises_on_import", "json"])
    assert done == ("json",) and daemon.preloaded == ("json",)
    assert [name for name, _ in failed] == ["tstate_test_no_such_module", "tstate_test_raises_on_import"]
    assert "ModuleNotFoundError" in failed[0][1] and "RuntimeError: boom" in failed[1][1]


def test_the_modules_requested() -> None:
    got = daemon.requested({daemon.ENV: " json , ,tstate.spark.task,csv"})
    assert got[: len(daemon.PRELOAD)] == daemon.PRELOAD
    assert got[-2:] == ("json", "csv") and got.count("tstate.spark.task") == 1
    assert daemon.requested({})[-1] != "json"


def test_the_daemon_serves_when_preloading_fails() -> None:
    """Run as Spark runs it (``python -m tstate.spark.daemon``) with a module that
    cannot be imported: it says so on stderr, still tells its port and forks a worker
    for a connection (the worker's pid comes back), and ends when its stdin closes."""
    env = {**os.environ, daemon.ENV: "tstate_test_no_such_module"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tstate.spark.daemon", "pyspark.worker"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        (port,) = struct.unpack("!i", proc.stdout.read(4))
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            data = b""
            while len(data) < 4:
                chunk = sock.recv(4 - len(data))
                assert chunk, "the daemon closed the connection without forking a worker"
                data += chunk
            (pid,) = struct.unpack("!i", data)
            assert pid > 0 and pid != proc.pid
        proc.stdin.close()
        proc.wait(60)  # (PySpark's daemon exits on its stdin's end, with status 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.stderr is not None
    assert "not preloaded 'tstate_test_no_such_module'" in proc.stderr.read().decode()


def test_pysparks_own_zips_go_after_the_installed_package(tmp_path: Path) -> None:
    """The zips shipped inside an installed pyspark package move after the rest of the
    path (their modules then import from the package, bytecode cached); other zips, and
    a path where pyspark is found only in a zip, stay as they are."""
    site = tmp_path / "site"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    own, py4j, other = str(lib / "pyspark.zip"), str(lib / "py4j-src.zip"), str(tmp_path / "deps.zip")
    path = [own, py4j, other, str(tmp_path), str(site)]
    assert daemon.unzipped(path) == [other, str(tmp_path), str(site), own, py4j]
    assert daemon.unzipped([own, py4j, str(tmp_path)]) == [own, py4j, str(tmp_path)]  # (no package outside a zip)


def test_workers_import_pyspark_from_the_installed_package(spark: Any) -> None:
    """A worker of a local_session imports PySpark from the installed package (bytecode
    cached), not from the pyspark.zip Spark puts first on its PYTHONPATH."""
    (row,) = spark.range(0, 1, 1, 1).mapInArrow(_pyspark_file, "file string").collect()
    import pyspark

    assert row.file == pyspark.__file__ and ".zip" not in row.file


def _pyspark_file(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa
    import pyspark

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__}])
