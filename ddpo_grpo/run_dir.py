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
* ``config.json`` (the resolved config, every field) and ``command.txt`` (the command line of each start, one line
  each) are written at the top of the directory when the run starts: what the run is, without opening a checkpoint;
  ``resume_from=<run dir>`` alone reads the config back (:func:`saved_config`).
* Hidden ``.tmp-*`` / ``.old-*`` entries are what a run killed while writing a checkpoint or ``final/`` left:
  removed (an ``.old-*`` whose replacement is missing is put back instead), each with a line.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from ddpo_grpo import distributed
from ddpo_grpo.checkpoint import CHECKPOINTS_DIRNAME, find_checkpoint, leftovers, list_checkpoints

#: what an attempt writes before its first checkpoint (moved to previous/<n>/ when the run starts again)
ATTEMPT_FILES = ("metrics.jsonl", "metrics.superseded.jsonl", "report", "samples", "wandb", "tensorboard")
PREVIOUS = "previous"
CONFIG_FILE = "config.json"
COMMAND_FILE = "command.txt"
#: the command that started this process (scripts/train.py sets it; else sys.argv): command.txt's line
launch_command: list[str] | None = None


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
        describe(run, config)
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


def config_text(config) -> str:
    """The resolved config as config.json holds it (and ``scripts/train.py --print_config`` prints it)."""
    return json.dumps(json.loads(config.to_json()), indent=2, sort_keys=True) + "\n"


def describe(run: Path, config) -> None:
    """Write ``config.json`` (the resolved config) and add this start's command line to ``command.txt``, atomically."""
    from foundation.atomic_io import atomic_write_text

    atomic_write_text(run / CONFIG_FILE, config_text(config))
    command = launch_command if launch_command is not None else ["python", *sys.argv]
    before = (run / COMMAND_FILE).read_text(encoding="utf-8") if (run / COMMAND_FILE).is_file() else ""
    atomic_write_text(run / COMMAND_FILE, before + shlex.join(command) + "\n")


def saved_config(path: Path) -> tuple[dict, Path] | None:
    """The config a run saved, and the file it came from, for ``path`` (a run directory or one of its checkpoints):
    ``<run>/config.json``, else (runs older than config.json) the newest checkpoint's ``state.json`` "config";
    None when neither exists."""
    from ddpo_grpo.checkpoint import STATE_FILE

    path = Path(path).expanduser()
    runs = [path, path.parent.parent] if path.parent.name == CHECKPOINTS_DIRNAME else [path]
    for run in runs:
        if (run / CONFIG_FILE).is_file():
            return json.loads((run / CONFIG_FILE).read_text(encoding="utf-8")), run / CONFIG_FILE
    found = [path] if (path / STATE_FILE).is_file() else list_checkpoints(path)
    if found:
        state = json.loads((found[-1] / STATE_FILE).read_text(encoding="utf-8"))
        if isinstance(state.get("config"), dict):
            return state["config"], found[-1] / STATE_FILE
    return None


def upgrade_saved(saved: dict, defaults: dict, source, out=None) -> dict:
    """``saved`` (a saved config, plain dicts) brought up to this version's fields, ``defaults`` (the base config):
    every field it lacks (added since) takes its default, every field ``defaults`` lacks (removed since) is dropped,
    each kind printed in one line naming the fields. A deprecated field (config_checks.DEPRECATED) is still a field
    of this version: it is kept, and the run names it and its replacement at start-up as any config's. Sections are
    the top-level dicts; a section's fields are taken whole (a dict-valued field, e.g. reward.fns, is one value)."""
    import sys

    upgraded, filled, dropped = {}, [], []
    for key, default in defaults.items():
        if key not in saved:
            upgraded[key] = default
            filled.append(key)
        elif isinstance(default, dict) and isinstance(saved[key], dict):
            upgraded[key] = {f: saved[key].get(f, value) for f, value in default.items()}
            filled += [f"{key}.{f}" for f in default if f not in saved[key]]
            dropped += [f"{key}.{f}" for f in saved[key] if f not in default]
        else:
            upgraded[key] = saved[key]
    dropped += [k for k in saved if k not in defaults]
    for names, what in (
        (filled, "fields added since this run was saved take their defaults"),
        (dropped, "saved fields this version no longer has, ignored"),
    ):
        if names:
            print(f"{what} ({source}): {', '.join(names)}", file=out or sys.stdout, flush=True)
    return upgraded
