"""tstate's modules import each other without circles, and the layers below the
engines name no engine.

Every import of a tstate module counts -- at module level, inside a function, or under
``TYPE_CHECKING`` (a type-level dependency is a dependency) -- so no function-level
import can be hiding a circle.  A lower layer that must name an upper layer's type
names a ``Protocol`` it defines (e.g. :class:`tstate.operators.base.Host`,
:class:`tstate.state.query.Queryable`, :class:`tstate.plan.graph.Planned`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: tstate's layers, top first: every package (or top-level module) of tstate is in one,
#: and none reaches -- directly or through any chain of imports -- a layer above its own
#: (packages of one layer may import each other, without circles).  The same order is
#: drawn in docs/architecture.md (tests/test_architecture.py holds the drawing to the code).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tstate", "tstate.__main__"),  # the public surface, the CLI
    ("tstate.spark",),  # the Spark backend (hosts the operators' runtimes)
    ("tstate.dataflow",),  # the builder API
    ("tstate.runner",),  # running what it built (imports an engine only when it runs one)
    ("tstate.engine",),  # the embedded engine
    ("tstate.operators",),  # one runtime per node type
    ("tstate.migration",),  # reconfiguration, ownership over time, the hand-over delta
    ("tstate.backend",),  # the contract both engines implement: imports no engine
    ("tstate.checkpoint",),  # the shared format and commit path
    ("tstate.plan",),  # typed, frozen nodes
    ("tstate.io", "tstate.state", "tstate.capability", "tstate.notificator", "tstate.probe"),
    ("tstate.types",),
    ("tstate.progress", "tstate.keys", "tstate.column_key", "tstate.hash_kind"),
    ("tstate.metrics", "tstate.errors"),
)

#: the packages and modules below the engines: they import no engine, no operator
#: runtime, no Spark module, neither the builder API nor the backend interface
LOWER = ("tstate.errors", "tstate.keys", "tstate.column_key", "tstate.hash_kind", "tstate.metrics", "tstate.progress", "tstate.types", "tstate.state",
         "tstate.io", "tstate.plan", "tstate.checkpoint", "tstate.capability", "tstate.notificator", "tstate.probe",
         "tstate.migration")
UPPER = ("tstate.engine", "tstate.operators", "tstate.spark", "tstate.dataflow")


def package_of(module: str) -> str:
    """``tstate.engine.checkpointing.writer`` -> ``tstate.engine``; ``tstate`` -> ``tstate``."""
    return ".".join(module.split(".")[:2])


def layer_of(package: str) -> int:
    """The index of ``package``'s layer in :data:`LAYERS` (0: the top)."""
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise KeyError(f"{package} is in no layer of tests/test_layers.py's LAYERS")


def packages(edges: dict[str, dict[str, int]]) -> dict[str, dict[str, tuple[str, str, int]]]:
    """Package -> the packages it imports (-> one ``(module, module, line)`` doing so)."""
    out: dict[str, dict[str, tuple[str, str, int]]] = {package_of(m): {} for m in edges}
    for m, targets in sorted(edges.items()):
        for t, line in sorted(targets.items()):
            if package_of(t) != package_of(m):
                out[package_of(m)].setdefault(package_of(t), (m, t, line))
    return out


def reach(edges: dict[str, dict[str, object]], start: str) -> dict[str, list[str]]:
    """Every node reachable from ``start`` -> a shortest path to it (breadth first)."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges[v]):
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return paths


def climbs(edges: dict[str, dict[str, object]], level: "Callable[[str], int]") -> list[str]:
    """Each node that reaches a node of a higher layer (lower index), with the path."""
    wrong = []
    for v in sorted(edges):
        for w, path in reach(edges, v).items():
            if level(w) < level(v):
                wrong.append(f"{v} (layer {level(v)}) reaches {w} (layer {level(w)}): {' -> '.join(path)}")
                break
    return wrong


def modules(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package`` (a directory)."""
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import of a module in ``known`` in ``path`` -- at
    any depth of the syntax tree (functions, ``if TYPE_CHECKING:``)."""

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            # "from pkg import mod" imports the module pkg.mod; "from mod import name" the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            found = resolve(t)
            if found is not None and found != name:
                yield found, node.lineno


def graph(package: Path) -> dict[str, dict[str, int]]:
    """Module -> the modules it imports (-> the first line doing so)."""
    known = modules(package)
    edges: dict[str, dict[str, int]] = {m: {} for m in known}
    for m, path in known.items():
        for target, line in imports(m, path, known):
            edges[m].setdefault(target, line)
    return edges


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a
    cycle through them: ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # iterative enough for a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(cycle_through(sorted(comp), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def cycle_through(comp: list[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """A cycle from the first module of a strongly connected component back to it."""
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                return paths[v] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return comp  # pragma: no cover - a component always has a cycle


def spell(cycle: list[str], edges: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_no_module_of_tstate_is_in_an_import_circle() -> None:
    edges = graph(ROOT / "tstate")
    assert len(edges) > 90 and sum(map(len, edges.values())) > 300  # the walk finds them
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(spell(c, edges) for c in found)


def test_the_layers_below_the_engines_name_no_engine() -> None:
    edges = graph(ROOT / "tstate")
    wrong = [
        f"{m} imports {t} (line {line})"
        for m, targets in edges.items() if m.startswith(LOWER)
        for t, line in targets.items() if t.startswith(UPPER)
    ]
    assert not wrong, "\n".join(wrong)


def test_every_package_of_tstate_is_in_one_layer() -> None:
    found = {package_of(m) for m in graph(ROOT / "tstate")}
    listed = [p for layer in LAYERS for p in layer]
    assert len(listed) == len(set(listed)), "a package in two layers"
    assert found == set(listed), f"unclassified: {sorted(found - set(listed))}; gone: {sorted(set(listed) - found)}"


def test_no_module_reaches_a_higher_layer() -> None:
    """Module granularity: following imports (any depth of the syntax tree) from any
    module never arrives in a layer above the module's own."""
    edges = graph(ROOT / "tstate")
    wrong = climbs(edges, lambda m: layer_of(package_of(m)))
    assert not wrong, "\n".join(wrong)


