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


def _extras() -> dict[str, list[str]]:
    assert tomllib is not None
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _pins(reqs: list[str]) -> dict[str, str]:
    """``name -> the requirement's version specifier`` (extras and markers dropped)."""
    out = {}
    for r in reqs:
        name = re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower()
        spec = re.sub(r"^[\w.-]+(\[[^\]]*\])?", "", r).split(";")[0].strip()
        out[name] = spec
    return out


def test_the_s3_trio_is_pinned_alike_wherever_boto3_is_needed() -> None:
    """s3fs, aiobotocore and boto3 move together (pyproject.toml, "The S3 trio"): left
    unpinned, pip 23's resolver gives up on boto3's botocore vs aiobotocore's.  Every
    extra that brings boto3 (directly or through moto) pins all three, to the same
    versions, and those versions satisfy the objectstore extra's ranges."""
    if tomllib is None:  # pragma: no cover
        return
    from packaging.specifiers import SpecifierSet

    extras = _extras()
    trio = ("s3fs", "aiobotocore", "boto3")
    with_boto = [name for name, reqs in extras.items() if {"boto3", "moto"} & set(_pins(reqs))]
    assert set(with_boto) >= {"test", "bench"}
    pinned = [{k: _pins(extras[name]).get(k) for k in trio} for name in with_boto]
    assert all(p == pinned[0] for p in pinned), dict(zip(with_boto, pinned))
    assert all(pinned[0][k] for k in trio), f"unpinned: {pinned[0]}"
    s3fs_version = pinned[0]["s3fs"].removeprefix("==")
    assert s3fs_version in SpecifierSet(_pins(extras["objectstore"])["s3fs"])
