"""The run's report files are written through one helper (foundation.atomic_io): a write that fails half-way leaves
the previous file as it was and no temporary file beside it. Directory moves (a checkpoint or ``final/`` renamed
into place, ddpo_grpo/checkpoint/files.py; a killed attempt's files archived, ddpo_grpo/run_dir.py) are another
operation and keep their own renames."""

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import REPO

#: the only core modules that may rename: whole directories moved into place, or a killed attempt's files moved aside
DIRECTORY_MOVES = {"ddpo_grpo/checkpoint/files.py", "ddpo_grpo/run_dir.py", "foundation/atomic_io.py"}


def test_no_hand_rolled_replace_in_the_core():
    found = sorted(
        str(p.relative_to(REPO))
        for package in ("foundation", "ddpo_grpo", "reward_models")
        for p in (REPO / package).rglob("*.py")
        if re.search(r"\bos\.(replace|rename)\(|\.rename\(", p.read_text(encoding="utf-8"))
    )
    assert set(found) <= DIRECTORY_MOVES, (
        f"write files with foundation.atomic_io instead: {set(found) - DIRECTORY_MOVES}"
    )


def _entries(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()} if directory.is_dir() else {}


def _images(n=2):
    return torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def _report_before(run: Path):
    from ddpo_grpo.report import RunReport

    report = RunReport(run, [{"prompt": "a"}, {"prompt": "b"}], preview=lambda samples: samples)
    report.before(lambda rows: ({}, _images(), [r["prompt"] for r in rows]), {"eval/score": 0.5})


def _grid(run: Path):
    from ddpo_grpo.figures import captioned_grid

    captioned_grid([_images(), _images()], ["before", "after"], ["a", "b"], run / "report" / "before_after.png")


def _probe(run: Path):
    from ddpo_grpo.probe import PairedProbe

    probe = PairedProbe.__new__(PairedProbe)  # its prompts and seeds are not needed to keep the rewards
    probe.path = run / "report" / "probe_before.json"
    probe.record_before(np.array([0.25, float("nan")]))


def _heldout(run: Path):
    from ddpo_grpo.heldout import HeldOut
    from tests.test_heldout import _blueness, _config, _redness, _sampler

    HeldOut(_config(run.parent / "config"), {"blue": _blueness}, _redness, ["red"], run)(_sampler(0.0))


@pytest.mark.parametrize("write", [_report_before, _grid, _probe, _heldout], ids=lambda f: f.__name__.strip("_"))
def test_a_failed_write_keeps_the_previous_files_and_leaves_no_temporary(write, tmp_path, monkeypatch):
    run = tmp_path / "run"
    write(run)  # a first, complete write
    previous = _entries(run / "report")
    assert previous and not any(name.startswith(".") for name in previous)
    if write is _heldout:  # it writes the untrained model's values once: start from no file
        (run / "report" / "eval_before.json").unlink()
        previous = _entries(run / "report")

    def fail(src, dst, *args, **kwargs):
        raise OSError(f"no space left on device (moving {Path(src).name})")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="no space left"):
        write(run)
    assert _entries(run / "report") == previous


def test_a_replaced_file_has_the_mode_open_would_give(tmp_path):
    """Not mkstemp's private 0600: a new file 0666 less the umask, a replaced one keeps its mode."""
    import os

    from foundation.atomic_io import atomic_write

    mask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.txt", b"a")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
        (tmp_path / "new.txt").chmod(0o640)
        atomic_write(tmp_path / "new.txt", b"b")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(mask)
