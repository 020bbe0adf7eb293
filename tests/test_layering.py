"""The house rules, checked: the core knows no world, nothing imports in a circle, scripts use public names.

Layers: ``scripts/``, ``config/`` → ``worlds/`` → the core (``ddpo_grpo/``, ``reward_models/``). Inside the core:
the trainer side of ``ddpo_grpo`` → ``reward_models`` (only through its package façade) → the foundation modules
``foundation.images``, ``errors``, ``plugins`` (which import nothing of either). The import graph is
read statically from every ``import`` statement, at module level or inside a function (a cycle hidden behind
a function-local import is still a cycle), with importing ``a.b.c`` also counting as importing the packages
``a`` and ``a.b`` (their ``__init__`` runs first).
"""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = ("foundation", "ddpo_grpo", "reward_models")
PACKAGES = (*CORE, "worlds", "config")
#: the library's packages from the bottom up: each may import only those before it (and itself)
LAYERS = ("foundation", "reward_models", "ddpo_grpo", "worlds")
#: modules that moved, kept one release at their old paths (tests/test_moved_modules.py)
OLD_PATHS = (
    "ddpo_grpo.images",
    "ddpo_grpo.errors",
    "ddpo_grpo.plugins",
    "ddpo_grpo.pipelines",
    "ddpo_grpo.consistency",
    "ddpo_grpo.components",
    "ddpo_grpo.logging_utils",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every first-party module ``name``'s file imports, anywhere in it (plus the parent packages)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            targets = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                candidate = ".".join(parts[:i])
                if candidate in known and candidate != name:
                    out.add(candidate)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_core_imports_no_world():
    graph = _graph()
    bad = sorted(
        (m, t)
        for m, targets in graph.items()
        if m.split(".")[0] in CORE
        for t in targets
        if t.split(".")[0] in ("worlds", "config")
    )
    assert not bad, f"core modules import a world or a config: {bad}"


def test_no_import_cycles():
    graph = _graph()
    # parent packages import their children only through explicit imports; an edge child -> parent is
    # implicit (the parent's __init__ runs first) and not a cycle unless the parent imports the child back
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodule
            if node.startswith(nxt + "."):
                continue  # a module "importing" its parent package (implicit)
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_every_core_module_imports_with_the_worlds_unimportable():
    modules = sorted(m for m in _modules() if m.split(".")[0] in CORE)
    code = f"""
import importlib, importlib.abc, sys

class NoWorlds(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "worlds" or name.startswith("worlds.") or name == "config" or name.startswith("config."):
            raise ImportError("the core must not import " + name)

sys.meta_path.insert(0, NoWorlds())
import warnings
warnings.filterwarnings("error", message=".* moved to ", category=DeprecationWarning)  # the library uses new paths
warnings.filterwarnings("error", message=".* was split into ", category=DeprecationWarning)
for name in {modules!r}:
    if name not in {OLD_PATHS!r}:
        importlib.import_module(name)
print("ok", len({modules!r}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO / "tests", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")


def test_scripts_import_public_names_only():
    bad = []
    for path in sorted((REPO / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                bad += [
                    f"{path.name}: from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")
                ]
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                parent = path.read_text(encoding="utf-8")
                if "sys.path.insert" in parent or "sys.path.append" in parent:
                    bad.append(f"{path.name}: edits sys.path")
                    break
    assert not bad, bad


def test_packages_point_down_only():
    """Each package imports only the packages below it (LAYERS); ``config`` sits beside the worlds, above the core."""
    graph = _graph()
    rank = {p: i for i, p in enumerate(LAYERS)}
    rank["config"] = rank["worlds"]
    bad = sorted(
        f"{m} ({m.split('.')[0]}) imports {t} ({t.split('.')[0]})"
        for m, targets in graph.items()
        for t in targets
        if rank[t.split(".")[0]] > rank[m.split(".")[0]]
    )
    assert not bad, "imports that point up: " + "; ".join(bad)


def test_the_core_reaches_rewards_through_their_facade():
    """``ddpo_grpo`` imports ``reward_models`` as ``from reward_models import …`` only, never its internals."""
    graph = _graph()
    bad = [
        f"{m} imports {t}: use the façade, `from reward_models import ...`"
        for m, targets in graph.items()
        if m.split(".")[0] == "ddpo_grpo"
        for t in targets
        if t.startswith("reward_models.")
    ]
    assert not bad, bad


def test_scripts_import_no_world():
    """``scripts/`` reach the worlds only through the plug-in registry (foundation/plugins.py): no ``import worlds…``,
    ``from worlds… import``, or ``import_module("worlds…")`` anywhere in a script, at module level or in a function."""
    bad = []
    for path in sorted((REPO / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module",
                "__import__",
            ):
                names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            bad += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "worlds"]
    assert not bad, "scripts import a world (register a plug-in instead): " + "; ".join(bad)
