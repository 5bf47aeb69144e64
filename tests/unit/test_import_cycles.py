"""No import circle among graystack's own modules: a circle works or breaks by import order (the
spec's validator once had to import the prometheus provider inside a function to dodge one)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "graystack", "inference", "probes", "loadtests")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The project modules `module` imports anywhere in its body (functions included), each with the
    packages Python runs on the way to it, except those `module` is itself inside."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from package import module`
    found = set()
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in known and not (module == prefix or module.startswith(prefix + ".")):
                found.add(prefix)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # module -> "open" (on the current path) or "done"
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {
        module: imported(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py", known)
        for module, path in modules.items()
    }


def test_the_graph_sees_imports_at_module_top_and_inside_functions():
    graph = import_graph()
    assert "gateway.metrics.queries" in graph["gateway.rollout.strategy_spec"]
    assert graph["gateway.metrics.prometheus"] >= {"gateway.metrics.queries", "gateway.metrics.observations"}
    tree = ast.parse("def f():\n    from gateway.rollout import spec\n")
    assert imported(tree, "gateway.metrics.x", False, set(graph)) == {
        "gateway.rollout",
        "gateway.rollout.spec",
    }


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_graystacks_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)
