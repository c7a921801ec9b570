"""The README's Python examples run as written (documentation that matches)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_starts_with_the_two_commands():
    text = README.read_text()
    first = text.index("## The two commands")
    assert first < text.index("##", first + 5)
    cmds = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    assert "python -m examples" in cmds and "python -m pytest" in cmds


def _readme_commands() -> list[str]:
    """The README's two commands: the command lines of its first ``bash`` block."""
    block = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_ci_runs_the_readmes_test_command_in_a_new_venv():
    """``.ci/run`` runs the README's second command exactly as written, in a virtual
    environment it creates with ``python3 -m venv`` (its bundled pip, never upgraded):
    a package installed on the machine beforehand cannot make CI pass."""
    first, second = _readme_commands()
    assert "python -m examples" in first and second.endswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[-1] == second  # the last thing CI does
    assert any(ln.startswith("python3 -m venv ") for ln in lines)
    assert any(ln.startswith("source ") and "/bin/activate" in ln for ln in lines)
    assert "--system-site-packages" not in ci and "pip install --upgrade pip" not in ci
    assert "pip install -U pip" not in ci
    # the venv is made (and activated) before the command runs
    venv_at = next(i for i, ln in enumerate(lines) if ln.startswith("python3 -m venv "))
    assert venv_at < lines.index(second)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # dont_inherit: annotations are evaluated, as in a user's script
    exec(compile(code, "README.md", "exec", dont_inherit=True), {"__name__": "__readme__"})


def test_the_timer_rule_is_shown_with_a_tumbling_window():
    """``notify_at(t)`` fires after every record at ``t``: the README and the docstring
    show a window ``[start, start + width)`` with its timer at ``start + width - 1``,
    and their examples run (the README's above, the docstring's here)."""
    import doctest

    from tstate.state import context

    text = README.read_text()
    section = text[text.index("### Timers and tumbling windows") :]
    assert "ctx.notify_at(start + WIDTH - 1)" in section[: section.index("\n## ")]
    doc = context.Context.notify_at.__doc__
    assert "[start, start + width)" in doc and "ctx.notify_at(start + WIDTH - 1)" in doc
    assert doctest.testmod(context).failed == 0
