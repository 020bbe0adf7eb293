"""The worlds' split files through one helper (ddpo_grpo/split_files.py): written atomically, read back alike."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from ddpo_grpo.split_files import read_rows, write_rows

#: world grammar module -> the names of the files its write_split writes
WORLDS = {
    "worlds.shapes.grammar": ("shapes_train.jsonl", "shapes_test.jsonl"),
    "worlds.motion.grammar": ("motion_train.jsonl", "motion_test.jsonl"),
    "worlds.arithmetic.problems": ("arithmetic_train.jsonl", "arithmetic_test.jsonl"),
    "worlds.shapes_i2i.data": ("restore_train.jsonl", "restore_test.jsonl", "edit_train.jsonl", "edit_test.jsonl"),
}


def test_rows_round_trip_and_a_missing_file_names_its_command(tmp_path):
    rows = [{"prompt": "a red circle", "task": "single_object"}, {"prompt": "b", "n": [1, 2]}]
    path = write_rows(tmp_path / "sub" / "x.jsonl", rows)
    assert path.read_text(encoding="utf-8") == "".join(json.dumps(r) + "\n" for r in rows)
    assert read_rows(path) == rows
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    with pytest.raises(FileNotFoundError, match="missing; regenerate it with `make it`"):
        read_rows(tmp_path / "none.jsonl", "`make it`")


def _make(monkeypatch, mod, rows):
    """Make the world's split ``rows`` (through its ``Splits`` where it declares one)."""
    if hasattr(mod, "SPLIT_FILES"):
        monkeypatch.setattr(mod, "write_split", dataclasses.replace(mod.SPLIT_FILES, make=lambda seed=0: rows).write)
    else:
        monkeypatch.setattr(mod, "make_split", lambda seed=0: rows)


@pytest.mark.parametrize("module", sorted(WORLDS))
def test_a_failed_rewrite_leaves_the_previous_split(module, tmp_path, monkeypatch):
    """A split that fails half-way (an unserialisable row) leaves every file as it was: no half-written split."""
    mod = importlib.import_module(module)
    small = {"train": [{"prompt": "a"}, {"prompt": "b"}], "test": [{"prompt": "c"}]}
    if module == "worlds.shapes_i2i.data":
        small = {"restore": dict(small), "edit": dict(small)}
    _make(monkeypatch, mod, small)
    mod.write_split(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in WORLDS[module]}
    bad = {"train": [{"prompt": "a"}, {"prompt": object()}], "test": [{"prompt": object()}]}
    if module == "worlds.shapes_i2i.data":
        bad = {"restore": dict(bad), "edit": dict(bad)}
    _make(monkeypatch, mod, bad)
    with pytest.raises(TypeError):
        mod.write_split(tmp_path)
    assert {name: (tmp_path / name).read_bytes() for name in WORLDS[module]} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(WORLDS[module])  # no temporary files left
