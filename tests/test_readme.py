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
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pip install -q -e '.[test]' && python -m pytest" in ci


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