def test_no_package_reaches_a_higher_layer_or_circles() -> None:
    """Package granularity: the packages' graph (an edge where any module of one
    imports any module of the other) has no circle and never climbs a layer -- a
    module-level walk can miss ``engine -> operators -> migration -> engine`` when
    the modules involved differ."""
    pk = packages(graph(ROOT / "tstate"))
    wrong = climbs(pk, layer_of)  # type: ignore[arg-type]
    assert not wrong, "\n".join(wrong)
    assert not circles({p: {q: 0 for q in t} for p, t in pk.items()}), pk


def test_the_layer_walk_finds_a_climb_through_other_packages() -> None:
    edges: dict[str, dict[str, object]] = {"tstate.operators.a": {"tstate.migration.b": 1},
                                          "tstate.migration.b": {"tstate.engine.c": 1}, "tstate.engine.c": {}}
    wrong = climbs(edges, lambda m: layer_of(package_of(m)))
    assert wrong and "tstate.migration.b -> tstate.engine.c" in wrong[0], wrong


def test_the_builder_api_imports_no_runtime_module() -> None:
    edges = graph(ROOT / "tstate")
    runtime = ("tstate.engine", "tstate.operators", "tstate.spark")
    direct = {t: line for t, line in edges["tstate.dataflow"].items() if t.startswith(runtime)}
    type_only = {"tstate.engine.execution"}  # named under TYPE_CHECKING: Dataflow.start returns an Execution
    assert set(direct) <= type_only, direct
    # the runner imports the embedded engine inside the functions that run it
    # (tests/test_backend.py: building loads no engine)
    ran = {t for t in edges["tstate.runner"] if t.startswith(runtime)}
    assert ran <= {"tstate.engine.execution", "tstate.engine.embedded"}, ran


@pytest.mark.parametrize(
    "files, cycle",
    [
        # a circle through a function-level import and one under TYPE_CHECKING
        ({"a.py": "def f():\n    from pkg import b\n", "b.py": "from typing import TYPE_CHECKING\n"
          "if TYPE_CHECKING:\n    from pkg.c import X\n", "c.py": "import pkg.a\n"}, ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]),
        # relative imports, and a package importing its own module
        ({"__init__.py": "from .a import f\n", "a.py": "from . import b\n", "b.py": "from pkg import f\n"},
         ["pkg", "pkg.a", "pkg.b", "pkg"]),
        ({"a.py": "from pkg import b\n", "b.py": "import os\n"}, None),
    ],
)
def test_the_walk_finds_circles_hidden_in_functions_and_type_checking(
    tmp_path: Path, files: dict[str, str], cycle: list[str] | None
) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(text)
    found = circles(graph(pkg))
    assert found == ([cycle] if cycle else [])


def node_kind_tests(path: Path, kinds: set[str]) -> list[int]:
    """Lines of ``path`` comparing an attribute ``kind`` with a plan node's kind string
    (``op.spec.kind == "stateful"``, ``n.kind in ("sink", "probe")``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
            continue
        for s in sides:
            values = s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s]
            if any(isinstance(v, ast.Constant) and v.value in kinds for v in values):
                found.append(node.lineno)
                break
    return found


def test_runtimes_dispatch_on_node_types_not_kind_strings() -> None:
    """The engines tell plan nodes apart by their types (``isinstance``, or a
    type -> runtime table as tstate/engine/lowering.py's), never by ``node.kind``
    strings: a renamed kind could not silently fall through a comparison."""
    import tstate.plan as plan

    kinds = {c.kind for c in vars(plan).values() if isinstance(c, type) and issubclass(c, plan.Node) and c is not plan.Node}
    assert {"stateful", "source", "sink", "unary_frontier"} <= kinds, kinds
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tstate").rglob("*.py"))
        for line in node_kind_tests(path, kinds)
    ]
    assert not wrong, "node kinds compared as strings:\n" + "\n".join(wrong)


def test_the_kind_string_walk_finds_what_it_bans(tmp_path: Path) -> None:
    """:func:`node_kind_tests` catches the comparisons the test above bans (so that test
    cannot pass by finding nothing), and leaves other ``kind`` attributes alone."""
    src = tmp_path / "m.py"
    src.write_text(
        'if n.kind == "stateful": pass\n'
        'if op.spec.kind in ("sink", "probe"): pass\n'
        'if ref.kind == "snap": pass\n'
        'if isinstance(n.op, Stateful): pass\n'
    )
    assert node_kind_tests(src, {"stateful", "sink", "probe"}) == [1, 2]
