"""Deploying to a cluster (docs/spark-deploy.md): the executors get tstate and its
dependencies from a packed virtual environment shipped with ``--archives`` and the
user's module with ``--py-files``, and use nothing else.

The environment is built from the working copy: a wheel of it, installed with its
dependencies into a fresh venv, packed with venv-pack (``.tar.gz`` at the fastest
compression level).  It is cached under the temp directory, keyed by a hash of the
sources and the Python version, so a second run reuses it.  Skipped (not failed) when
the environment cannot be built (venv-pack missing, no package index); CI installs
everything it needs with the ``test`` extra."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .deploy_flow import ROWS, build

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.deploy


def _source_key() -> str:
    """A hash of what goes into the wheel, and of the Python it is built for."""
    h = hashlib.sha256(sys.version.encode())
    for top in ("pyproject.toml", "README.md", "tstate", "apps"):
        p = ROOT / top
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        for f in files:
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def packed_env() -> tuple[Path, float]:
    """The packed environment (built, or taken from the cache) and the seconds it took."""
    venv_pack = pytest.importorskip("venv_pack", reason="packing the environment needs venv-pack (the test extra)")
    cache = Path(tempfile.gettempdir()) / f"tstate-deploy-env-{_source_key()}"
    archive = cache / "env.tar.gz"
    if archive.exists():
        return archive, 0.0
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tstate-deploy-build-"))
    try:
        src = work / "src"  # a copy of the sources: the build leaves nothing in the working copy
        src.mkdir()
        for top in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / top, src / top)
        for top in ("tstate", "apps"):
            shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
        built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "wheels"), str(src)])
        if built.returncode:
            pytest.skip(f"cannot build the tstate wheel: {built.stderr[-1500:]}")
        (wheel,) = (work / "wheels").glob("tstate-*.whl")
        env = work / "env"
        # --copies: the interpreter is a file in the archive, not a symlink out of it
        # (Spark refuses to unpack an entry that points outside the archive); no pip in
        # it: this Python's pip installs into it (--python)
        made = _run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(env)])
        assert made.returncode == 0, made.stderr
        # tstate and its dependencies (from pip's cache when it has them); not pyspark:
        # the executors take it from their Spark installation
        # without PYTHONPATH: a working copy on it would make pip find tstate "already
        # installed" in the new environment and pack one without it
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        inst = _run([
            sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q",
            "--disable-pip-version-check", str(wheel),
        ], env=clean)
        if inst.returncode:
            pytest.skip(f"cannot install tstate's dependencies into the environment: {inst.stderr[-1500:]}")
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f"env.{os.getpid()}.tar.gz"
        # .tar.gz: Spark keeps the files' modes when it unpacks one (not a plain .tar)
        venv_pack.pack(prefix=str(env), output=str(tmp), compress_level=1, force=True)
        with tarfile.open(tmp) as packed:  # never cache an environment without tstate in it
            assert any(n.endswith("site-packages/tstate/__init__.py") for n in packed.getnames()), (
                f"the packed environment has no tstate: {inst.stdout[-1500:]}")
        os.replace(tmp, archive)  # atomic: a concurrent run sees the whole archive or none
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return archive, time.perf_counter() - start


def reference() -> tuple[list, list]:
    flow, events, total, got = build()
    for t in sorted({r["t"] for r in ROWS}):
        events.send([r for r in ROWS if r["t"] == t], time=t)
    events.close()
    flow.run(workers=2)
    state = sorted(flow.state(total, format="dict").items())
    return sorted([t, r.key, r.total] for t, r in got.items), [list(kv) for kv in state]


def test_executors_use_only_the_shipped_environment_and_module(tmp_path: Any) -> None:
    archive, built = packed_env()
    print(f"packed environment: {archive} ({archive.stat().st_size / 1e6:.0f} MB, built in {built:.1f} s)")
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or shutil.which("spark-submit")
    assert submit is not None, "spark-submit comes with pyspark (the test extra)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYTHONHOME")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_DRIVER_PYTHON=sys.executable, PYSPARK_PYTHON="./environment/bin/python")
    env["SPARK_WORKER_DIR"] = str(tmp_path / "work")  # the executors' directories (archives unpack there)
    out = tmp_path / "out.json"
    cmd = [
        submit, "--master", "local-cluster[2,1,1024]",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.executor.memory=512m",
        "--archives", f"{archive}#environment",
        "--py-files", str(HERE / "deploy_flow.py"),
        str(HERE / "deploy_job.py"), str(ROOT), str(tmp_path / "ckpt"), str(out),
    ]
    job = _run(cmd, cwd=str(tmp_path), env=env)
    assert job.returncode == 0, job.stderr[-4000:]
    got = json.loads(out.read_text())
    records, state = reference()
    assert got["records"] == records and got["state"] == state
    # every task ran in a Python of the unpacked archive, with tstate from it, and saw
    # neither the working copy nor the driver's site-packages
    base_site = sysconfig.get_paths()["purelib"]
    assert len({w["pid"] for w in got["where"]}) >= 1
    for w in got["where"]:
        env_dir = os.path.join(w["cwd"], "environment")
        assert w["executable"].startswith(env_dir + os.sep), w
        assert w["prefix"] == env_dir and w["prefix"] != w["base_prefix"], w
        for mod in ("tstate", "msgpack"):
            assert w[mod].startswith(env_dir + os.sep + "lib" + os.sep), w
        assert not any(p.startswith(str(ROOT)) or p == base_site for p in w["path"]), w["path"]
