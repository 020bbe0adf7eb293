"""The run directory ``<logdir>/<run_name>/``: which one a run writes to, and what an earlier attempt left there.

* A fresh run gets ``<logdir>/<run_name>`` (``run_name`` "" = a timestamp, the same on every process).
* ``resume_from`` a checkpoint continues in that checkpoint's run directory (or in ``<logdir>/<run_name>`` when a
  run_name is given).
* An attempt that stopped before its first checkpoint (killed, crashed, or a bad reward found at epoch 0) saved
  nothing to resume; its directory holds only ``metrics.jsonl``, ``report/`` or ``samples/``. Both ways back work:
  ``resume_from=<that directory>`` and a new run with the same ``run_name`` start it again from epoch 0 in the same
  directory. The earlier attempt's files are kept, moved to ``previous/<n>/`` (the only record of what that
  attempt did, e.g. why it failed), so that the new run's metrics and report are its own.
* A directory holding a complete checkpoint or ``final/`` is a run's result: a new run of that name is refused
  (``config_checks.check_inputs``: continue it with resume_from, or choose another run_name).
* Hidden ``.tmp-*`` / ``.old-*`` entries are what a run killed while writing a checkpoint or ``final/`` left:
  removed (an ``.old-*`` whose replacement is missing is put back instead), each with a line.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ddpo_grpo import distributed
from ddpo_grpo.checkpoint import CHECKPOINTS_DIRNAME, find_checkpoint, leftovers, list_checkpoints

#: what an attempt writes before its first checkpoint (moved to previous/<n>/ when the run starts again)
ATTEMPT_FILES = ("metrics.jsonl", "metrics.superseded.jsonl", "report", "samples", "wandb", "tensorboard")
PREVIOUS = "previous"


def holds_result(run: Path) -> bool:
    """True when ``run`` holds a complete checkpoint or a final/ (something a new run must not overwrite)."""
    return bool(list_checkpoints(run)) or (run / "final").is_dir()


def is_unsaved_attempt(run: Path) -> bool:
    """True when ``run`` is a run directory that saved nothing: attempt files, no checkpoint, no final/."""
    return run.is_dir() and not holds_result(run) and any((run / name).exists() for name in ATTEMPT_FILES)


def prepare_run_dir(config, acc, log=print) -> Path:
    """The run directory (module docstring), created by the main process with the earlier attempt's files
    moved aside and killed writes cleaned; the same path on every process."""
    run = _choose(config, acc)
    if acc.is_main_process:
        run.mkdir(parents=True, exist_ok=True)
        restart = is_unsaved_attempt(run)
        if restart:
            kept = archive_attempt(run)
            log(
                f"{run}: an earlier attempt of this run stopped before its first checkpoint; starting again from "
                f"epoch 0 here (its files are kept in {kept})"
            )
        for path in leftovers(run):
            log(clean_leftover(path))
    acc.wait_for_everyone()
    return run


def starts_again(config) -> bool:
    """True when ``resume_from`` names a run directory that saved nothing: the run starts again from epoch 0."""
    return bool(config.resume_from) and is_unsaved_attempt(Path(config.resume_from).expanduser())


def _choose(config, acc) -> Path:
    if config.run_name:
        return Path(config.logdir) / config.run_name
    if config.resume_from:
        path = Path(config.resume_from).expanduser()
        if is_unsaved_attempt(path):
            return path
        return find_checkpoint(path).parent.parent  # <run>/checkpoints/epoch_X -> <run>
    return Path(config.logdir) / distributed.broadcast(acc, time.strftime("%Y.%m.%d_%H.%M.%S"))


def archive_attempt(run: Path) -> Path:
    """Move the attempt files of ``run`` to ``run/previous/<n>/`` (n = 1, 2, …); return that directory."""
    n = 1
    while (run / PREVIOUS / str(n)).exists():
        n += 1
    dest = run / PREVIOUS / str(n)
    dest.mkdir(parents=True)
    for name in ATTEMPT_FILES:
        if (run / name).exists():
            os.replace(run / name, dest / name)
    return dest


def clean_leftover(path: Path) -> str:
    """Remove a ``.tmp-*`` / ``.old-*`` entry of a killed write (or restore an ``.old-*`` whose target is gone)."""
    name = path.name.split("-", 1)[1].rsplit("-", 1)[0] if "-" in path.name else path.name
    target = path.parent / name
    complete = (path / "state.json").is_file() or (path / "ddpo_grpo_final.json").is_file()
    if path.name.startswith(".old-") and not target.exists() and complete:
        os.replace(path, target)
        return f"restored {target} from {path.name} (a run was killed while replacing it)"
    shutil.rmtree(path, ignore_errors=True)
    where = "checkpoint" if path.parent.name == CHECKPOINTS_DIRNAME else "final/"
    return f"removed {path} (an incomplete {where} write of a killed run)"


def stopped_note(run: Path) -> str:
    """Where a run that stopped itself left its state (appended to the reason it stopped)."""
    found = list_checkpoints(run)
    if found:
        state = f"its last checkpoint is {found[-1]}: continue with --config.resume_from={run} once the cause is fixed"
    else:
        state = "it saved no checkpoint: start it again (the same run_name works) once the cause is fixed"
    return f"The run in {run} ended without final/; {state}"
