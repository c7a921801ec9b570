"""Running a job module in a subprocess that may be SIGKILLed, and reading the
exactly-once file output it leaves (shared by the crash tests)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class JobFailed(AssertionError):
    """The job exited with an error (not by a kill)."""


def run_killable(module: str, *args: str, kill_after: float | None = None) -> tuple[int, str]:
    """``python -m module args...`` from the repository root, SIGKILLed after
    ``kill_after`` seconds if still running; its exit code and standard output.  Any
    exit but success or the kill raises :class:`JobFailed` with its standard error."""
    cmd = [sys.executable, "-m", module, *args]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            p.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    if p.returncode not in (0, -signal.SIGKILL, 9):
        raise JobFailed(f"job failed ({p.returncode}):\n{err}")
    return p.returncode, out


def outputs(directory: Path) -> dict[str, list[str]]:
    """Per epoch file, its lines sorted (workers may interleave records of one epoch)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".jsonl"):
            out[name] = sorted((directory / name).read_text().splitlines())
        else:
            # a half-written epoch file of a killed run: epoch-<t>.jsonl.tmp-<token>
            assert re.search(r"\.jsonl\.tmp(-[0-9a-f]+)?$", name), f"unexpected file {name}"
    return out
