"""The house rules, checked: the core knows no world, nothing imports in a circle, scripts use public names.

Layers: ``scripts/``, ``config/`` → ``worlds/`` → the core (``ddpo_grpo/``, ``reward_models/``). Inside the core:
the trainer side of ``ddpo_grpo`` → ``reward_models`` (only through its package façade) → the foundation modules
``ddpo_grpo.images``, ``errors``, ``plugins`` (which import nothing of either). The import graph is
read statically from every ``import`` statement, at module level or inside a function (a cycle hidden behind
a function-local import is still a cycle), with importing ``a.b.c`` also counting as importing the packages
``a`` and ``a.b`` (their ``__init__`` runs first).
"""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = ("ddpo_grpo", "reward_models")
PACKAGES = (*CORE, "worlds", "config")
#: the modules of ddpo_grpo that reward_models may import (they import nothing else of the core)
FOUNDATION = ("ddpo_grpo.images", "ddpo_grpo.errors", "ddpo_grpo.plugins")


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
for name in {modules!r}:
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


def test_core_layers_point_one_way():
    """reward_models imports only the foundation of ddpo_grpo; the foundation imports nothing of the core; the rest of
    ddpo_grpo reaches reward_models through its package façade (``from reward_models import …``) only."""
    graph = _graph()
    bad = []
    for m, targets in graph.items():
        top = m.split(".")[0]
        for t in targets:
            if top == "reward_models" and t.startswith("ddpo_grpo") and t not in (*FOUNDATION, "ddpo_grpo"):
                bad.append(f"{m} imports {t} (reward_models may import only {FOUNDATION})")
            if m in FOUNDATION and t.split(".")[0] in CORE and t != "ddpo_grpo":
                bad.append(f"foundation module {m} imports {t}")
            if top == "ddpo_grpo" and t.startswith("reward_models."):
                bad.append(f"{m} imports {t}: use the façade, `from reward_models import ...`")
    assert not bad, bad
