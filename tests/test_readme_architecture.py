"""The README's architecture table names every module and package of the library (foundation, core, rewards), so a
newcomer's map is the whole house; the modules kept only as old import paths are left out."""

import re

from tests.conftest import REPO
from tests.test_layering import OLD_PATHS


def _named_in_architecture() -> set[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Architecture") : text.index("## Configs")]
    return {part for quoted in re.findall(r"`([^`]+)`", section) for part in re.split(r"[ ,]+", quoted) if part}


def test_every_library_module_is_in_the_architecture_table():
    named = _named_in_architecture()
    old = {name.replace(".", "/") + ".py" for name in OLD_PATHS} | {"ddpo_grpo/sde.py"}  # sde: the kernels' alias
    missing = []
    for package in ("foundation", "ddpo_grpo", "reward_models"):
        for path in sorted((REPO / package).iterdir()):
            is_package = path.is_dir() and (path / "__init__.py").exists()
            if path.name == "__init__.py" or not (is_package or path.suffix == ".py"):
                continue
            short = path.name + ("/" if is_package else "")
            full = f"{package}/{short}"
            if full not in old and not {short, full, short.rstrip("/"), full.rstrip("/")} & named:
                missing.append(full)
    assert not missing, f"README's architecture table does not name: {missing}"
