"""The shape of the code, guarded by tests instead of memory.

- **Imports run one way.** The import graph of ``graphckpt/`` is built with ``ast`` from every import statement of
  every module: at module level, under ``if TYPE_CHECKING:`` and inside functions alike (a guard that counts only
  run-time imports once let an 11-module circle back in). It has no cycle.
- **Small parts.** No module of ``graphckpt/`` or ``nodes/`` is over 600 lines, no class over 400 (the conformance
  suite's classes in ``graphckpt/testing/`` excepted), and ``graphckpt/app.py``, a facade, is at most 300 lines.
- **Parts, not owners.** No module reaches into a context's or an app's private names (``ctx._task``,
  ``app._begin``): outside the sync bridge (``graphckpt/sync.py``), a part a module needs is handed to it by name.
- **Formatted code.** The formatter's skip marker is for tables that read better aligned: at most 25 in the
  package, the nodes, the tests, the benchmarks and the examples together.

Each check is a function over a directory, so the tests below also run it on a small tree written to ``tmp_path``:
once with every rule broken (it must fail, naming each offender) and once compliant (it must pass).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]

MODULE_MAX, CLASS_MAX, APP_MAX = 600, 400, 300
SIZE_EXEMPT = "graphckpt/testing/"  # the conformance suite: one class per contract, each case a method
PRIVATE_REACH = re.compile(r"\b(ctx|app|self\.app)\._[a-z]")
PRIVATE_EXEMPT = {"graphckpt/sync.py"}  # the sync bridge
SKIP_MARKER = "# fmt" + ": skip"  # spelled in two parts so that this file does not count itself
SKIP_MAX = 25
SKIP_ROOTS = ("graphckpt", "nodes", "tests", "bench", "examples")


def _python_files(base: Path, roots: Iterable[str]) -> Iterator[Path]:
    for root in roots:
        if (base / root).is_dir():
            yield from sorted((base / root).rglob("*.py"))


# -- the import graph --------------------------------------------------------------------------------------------------


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> nx.DiGraph:
    """The modules of ``package`` (a directory) and which imports which: an edge ``a -> b`` for every ``import`` or
    ``from ... import`` of ``b`` anywhere in ``a``, each edge's ``where`` listing the ``file:line`` of its imports.

    Relative imports are resolved; ``from pkg import name`` is an import of ``pkg.name`` when that is a module, else of
    ``pkg`` (the package's ``__init__``). Importing ``pkg.mod`` also runs ``pkg/__init__``, but that is not an edge: a
    package's children would all be in a cycle with an ``__init__`` that re-exports them. Imports from outside the
    package and a module's imports of itself are left out."""
    base = package.parent
    files = {_module_name(path, base): path for path in sorted(package.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        where = path.relative_to(base).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for target in _imported(node, name, path.name == "__init__.py", files):
                if target == name:
                    continue
                graph.add_edge(name, target)
                places = graph.edges[name, target].setdefault("where", [])
                if f"{where}:{node.lineno}" not in places:
                    places.append(f"{where}:{node.lineno}")
    return graph


def _imported(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The modules of ``modules`` that the statement ``node`` of ``module`` imports."""
    if isinstance(node, ast.Import):
        found = []
        for alias in node.names:
            parts = alias.name.split(".")
            known = [".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules]
            found += known[:1]  # the module named, or the nearest package of it that is ours
        return found
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        parts = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        source = ".".join(parts)
    else:
        source = node.module or ""
    if source not in modules:
        return []
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]


def import_cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Cycles that name every module caught in one: for each strongly connected component of more than one module,
    the shortest cycle through each of its modules (duplicates dropped), each as ``[a, b, ..., a]``, the largest
    component first."""
    cycles: list[list[str]] = []
    components = sorted((c for c in nx.strongly_connected_components(graph) if len(c) > 1), key=lambda c: -len(c))
    for component in components:
        sub = graph.subgraph(component)
        seen: set[tuple[str, ...]] = set()
        for node in sorted(component):
            back = min((nx.shortest_path(sub, s, node) for s in sorted(sub.successors(node))), key=len)
            ring = [node, *back[:-1]]
            start = ring.index(min(ring))
            key = tuple(ring[start:] + ring[:start])
            if key not in seen:
                seen.add(key)
                cycles.append([*key, key[0]])
    return cycles


def describe_cycles(graph: nx.DiGraph, cycles: list[list[str]]) -> str:
    """The modules caught in each circle, then each cycle as ``a -> b -> ... -> a`` with where its imports are."""
    components = sorted((c for c in nx.strongly_connected_components(graph) if len(c) > 1), key=lambda c: -len(c))
    lines = [f"{len(components)} import circle(s): {'; '.join(', '.join(sorted(c)) for c in components)}"]
    lines.append(f"{len(cycles)} import cycle(s) through them:")
    for cycle in cycles:
        lines.append("  " + " -> ".join(cycle))
        for a, b in pairwise(cycle):
            lines.append(f"      {a} -> {b}: {', '.join(graph.edges[a, b]['where'])}")
    return "\n".join(lines)


def test_the_package_imports_run_one_way() -> None:
    graph = import_graph(ROOT / "graphckpt")
    cycles = import_cycles(graph)
    assert not cycles, describe_cycles(graph, cycles)


def _write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_cycle_finder_sees_imports_under_type_checking_and_in_functions(tmp_path: Path) -> None:
    """A cycle closed by an import under ``TYPE_CHECKING`` and one closed inside a function body are both found; a
    re-exporting ``__init__``, ``from pkg import module``, a relative import from a subpackage and a module importing
    itself make no cycle."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.e import E\nfrom pkg.sub.m import M\n",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nA = 1\n",
            "pkg/b.py": "from . import a\nB = 2\n",
            "pkg/c.py": "def f():\n    from .d import D\n    return D\n",
            "pkg/d.py": "import pkg.c\nD = 4\n",
            "pkg/e.py": "from pkg import a\nimport pkg.e\nE = 5\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/m.py": "from .. import b\nfrom ..a import A\nimport os\nM = 6\n",
        },
    )
    graph = import_graph(tmp_path / "pkg")
    assert graph.has_edge("pkg.e", "pkg.a") and not graph.has_edge("pkg.e", "pkg")
    assert graph.has_edge("pkg.sub.m", "pkg.b") and graph.has_edge("pkg.sub.m", "pkg.a")
    assert not graph.has_edge("pkg.sub.m", "pkg.sub")
    cycles = import_cycles(graph)
    assert sorted(cycles) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.d", "pkg.c"]]
    message = describe_cycles(graph, cycles)
    assert "pkg.a -> pkg.b -> pkg.a" in message and "pkg.c -> pkg.d -> pkg.c" in message
    assert "pkg/a.py:3" in message and "pkg/c.py:2" in message


def test_a_circle_of_several_modules_is_named_by_a_cycle_through_each(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/x.py": "from pkg import y\n",
            "pkg/y.py": "from pkg import z\n",
            "pkg/z.py": "from pkg.x import X\nfrom pkg import y\n",
        },
    )
    cycles = import_cycles(import_graph(tmp_path / "pkg"))
    assert sorted(cycles) == [["pkg.x", "pkg.y", "pkg.z", "pkg.x"], ["pkg.y", "pkg.z", "pkg.y"]]
    _write(tmp_path, {"pkg/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg\n"})
    assert import_cycles(import_graph(tmp_path / "pkg")) == []  # the package imports z, not z the package


# -- sizes -------------------------------------------------------------------------------------------------------------


def oversized(base: Path) -> list[str]:
    """Modules of ``graphckpt/`` and ``nodes/`` under ``base`` over :data:`MODULE_MAX` lines, classes over
    :data:`CLASS_MAX` (outside :data:`SIZE_EXEMPT`), and an ``app.py`` over :data:`APP_MAX`: ``file:line``, why."""
    offenders: list[str] = []
    for path in _python_files(base, ("graphckpt", "nodes")):
        where = path.relative_to(base).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        limit = APP_MAX if where == "graphckpt/app.py" else MODULE_MAX
        if lines > limit:
            offenders.append(f"{where}:1 module of {lines} lines (at most {limit})")
        if where.startswith(SIZE_EXEMPT):
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > CLASS_MAX:
                    offenders.append(f"{where}:{node.lineno} class {node.name} of {size} lines (at most {CLASS_MAX})")
    return offenders


def test_no_module_or_class_is_too_big() -> None:
    offenders = oversized(ROOT)
    assert not offenders, "too big:\n" + "\n".join(offenders)


def _class(name: str, lines: int) -> str:
    return f"class {name}:\n" + "    x = 1\n" * (lines - 1)


def test_the_size_check_names_each_offender(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "graphckpt/big.py": "x = 1\n" * 601,
            "graphckpt/app.py": "x = 1\n" * 301,
            "graphckpt/small.py": _class("Small", 400),
            "graphckpt/large.py": '"""Doc."""\n' + _class("Large", 401),
            "graphckpt/testing/suite.py": _class("Conformance", 500),
            "nodes/long.py": "x = 1\n" * 601,
            "graphckpt/fine.py": "x = 1\n" * 600,
        },
    )
    assert oversized(tmp_path) == [
        "graphckpt/app.py:1 module of 301 lines (at most 300)",
        "graphckpt/big.py:1 module of 601 lines (at most 600)",
        "graphckpt/large.py:2 class Large of 401 lines (at most 400)",
        "nodes/long.py:1 module of 601 lines (at most 600)",
    ]
    _write(tmp_path, {"graphckpt/big.py": "", "graphckpt/app.py": "x = 1\n" * 300, "nodes/long.py": ""})
    _write(tmp_path, {"graphckpt/large.py": _class("Large", 400)})
    assert oversized(tmp_path) == []


# -- private names -----------------------------------------------------------------------------------------------------


def private_reaches(base: Path) -> list[str]:
    """Lines of ``graphckpt/`` and ``nodes/`` under ``base`` that use a context's or an app's private name."""
    offenders: list[str] = []
    for path in _python_files(base, ("graphckpt", "nodes")):
        where = path.relative_to(base).as_posix()
        if where in PRIVATE_EXEMPT:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_REACH.search(line):
                offenders.append(f"{where}:{number}: {line.strip()}")
    return offenders


def test_no_module_reaches_into_a_context_or_an_app() -> None:
    offenders = private_reaches(ROOT)
    assert not offenders, "private names of another module used:\n" + "\n".join(offenders)


def test_the_private_name_check_names_each_offender(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "graphckpt/sync.py": "x = app._loop\n",
            "graphckpt/a.py": "task = ctx._task\nok = ctx.task\nrunner = self.app._runner\n",
            "nodes/n.py": "engine = app._begin(run)\nmine = self._app\n",
        },
    )
    assert private_reaches(tmp_path) == [
        "graphckpt/a.py:1: task = ctx._task",
        "graphckpt/a.py:3: runner = self.app._runner",
        "nodes/n.py:1: engine = app._begin(run)",
    ]
    _write(tmp_path, {"graphckpt/a.py": "ok = ctx.task\n", "nodes/n.py": "mine = self._app\n"})
    assert private_reaches(tmp_path) == []


# -- formatter skips ---------------------------------------------------------------------------------------------------


def formatter_skips(base: Path) -> list[str]:
    """Every line under ``base`` (the package, nodes, tests, benchmarks and examples) holding the skip marker."""
    found: list[str] = []
    for path in _python_files(base, SKIP_ROOTS):
        where = path.relative_to(base).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{where}:{number}"] * line.count(SKIP_MARKER)
    return found


def test_the_formatter_is_skipped_at_most_25_times() -> None:
    found = formatter_skips(ROOT)
    count = len(found)
    assert count <= SKIP_MAX, (
        f"{count} lines skip the formatter (at most {SKIP_MAX}: keep it for tables that read better aligned):\n"
        + "\n".join(found)
    )


def test_the_skip_count_names_each_line(tmp_path: Path) -> None:
    table = f"X = (1,  2){SKIP_MARKER}\n"
    _write(tmp_path, {"graphckpt/a.py": "y = 1\n" + table, "tests/t.py": table * 2, "docs/d.py": table})
    assert formatter_skips(tmp_path) == ["graphckpt/a.py:2", "tests/t.py:1", "tests/t.py:2"]
