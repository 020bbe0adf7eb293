"""The checkout's entry points (``pyproject.toml``), seen by ``importlib.metadata`` without reinstalling.

Plug-ins are found through the installed distribution's metadata (``foundation/plugins.py``), which ``pip install
-e .`` wrote from the pyproject.toml of its day: an entry point added since is invisible until the next install.
:func:`checkout_entry_points` (a module fixture) closes that gap for the tests of code that looks plug-ins up: when
the installed metadata lacks an entry point the checkout declares, it writes a ``ddpo_grpo`` dist-info holding the
checkout's entry points (and the installed version) into a temporary directory and puts it first on ``sys.path``
for the module — distributions are deduplicated by name, the first on the path wins — so the lookup under test is
the real one. With up-to-date metadata it changes nothing. :func:`dist_info` writes any package's metadata, to test
what a user's package declares.
"""

from __future__ import annotations

import importlib
import re
import sys
from contextlib import contextmanager
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DIST = "ddpo_grpo"


def declared() -> dict[str, dict[str, str]]:
    """``{group: {name: "module:attr"}}`` of this checkout's pyproject.toml: its ``[project.entry-points."<group>"]``
    tables of ``name = "module:attr"`` lines (read by hand: ``tomllib`` is Python 3.11+, the project supports 3.10)."""
    groups, group = {}, None
    for line in (REPO / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        header = re.fullmatch(r'\[project\.entry-points\."([^"]+)"\]', line)
        if header or line.startswith("["):
            group = header.group(1) if header else None
            if group:
                groups[group] = {}
        elif group and line:
            name, value = re.fullmatch(r'([\w.-]+)\s*=\s*"([^"]+)"', line).groups()
            groups[group][name] = value
    return groups


def stale() -> list[str]:
    """The declared entry points (``group:name``) the installed metadata does not hold as declared."""
    out = []
    for group, names in declared().items():
        installed = {ep.name: ep.value for ep in entry_points(group=group)}
        out += [f"{group}:{n}" for n, value in names.items() if installed.get(n) != value]
    return out


def dist_info(root: Path, name: str, groups: dict[str, dict[str, str]], dist_version: str = "0") -> Path:
    """Write ``<root>/<name>-<version>.dist-info`` (METADATA and entry_points.txt of ``groups``); return ``root``."""
    info = root / f"{name}-{dist_version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {dist_version}\n", encoding="utf-8")
    text = "".join(f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in eps.items()) + "\n" for g, eps in groups.items())
    (info / "entry_points.txt").write_text(text, encoding="utf-8")
    return root


@contextmanager
def first_on_path(root: Path):
    """``root`` first on ``sys.path`` (its distributions shadow installed ones of the same name) for the block."""
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        importlib.invalidate_caches()


@pytest.fixture(scope="module")
def checkout_entry_points(tmp_path_factory):
    """The checkout's entry points visible to importlib.metadata for the module (see the module docstring)."""
    if not stale():
        yield None
        return
    root = dist_info(tmp_path_factory.mktemp("checkout_metadata"), DIST, declared(), version(DIST))
    with first_on_path(root):
        assert not stale(), stale()
        yield root
