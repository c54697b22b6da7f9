"""The import rule: packages in layers, imports only downwards, no circles, deferred imports that say why.

Every import counts, at module level or inside a function, except those under ``if TYPE_CHECKING:``.
A layer may import the layers below it and its own; the order is docs/design.md's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, ...]] = [
    ("app",),
    ("core.server", "core.compare", "core.bench"),  # the front doors' own parts, and the benchmarks
    ("core.engine",),  # the one answer job, the model thread, the job runner
    ("core.chat",),
    ("core.settings", "core.presets"),
    ("core.autotune",),  # measure -> predict -> choose -> keep
    ("core.models", "core.remote"),  # finding, fetching and loading models; a remote engine's client
    ("core.lookahead",),  # the algorithm
    ("core.runtime",),  # one forward pass over a KV cache
    ("core", "core.paths", "core.progress", "core.atomic", "core.aside", "core.suites"),  # small utilities
]
"""Highest first. A module belongs to the longest prefix named (``core`` names the package itself only)."""

ALGORITHM_ONLY = {"core.lookahead": ("core.lookahead", "core.runtime")}
"""Packages that may import nothing of ours but these (they run in a bare interpreter: torch and transformers)."""


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for top in ("app", "core"):
        for path in (root / top).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _type_checking(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(sub) for child in node.body for sub in ast.walk(child))
    return skip


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _type_checking(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            for target in targets:
                resolved = resolve(target)
                if resolved is not None and resolved != name:
                    edges[name].add(resolved)
    return edges


def layer_of(module: str) -> int | None:
    best, rank = "", None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            inside = module == prefix or (prefix != "core" and module.startswith(prefix + "."))
            if inside and len(prefix) > len(best):
                best, rank = prefix, index
    return rank


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def wrong_way(edges: dict[str, set[str]]) -> list[str]:
    """Imports that go up the layers, and imports of an algorithm-only package outside what it may use."""
    found = []
    for module, targets in edges.items():
        for target in targets:
            if layer_of(target) < layer_of(module):  # type: ignore[operator]
                found.append(f"{module} -> {target}")
            for package, allowed in ALGORITHM_ONLY.items():
                inside = module == package or module.startswith(package + ".")
                if inside and not any(target == a or target.startswith(a + ".") for a in allowed):
                    found.append(f"{module} -> {target} ({package} imports only {', '.join(allowed)})")
    return sorted(found)


def undocumented_deferred_imports(known: dict[str, Path]) -> list[str]:
    """Imports inside functions without a comment on the import block (on its lines or the line above)."""
    found = []
    for path in known.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        skip = _type_checking(tree)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = [
                node
                for node in ast.walk(function)
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip
            ]
            blocks: list[list[ast.stmt]] = []
            for node in sorted(body, key=lambda n: n.lineno):
                if blocks and node.lineno <= (blocks[-1][-1].end_lineno or node.lineno) + 2:
                    blocks[-1].append(node)
                else:
                    blocks.append([node])
            for block in blocks:
                first, last = block[0].lineno, block[-1].end_lineno or block[-1].lineno
                span = lines[max(first - 2, 0) : last]
                if not any("#" in line for line in span):
                    found.append(f"{path.relative_to(ROOT)}:{first}")
    return sorted(set(found))


def test_every_module_is_in_a_layer() -> None:
    assert [name for name in modules() if layer_of(name) is None] == []


def test_no_import_circles() -> None:
    assert circles(imports(modules())) == []


def test_imports_go_down_the_layers() -> None:
    assert wrong_way(imports(modules())) == []


def test_deferred_imports_say_why() -> None:
    assert undocumented_deferred_imports(modules()) == []


def test_core_never_imports_qt() -> None:
    edges = imports(modules())
    qt = []
    for name, path in modules().items():
        if name.startswith("core"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [module or ""]
                if any(n.split(".")[0] in ("PySide6", "qasync") for n in names):
                    qt.append(name)
    assert qt == [] and edges


@pytest.mark.parametrize(
    ("module", "target", "text"),
    [
        (
            "core/runtime/step.py",
            "core.lookahead.decoder",
            "from core.lookahead.decoder import Decoding\n",
        ),  # up the layers
        (
            "core/lookahead/pool.py",
            "core.progress",
            "from core.progress import CancelToken\n",
        ),  # outside the algorithm's own
        (
            "core/models/loader.py",
            "core.autotune.prepare",
            "from core.autotune.prepare import AutoTuning\n",
        ),  # up the layers
    ],
)
def test_a_wrong_way_import_is_caught(tmp_path: Path, module: str, target: str, text: str) -> None:
    """The rule on a copy of the tree with one deliberate wrong-way import added."""
    import shutil

    for top in ("app", "core"):  # a copy, not the checkout: the test must not edit the source
        shutil.copytree(ROOT / top, tmp_path / top)
    path = tmp_path / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + text, encoding="utf-8")
    found = wrong_way(imports(modules(tmp_path)))
    assert any(line.startswith(f"{module[:-3].replace('/', '.')} -> {target}") for line in found), found


def test_a_circle_is_caught() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
