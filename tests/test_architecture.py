"""docs/architecture.md stays in sync with the code: every repository path and every
``tstate.``/``apps.`` module it names exists, and it covers every package of tstate."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
PATH = re.compile(r"\b((?:tstate|apps|tests|docs|examples|benchmarks)/[A-Za-z0-9_./-]*)")
MODULE = re.compile(r"\b((?:tstate|apps)(?:\.[a-z_][a-z0-9_]*)+)\b")


def test_every_path_it_names_exists() -> None:
    paths = {p.rstrip(".") for p in PATH.findall(DOC)}
    assert len(paths) > 40  # the regex finds them
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_dotted_module_it_names_exists() -> None:
    missing = []
    for mod in set(MODULE.findall(DOC)):
        rel = Path(*mod.split("."))
        if not ((ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()):
            missing.append(mod)
    assert not missing, f"docs/architecture.md names modules that do not exist: {sorted(missing)}"


def test_it_covers_every_package_and_module_of_tstate() -> None:
    named = {p.rstrip("/.") for p in PATH.findall(DOC)}
    packages = {f"tstate/{d.name}" for d in (ROOT / "tstate").iterdir() if (d / "__init__.py").exists()}
    assert packages <= named, f"packages missing from docs/architecture.md: {sorted(packages - named)}"
    spark = {f"tstate/spark/{f.name}" for f in (ROOT / "tstate" / "spark").glob("*.py") if f.name != "__init__.py"}
    assert spark <= named, f"Spark modules missing from docs/architecture.md: {sorted(spark - named)}"


def test_the_readme_links_it_and_not_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme and "(docs/spark-deploy.md)" in readme
    assert "../shared" not in readme


def test_no_document_names_a_path_of_one_machine() -> None:
    """Paths in the documents are relative to a checkout (issue 24: apps/cep/README.md
    named /work/shared/data/flights-3m.parquet)."""
    import re

    docs = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("apps/**/*.md"), *ROOT.glob("benchmarks/**/*.md")]
    for md in docs:
        assert not re.search(r"(?<![\w.-])/(work|home|root|Users)/", md.read_text()), md


def test_the_deploy_page_says_where_executors_unpack_archives() -> None:
    """Without SPARK_WORKER_DIR, local-cluster unpacks archives into the venv's
    site-packages (issue 24); the deploy test sets it, and the page says so."""
    doc = (ROOT / "docs" / "spark-deploy.md").read_text()
    assert "SPARK_WORKER_DIR" in doc and "site-packages/pyspark/work/" in doc
    assert 'env["SPARK_WORKER_DIR"]' in (ROOT / "tests" / "spark" / "test_deploy.py").read_text()


def drawn_layers(doc: str) -> dict[str, int]:
    """The layer drawing (the first code block under "Layers and packages"): package or
    top-level module of tstate (dotted) -> its line, 0 at the top."""
    section = doc[doc.index("## Layers and packages") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    drawn: dict[str, int] = {}
    for i, line in enumerate(block.splitlines()):
        for path in re.findall(r"\btstate/[A-Za-z0-9_]*(?:\.py|/)?", line):
            parts = path.rstrip("/").removesuffix(".py").split("/")[:2]
            name = ".".join(p for p in parts if p != "__init__")
            assert name not in drawn, f"{name} is drawn twice in the layer drawing"
            drawn[name] = i
    return drawn


def test_the_layer_drawing_holds_against_the_import_graph() -> None:
    """Every package of tstate is drawn, and none imports (anywhere in its modules)
    one drawn above it: the drawing's order is the code's."""
    # as a module of the tests package: putting tests/ on sys.path would make
    # tests/apps shadow the apps package for every test run after this one
    from tests.test_layers import graph, package_of, packages

    drawn = drawn_layers(DOC)
    pk = packages(graph(ROOT / "tstate"))
    assert set(pk) == set(drawn), f"drawn but gone: {sorted(set(drawn) - set(pk))}; not drawn: {sorted(set(pk) - set(drawn))}"
    wrong = [
        f"{a} (drawn on line {drawn[a]}) imports {b} (drawn above it, line {drawn[b]}): {m} -> {t} line {n}"
        for a, targets in pk.items() for b, (m, t, n) in targets.items() if drawn[b] < drawn[a]
    ]
    assert not wrong, "\n".join(wrong)
    assert package_of("tstate.engine.checkpointing.writer") == "tstate.engine"


def test_the_layer_drawing_check_catches_a_package_drawn_too_low() -> None:
    doc = "## Layers and packages\n\n```\n  tstate/plan/   nodes\n  tstate/checkpoint/, tstate/io/\n```\n"
    assert drawn_layers(doc) == {"tstate.plan": 0, "tstate.checkpoint": 1, "tstate.io": 1}
