"""The library is mypy-clean (its public API is typed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_clean():
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "tstate"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
