"""The ``test`` extra installs everything the tests import optionally: a test that
``pytest.importorskip``s a package the extra lacks would be skipped on every fresh
install (``pip install -e '.[test]'``), silently."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def test_the_test_extra_has_every_package_a_test_skips_without() -> None:
    if tomllib is None:  # pragma: no cover
        return
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = _requirement_names(project["optional-dependencies"]["test"]) | _requirement_names(project["dependencies"])
    skipped = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for mod in re.findall(r"importorskip\(\s*[\"']([A-Za-z_][\w.]*)[\"']", path.read_text()):
            top = mod.split(".")[0]
            if top != "tstate":  # our own modules are no packages to install
                skipped.add(top.lower().replace("_", "-"))
    assert {"matplotlib", "pyspark", "mypy"} <= skipped  # the scan finds them
    assert skipped <= extra, f"not in the test extra of pyproject.toml: {sorted(skipped - extra)}"
