"""The import graph of src/jobring: no circles, and arrows only down the layers of
docs/design/architecture.md.

Every import counts: module level, inside functions, and under ``TYPE_CHECKING``; a late
import does not hide a circle. Importing ``a.b.c`` also runs the ``__init__`` of ``a.b``
(when the importer is not inside ``a.b`` already), so that is an edge too."""

from __future__ import annotations

import ast
import builtins
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

# Layer -> module prefixes (the longest matching prefix decides). See architecture.md.
LAYERS: dict[str, tuple[str, ...]] = {
    "errors": ("jobring.errors",),
    "core": ("jobring.core",),
    "protocol": ("jobring.protocol",),
    "foundation": ("jobring.version", "jobring.configbase", "jobring.logsetup", "jobring.listen",
                   "jobring.http1", "jobring.background"),
    "executor": ("jobring.executor",),
    "client": ("jobring.client",),
    "admin.store": ("jobring.admin.store",),
    "admin.dispatch": ("jobring.admin.dispatch",),
    # The loop and the trigger call into each other's folders and use the monitors' tick, so they
    # share the services layer; tests/admin/scheduler/test_loop_imports.py keeps the loop's parts pure.
    "admin.services": ("jobring.admin.services", "jobring.admin.monitors", "jobring.admin.alarms",
                       "jobring.admin.security", "jobring.admin.distributed", "jobring.admin.loop",
                       "jobring.admin.trigger"),
    "admin.api": ("jobring.admin.api", "jobring.admin.console"),
    "admin.root": ("jobring.admin", "jobring.admin.runtime"),
    "cli": ("jobring.cli", "jobring.demo"),
    "package": ("jobring",),
}
_BASE = {"errors", "core", "protocol", "foundation"}
# Layer -> the other layers it may import (its own is always allowed).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "core": {"errors"},
    "protocol": {"errors", "core"},
    "foundation": {"errors"},
    "executor": _BASE,
    "client": _BASE,
    "admin.store": _BASE,
    "admin.dispatch": _BASE | {"admin.store"},
    "admin.services": _BASE | {"admin.store", "admin.dispatch"},
    "admin.api": _BASE | {"admin.store", "admin.dispatch", "admin.services"},
    "admin.root": _BASE | {"admin.store", "admin.dispatch", "admin.services", "admin.api"},
    "cli": set(LAYERS) - {"cli", "package"},
    "package": {"errors", "executor"},
}
# What a plain `pip install jobring` runs: these layers and every module they load import only
# the standard library and the distributions of [project].dependencies.
EXECUTOR_INSTALL = {"executor", "client", "package", "protocol", "foundation"}
# Looked for when present (inside try/except ImportError), never required.
OPTIONAL_ACCELERATORS = {"uvloop"}
# The AMQP client of broker executors (`pip install 'jobring[amqp]'`), imported inside
# try/except ImportError by jobring.executor.broker: a push or pull executor does without it.
OPTIONAL_EXTRAS = {"aio_pika"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((SRC / "jobring").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@cache
def _typing_only(path: Path) -> frozenset[int]:
    """Lines of the imports under ``if TYPE_CHECKING:`` (never run)."""
    lines: set[int] = set()
    for node in ast.walk(_tree(path)):
        test = node.test if isinstance(node, ast.If) else None
        if test is not None and getattr(test, "id", getattr(test, "attr", "")) == "TYPE_CHECKING":
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt)
                      if isinstance(n, ast.Import | ast.ImportFrom)}
    return frozenset(lines)


def _imported(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """(imported name, line) of every import in the file, relative ones made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, node.lineno
            yield from ((f"{base}.{alias.name}", node.lineno) for alias in node.names)


@cache
def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported jobring module: first line}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        own_packages = {module.rsplit(".", k)[0] for k in range(module.count(".") + 1)}
        edges: dict[str, int] = {}
        for name, line in _imported(path, module):
            if name.split(".")[0] != "jobring" or (target := _resolve(name, modules)) is None:
                continue
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                step = ".".join(parts[:k])
                if step in modules and step not in own_packages:
                    edges.setdefault(step, line)
        edges.pop(module, None)
        graph[module] = edges
    return graph


def _third_party() -> dict[str, set[tuple[str, int]]]:
    """module -> {(top-level third-party name, line)} of the imports that run."""
    found: dict[str, set[tuple[str, int]]] = {}
    for module, path in _modules().items():
        names = {(name.split(".")[0], line) for name, line in _imported(path, module)
                 if name and line not in _typing_only(path)}
        found[module] = {(top, line) for top, line in names
                         if top not in sys.stdlib_module_names and top not in ("jobring", "__future__")}
    return found


def layer_of(module: str) -> str:
    best = ("", "")
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best[1]):
                best = (layer, prefix)
    assert best[0], f"{module} is in no layer of tests/test_architecture.py (add it)"
    return best[0]


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_has_no_circle() -> None:
    graph = _graph()
    circles = [
        "\n".join(f"  {a} -> {b} (line {graph[a][b]})" for a in c for b in graph[a] if b in c)
        for c in _cycles(graph)
    ]
    assert not circles, "import circles:\n" + "\n\n".join(circles)


def test_the_checker_finds_a_circle_and_a_late_one() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_every_import_runs_down_the_layers() -> None:
    wrong = [
        f"{module} ({layer_of(module)}) -> {target} ({layer_of(target)}), line {line}"
        for module, edges in _graph().items()
        for target, line in edges.items()
        if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)]
    ]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _base_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = set()
    for requirement in project["dependencies"]:
        name = requirement.split(";")[0].split("[")[0]
        for sep in "<>=!~ ":
            name = name.split(sep)[0]
        names.add(name.strip().lower().replace("_", "-"))
    return names


def _loaded_with(roots: set[str]) -> set[str]:
    """The modules that importing ``roots`` can load (imports under TYPE_CHECKING left out)."""
    modules = _modules()
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        typing_only = _typing_only(modules[module])
        todo += [t for t, line in _graph()[module].items() if line not in typing_only]
    return seen


def test_the_executor_install_imports_only_its_own_dependencies() -> None:
    base = _base_distributions()
    dists = packages_distributions()

    def allowed(top: str) -> bool:
        owners = {d.lower().replace("_", "-") for d in dists.get(top, [top])}
        return top in OPTIONAL_ACCELERATORS or top in OPTIONAL_EXTRAS or bool(owners & base)

    roots = {m for m in _modules() if layer_of(m) in EXECUTOR_INSTALL}
    loaded = _loaded_with(roots)
    assert "jobring.executor.executor" in loaded and "jobring.client" in loaded
    wrong = [
        f"{module}: {top} (line {line})"
        for module, names in _third_party().items()
        if module in loaded
        for top, line in sorted(names)
        if not allowed(top)
    ]
    assert not wrong, "imports outside `pip install jobring`'s dependencies:\n" + "\n".join(wrong)


def test_core_needs_no_third_party_library_but_its_calendar_parsers() -> None:
    wrong = [f"{module}: {top} (line {line})"
             for module, names in _third_party().items() if layer_of(module) == "core"
             for top, line in sorted(names) if top not in ("icalendar", "dateutil")]
    assert not wrong


_BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, Exception)}


def test_every_exception_of_jobring_derives_from_jobring_error() -> None:
    # A class that derives from a built-in exception names JobringError among its bases too
    # (the others derive from one that does).
    wrong = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & _BUILTIN_ERRORS and "JobringError" not in bases and module != "jobring.errors":
                    wrong.append(f"{module}.{node.name}")
    assert not wrong, "exceptions outside the jobring.errors root: " + ", ".join(wrong)
