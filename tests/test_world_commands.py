"""One command module per world: ``python -m worlds.<name> <command>`` lists its commands and parses their flags,
and no other world module has a ``__main__`` block of its own."""

from __future__ import annotations

import importlib
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: world -> the commands its ``python -m worlds.<name>`` offers
COMMANDS = {
    "arithmetic": ("pretrain", "measure", "split"),
    "motion": ("pretrain", "train-evaluator", "measure-evaluator", "judge-agreement", "physics", "table"),
    "shapes": ("pretrain", "split", "calibration", "agreement", "train-detector"),
    "shapes_i2i": ("pretrain", "split", "measure"),
}


@pytest.mark.parametrize("world", sorted(COMMANDS))
def test_help_lists_every_command(world, capsys, monkeypatch):
    """``python -m worlds.<name> --help`` (the package run as ``__main__``) names each command."""
    monkeypatch.setattr(sys, "argv", [f"python -m worlds.{world}", "--help"])
    monkeypatch.delitem(sys.modules, f"worlds.{world}.__main__", raising=False)  # run afresh, as `-m` does
    with pytest.raises(SystemExit) as exc:
        runpy.run_module(f"worlds.{world}", run_name="__main__", alter_sys=False)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^ {4}(\S+)", out.split("positional arguments:")[1], re.M)
    assert tuple(listed) == COMMANDS[world]


@pytest.mark.parametrize("world", sorted(COMMANDS))
def test_each_command_builds_its_flags(world, capsys):
    """``<command> --help`` works for every command (its flags are built without error)."""
    main = importlib.import_module(f"worlds.{world}.__main__").main
    for command in COMMANDS[world]:
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0, command
        assert f"{command} [-h]" in capsys.readouterr().out


def test_shapes_pretrain_flags_follow_arch(capsys):
    """``pretrain --arch sd --help`` lists the SD recipe's fields, the default the SD3 ones."""
    from worlds.shapes.__main__ import main

    for arch, own, other in (("sd", "--unet_channels", "--vae_steps"), ("sd3", "--vae_steps", "--unet_channels")):
        with pytest.raises(SystemExit):
            main(["pretrain", "--arch", arch, "--help"])
        out = capsys.readouterr().out
        assert own in out and other not in out


def test_no_world_module_has_its_own_main():
    """Commands live in each world's ``__main__.py`` only."""
    stray = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "worlds").rglob("*.py"))
        if p.name != "__main__.py" and re.search(r"^if __name__ == .__main__.:", p.read_text(encoding="utf-8"), re.M)
    ]
    assert stray == []


def test_an_unknown_command_is_refused(capsys):
    from worlds.motion.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "worlds").rglob("*.md"))]


def test_docs_name_world_commands_that_exist():
    """Every ``python -m worlds…`` in the docs and the worlds' code is ``python -m worlds.<name> [<command>]``
    (docs/migration.md keeps the old forms on purpose)."""
    pattern = re.compile(r"python -m (worlds(?:\.\w+)+)(?: ([a-z][\w-]*))?")
    bad = []
    for path in [*_docs(), *sorted((REPO / "worlds").rglob("*.py"))]:
        if path.name == "migration.md":
            continue
        for module, command in pattern.findall(path.read_text(encoding="utf-8")):
            world = module.removeprefix("worlds.")
            if world not in COMMANDS or (command and command not in COMMANDS[world]):
                bad.append(f"{path.relative_to(REPO)}: python -m {module} {command}")
    assert bad == []


def test_world_readmes_name_files_that_exist():
    """A ``file.py`` or ``dir/file.py`` a world's README names exists (in the world or from the repository root)."""
    missing = []
    for readme in sorted((REPO / "worlds").glob("*/README.md")):
        for name in set(re.findall(r"`([\w/]+\.py)`", readme.read_text(encoding="utf-8"))):
            if not (readme.parent / name).is_file() and not (REPO / name).is_file():
                missing.append(f"{readme.relative_to(REPO)}: {name}")
    assert missing == []
