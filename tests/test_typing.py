"""The library and the sample apps are mypy-clean: ``python -m mypy`` (the files and
settings of ``[tool.mypy]`` in pyproject.toml) exits 0.  mypy is in the ``test`` extra
(tests/test_extras.py checks that), so on a CI install this test runs, never skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_covers_the_library_and_the_apps() -> None:
    if sys.version_info < (3, 11):  # pragma: no cover
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert {"tstate", "apps"} <= set(files), f"[tool.mypy] files = {files}"


def test_mypy_clean() -> None:
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
