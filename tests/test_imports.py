"""The project's imports, read from the source (ast): every part imports only downward.

- no circle among the project's modules (``apps``, ``selfplay_web``, ``trainer``), counting the
  imports inside functions too (a function-level import hides a circle, it does not remove it);
- no circle among the apps (``apps.runs`` -> ``apps.evals`` -> ``apps.runs`` is one, even when
  no single module closes it);
- no module imports another module's private name (``from apps.runs.jobs import _corpus_tools``)
  or a private module (``apps.x._helpers``);
- ``trainer/`` imports neither Django nor the web side.

Migrations are left out: Django loads them by name, and they import what they need by design.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("apps", "selfplay_web", "trainer")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))
            if "migrations" not in p.parts}


class Import:
    """One imported name: the module it resolves to and the name itself."""

    def __init__(self, source: str, target: str, name: str | None, line: int):
        self.source, self.target, self.name, self.line = source, target, name, line

    def __repr__(self):
        return f"{self.source}:{self.line} -> {self.target}" + (f".{self.name}" if self.name else "")


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """Every import in the file (module level and inside functions) that names a project module,
    resolved to the deepest project module it names (``from apps.runs import hooks`` -> apps.runs.hooks)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [(f"{base}.{a.name}", None) if f"{base}.{a.name}" in known else (base, a.name)
                     for a in node.names]
        else:
            continue
        for target, name in names:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                out.append(Import(module, target, name, node.lineno))
    return out


def all_imports(root: Path = ROOT) -> list[Import]:
    known = project_modules(root)
    return [imp for module, path in known.items() for imp in imports_of(module, path, known)]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def unit(module: str) -> str:
    """The part a module belongs to for the app-level rule: ``apps.<app>``; ``selfplay_web`` and
    ``trainer`` modules stand alone (the platform's settings sit below the apps, its URL table above)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "apps" else module


def module_graph(imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        edges[imp.source].add(imp.target)
    return edges


def app_graph(imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        if unit(imp.source) != unit(imp.target):
            edges[unit(imp.source)].add(unit(imp.target))
    return edges


def private_imports(imports: list[Import]) -> list[Import]:
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    return [imp for imp in imports
            if private(imp.name or "") or any(private(part) for part in imp.target.split("."))]


IMPORTS = all_imports()


def test_the_reader_sees_the_imports_it_must_judge():
    """The rules below mean something only if the reader finds the imports, including the ones
    inside functions and the relative ones."""
    seen = {(imp.source, imp.target) for imp in IMPORTS}
    assert ("apps.runs.consumers", "apps.runs.models") in seen  # module level
    assert ("apps.runs.apps", "apps.jobs.reaper") in seen  # inside ready()
    assert len(IMPORTS) > 300


def test_no_circle_among_the_project_modules():
    found = circles(module_graph(IMPORTS))
    assert not found, "import circles (break each with a hook, a lower module or a registry): " + "; ".join(
        " <-> ".join(part) for part in found)


def test_no_circle_among_the_apps():
    graph = app_graph(IMPORTS)
    found = circles(graph)
    detail = [imp for imp in IMPORTS if any(unit(imp.source) in part and unit(imp.target) in part
                                            and unit(imp.source) != unit(imp.target) for part in found)]
    assert not found, f"apps importing each other: {found}; the imports: {detail}"


def test_no_module_imports_another_modules_private_names():
    found = private_imports(IMPORTS)
    assert not found, f"private names imported from another module (make them public or move them): {found}"


def test_the_trainer_imports_neither_django_nor_the_web_side():
    found = []
    for path in sorted((ROOT / "trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in ("django", "rest_framework", "channels", "apps", "selfplay_web")]
    assert not found, found


@pytest.mark.parametrize("source, rule", [
    ({"apps/a/__init__.py": "", "apps/a/x.py": "def f():\n    from apps.a.y import g\n",
      "apps/a/y.py": "from apps.a import x\n"}, "circle"),
    ({"apps/a/__init__.py": "", "apps/a/x.py": "from apps.b.y import g\n",
      "apps/b/__init__.py": "", "apps/b/y.py": "g = 1\n", "apps/b/z.py": "def f():\n    from apps.a import x\n"},
     "app circle"),
    ({"apps/a/__init__.py": "", "apps/a/x.py": "from .y import _helper\n", "apps/a/y.py": "_helper = 1\n"},
     "private"),
])
def test_each_rule_fails_on_a_tree_that_breaks_it(tmp_path, source, rule):
    """The rules catch what they are for: a circle through a function-level import, two apps that
    import each other through different modules, a private name through a relative import."""
    for name, text in source.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for pkg in ("selfplay_web", "trainer"):
        (tmp_path / pkg).mkdir(exist_ok=True)
    imports = all_imports(tmp_path)
    found = {"circle": circles(module_graph(imports)), "app circle": circles(app_graph(imports)),
             "private": private_imports(imports)}
    assert found[rule], f"the {rule} rule missed {source}"

