"""The recipe files' shared helpers live in one module named for them (config/recipes.py), the process count has one
reader (``ddpo_grpo.distributed.world_size``), and no helper is written twice among the recipe files."""

import ast
from pathlib import Path

import pytest

from ddpo_grpo import distributed

CONFIG = Path(__file__).resolve().parents[1] / "config"
#: recipe files a recipe file may import from: the base, the shared helpers, the tiny variant
HELPER_MODULES = {"config.base", "config.recipes", "config.tiny"}
#: recipe files that reuse another file's named recipes or world-specific block, by design
REUSED = {"config.quickstart": {"config.shapes"}, "config.edit": {"config.restore"}}


@pytest.mark.parametrize("raw", ["0", "-2", "eight", "1.5"])
def test_world_size_refuses_a_bad_process_count(raw, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", raw)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        distributed.world_size()


def test_world_size_reads_the_launch(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert distributed.world_size() == 8


def _config_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("config."):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("config."))
    return names


def test_recipe_files_take_their_helpers_from_config_recipes():
    bad = {}
    for path in sorted(CONFIG.glob("*.py")):
        module = f"config.{path.stem}"
        if path.stem == "sd3":  # it re-exports the old helper names one release (docs/migration.md)
            continue
        other = _config_imports(path) - HELPER_MODULES - REUSED.get(module, set())
        if other:
            bad[module] = sorted(other)
    assert not bad, f"recipe files importing helpers from other recipe files (use config/recipes.py): {bad}"


def _bodies(path: Path):
    """(file:function, the function's body without its docstring, as an AST dump) of every function with 3+ statements."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]
            if len(body) >= 3:
                yield f"{path.name}:{node.name}", "\n".join(ast.dump(stmt) for stmt in body)


def test_no_helper_written_twice_among_the_recipe_files():
    seen, twice = {}, []
    for path in sorted(CONFIG.glob("*.py")):
        for name, body in _bodies(path):
            if body in seen:
                twice.append((seen[body], name))
            seen.setdefault(body, name)
    assert not twice, f"the same function body twice (merge it into config/recipes.py): {twice}"
