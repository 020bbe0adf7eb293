"""Command-line helpers shared by the scripts: argument errors that name the flag, and loading
what ``--model`` and ``--prompts`` point at (a pipeline directory, a hub id or a run's output; a built-in
prompt set or a prompt file)."""

from __future__ import annotations

import os
from pathlib import Path

from foundation.errors import UserError


class UsageError(UserError):
    """A problem with the command-line arguments, reported through argparse (exit status 2)."""


def run_main(fn, *, debug: bool = False, out=None) -> int:
    """Run ``fn()`` as a command: 0 on success; a bad input (``UserError``) prints its message and gives 2, a run
    that stopped itself (``guard.TrainingStopped``, a refused non-finite save) prints why and gives 1 — both
    without a traceback unless ``debug``; Ctrl-C (``KeyboardInterrupt``) prints one line and gives 130, with the
    resume command when the interrupted run says where it stopped (``run_dir``: ``trainer.Interrupted``). Anything
    else is a bug and propagates with its traceback."""
    import sys

    from ddpo_grpo.checkpoint import NonFiniteError
    from ddpo_grpo.guard import TrainingStopped

    out = out or sys.stderr
    try:
        fn()
    except KeyboardInterrupt as exc:  # Ctrl-C: a training run says where it stopped and how to go on
        if debug:
            raise
        run_dir = getattr(exc, "run_dir", None)
        resume = f"; resume with: {resume_command(sys.argv, run_dir)}" if run_dir else ""
        print(f"{exc or 'interrupted'}{resume} (exit status 130)", file=out, flush=True)
        return 130
    except (TrainingStopped, NonFiniteError) as exc:
        if debug:
            raise
        print(f"stopped: {exc} (exit status 1)", file=out, flush=True)
        return 1
    except UserError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=out, flush=True)
        return 2
    return 0


def resume_command(argv: list[str], run_dir) -> str:
    """The command line ``argv`` (a training script's) with ``--config.resume_from=<run_dir>`` in place of any
    earlier resume_from, as a shell command to copy."""
    import shlex

    kept = [a for a in argv[1:] if not a.startswith("--config.resume_from")]
    return "python " + shlex.join([argv[0], *kept, f"--config.resume_from={run_dir}"])


def load_config(argv: list[str], default: str):
    """The ml-collections config of a command line: ``--config path/to/file.py[:name]`` (default ``default``) and
    ``--config.a.b=value`` overrides. Every problem is a UsageError naming the flag and the fix (unknown fields
    get the nearest field names), instead of absl's traceback.

    ``--config.resume_from=<run>`` without ``--config`` continues that run with its own saved config
    (:func:`resumed_config`); with ``--config`` the given file and overrides are used as they are."""
    spec = None  # the last --config wins, as with absl flags
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            spec = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            spec = argv[i + 1]
    resume = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config.resume_from=")]
    if spec is None and resume and resume[-1]:
        return resumed_config(argv, resume[-1], default)
    return _load_file(argv, spec or default, default)


#: the fields a run continued with ``--config.resume_from`` alone may change on the command line (a prefix ending
#: in "." covers a whole section): how long it runs, how often it saves and evaluates, what it logs. Every other
#: field is the saved run's: changing it would make the continued run another experiment.
RESUME_SAFE = ("resume_from", "num_epochs", "save_freq", "logging.", "eval.freq")


def resume_safe(field: str) -> bool:
    return any(field == s or (s.endswith(".") and field.startswith(s)) for s in RESUME_SAFE)


def resumed_config(argv: list[str], resume_from: str, default: str):
    """The saved config of the run ``resume_from`` names (run_dir.saved_config: its config.json, or an older run's
    checkpoint state.json), with the command line's RESUME_SAFE overrides applied; any other override is a
    UsageError naming the field. The run continues in the directory resume_from names (run_name cleared).
    A run saved by an older version is brought up to this one (``run_dir.upgrade_saved``, one line each): fields added
    since take their defaults (config/base.py beside ``default``), saved fields this version lacks are dropped."""
    from ml_collections import ConfigDict

    from ddpo_grpo.run_dir import saved_config, upgrade_saved

    found = saved_config(resume_from)
    if found is None:
        raise UsageError(
            f"--config.resume_from={resume_from!r}: no config.json and no checkpoint there to read the run's config "
            "from; give the run directory (or one of its checkpoints), or pass the run's --config too"
        )
    values, source = found
    parsed = _load_file(argv, default, default)  # names and types checked against the default config
    fields = [a[len("--config.") :].split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
    for field in fields:
        if not resume_safe(field):
            raise UsageError(
                f"--config.{field}: a resumed run keeps its saved value (from {source}); only "
                f"{', '.join(s + '*' if s.endswith('.') else s for s in RESUME_SAFE)} may change on resume "
                "(start a new run to change the rest)"
            )
    base = os.path.join(os.path.dirname(default), "base.py")
    base = base if os.path.isfile(base) else default
    config = ConfigDict(upgrade_saved(values, _load_file(argv[:1], base, base).to_dict(), source))
    for field in fields:
        *path, leaf = field.split(".")
        node, given = config, parsed
        for part in path:
            node, given = node[part], given[part]
        node[leaf] = given[leaf]
    config.run_name, config.resume_from = "", resume_from  # the run continues where resume_from points
    return config


def _load_file(argv: list[str], spec: str, default: str):
    """load_config of the config file ``spec``."""
    import difflib

    from absl import flags
    from ml_collections import config_flags

    path = spec.split(":", 1)[0]
    if not os.path.isfile(path):
        raise UsageError(f"--config {spec!r}: no such file {path!r}; give path/to/file.py[:experiment]")
    unknown = [a for a in argv[1:] if a.startswith("-") and not a.startswith("--config") and a != "--"]
    if unknown:
        raise UsageError(
            f"unknown option {unknown[0]!r}; options: --config FILE[:NAME], --config.<field>=<value>, --debug"
        )

    def parse(args):
        values = flags.FlagValues()
        config_flags.DEFINE_config_file("config", default, "experiment config", flag_values=values, sys_argv=args)
        values(args)
        return values.config

    base = [argv[0], f"--config={spec}"]
    try:
        config = parse(base)
    except Exception as exc:  # the config file itself: a wrong experiment name, an error in the file
        text = str(exc).strip()
        detail = text.splitlines()[-1] if text else type(exc).__name__  # absl wraps the file's traceback in its text
        raise UsageError(f"--config {spec!r}: {detail}") from exc
    for arg in argv[1:]:
        if not arg.startswith("--config."):
            continue
        field = arg[len("--config.") :].split("=", 1)[0]
        node, parts = config, field.split(".")
        for depth, part in enumerate(parts):
            keys = list(node.keys()) if hasattr(node, "keys") else []
            if part not in keys:
                where = ".".join(parts[:depth]) or "the config"
                near = difflib.get_close_matches(part, keys, n=3)
                hint = f"; did you mean {', '.join(repr('.'.join(parts[:depth] + [n])) for n in near)}?" if near else ""
                raise UsageError(
                    f"--config.{field}: {where} has no field {part!r}{hint} (every field is documented "
                    "in config/base.py)"
                )
            node = node[part]
    try:
        final = parse(argv)
    except Exception as exc:  # a value of the wrong type, an unparsable literal
        raise UsageError(f"command line: {exc}") from exc
    drop_default_kwargs(final, config)
    return final


def drop_default_kwargs(config, defaults, out=None) -> list[str]:
    """Make the config file's reward.kwargs follow reward.fns: an entry for a reward that is not in reward.fns is
    dropped, with a one-line note, when it is the config file's own (equal to ``defaults``' entry, e.g. a world's
    ``shapes`` kwargs after ``--config.reward.fns="{'pickscore': 1.0}"``); one the command line set stays, and the
    config check refuses it. Returns the names dropped."""
    import sys

    reward = config.get("reward") if hasattr(config, "get") else None
    if reward is None or "kwargs" not in reward or "fns" not in reward or "reward" not in defaults:
        return []

    def plain(value):
        return value.to_dict() if hasattr(value, "to_dict") else value

    base = defaults.reward.get("kwargs") or {}
    dropped = [
        k
        for k in list(reward.kwargs)
        if k not in reward.fns and k in base and plain(base[k]) == plain(reward.kwargs[k])
    ]
    if dropped:
        with reward.unlocked():
            reward.kwargs = {k: v for k, v in plain(reward.kwargs).items() if k not in dropped}
        print(
            f"note: reward.kwargs for {dropped} (the config's own) dropped: not in reward.fns {sorted(reward.fns)}",
            file=out or sys.stdout,
            flush=True,
        )
    return dropped


def load_rows(source: str) -> list[dict]:
    from ddpo_grpo.prompts import load_prompts

    try:
        return load_prompts(source)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--prompts {source!r}: {exc}") from exc


def check_rows_for(policy, rows: list[dict], source: str) -> None:
    """A UsageError naming --prompts when ``policy`` edits a source image (``image_conditioned``) and a row of
    ``source`` carries none; it names an installed prompt source whose rows have them."""
    from ddpo_grpo.policies.conditioning import SOURCE_KEY

    if not getattr(policy, "image_conditioned", False):
        return
    missing = next((i for i, row in enumerate(rows) if row.get(SOURCE_KEY) is None), None)
    if missing is None:
        return
    found = conditioned_source()
    hint = f"e.g. --prompts {found}" if found else f'a .jsonl file with a "{SOURCE_KEY}" in every row'
    raise UsageError(
        f"--prompts {source!r}: row {missing} (prompt {rows[missing].get('prompt')!r}) has no {SOURCE_KEY!r}, and "
        f"this model ({type(policy).__name__}) edits a source image: give prompt rows with source images, {hint}"
    )


def conditioned_source() -> str | None:
    """The name of an installed prompt source whose rows all carry a source image (held-out splits first), or None."""
    from ddpo_grpo.policies.conditioning import SOURCE_KEY
    from ddpo_grpo.prompts import load_prompts
    from foundation import plugins

    names = sorted(plugins.names("prompt_sources"), key=lambda n: (not n.endswith("_test"), n))
    for name in names:
        try:
            rows = load_prompts(name)
        except Exception:  # a broken plug-in is not this message's concern
            continue
        if rows and all(row.get(SOURCE_KEY) is not None for row in rows):
            return name
    return None


def _looks_like_path(model: str) -> bool:
    """True when ``model`` can only be meant as a local path (a hub id is ``name`` or ``org/name``)."""
    return (
        os.path.isabs(model)
        or model.startswith((".", "~"))
        or model.count("/") > 1
        or (os.sep != "/" and os.sep in model)
    )


def check_model_source(model: str) -> str | None:
    """Why ``model`` (a pipeline directory, a run's output, a factory file or a hub id) cannot be loaded, or None.

    Cheap checks only, before anything is loaded: a local path must exist and look like a pipeline or a run's
    output; a factory file ("path/to/file.py:fn") must exist; a hub id must be in the local cache when
    HF_HUB_OFFLINE is set (otherwise the download attempt would fail with a network error).
    """
    from ddpo_grpo.policies import FINAL_MANIFEST

    path = Path(os.path.expanduser(model))
    file_part = model.rpartition(":")[0] if model.rpartition(":")[0].endswith(".py") else ""
    if file_part or model.endswith(".py"):
        file = Path(os.path.expanduser(file_part or model))
        return None if file.is_file() else f"{model!r}: factory file {str(file)!r} does not exist"
    if path.exists():
        if not path.is_dir():
            return f"{model!r} is a file; expected a pipeline directory, a run's output or a hub id"
        from ddpo_grpo.language_model import is_causal_lm

        markers = (path / "model_index.json", path / FINAL_MANIFEST, path / "final" / FINAL_MANIFEST)
        if not any(m.is_file() for m in markers) and not is_causal_lm(str(path)):
            return (
                f"{model!r} is neither a diffusers pipeline directory (no model_index.json), a causal language model "
                f"(config.json naming a *ForCausalLM) nor a run's output (no {FINAL_MANIFEST}; a training run writes "
                "final/ only when it ends)"
            )
        return None
    if _looks_like_path(model):
        return f"{model!r}: no such directory"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        if not isinstance(try_to_load_from_cache(model, "model_index.json"), str):
            return (
                f"{model!r} is neither a local directory nor in the local hub cache, and HF_HUB_OFFLINE is set: "
                f"download it first (`hf download {model}`) or give a local pipeline directory"
            )
    return None


def load_model(model: str):
    """The pipeline ``model`` names (a pipeline directory, a run's output, a factory file or a hub id), or a
    UsageError naming --model."""
    from ddpo_grpo.policies import load_pipeline

    problem = check_model_source(model)
    if problem:
        raise UsageError(f"--model {problem}")
    try:
        return load_pipeline(model)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {model!r} could not be loaded: {exc}") from exc


def native_resolution(pipeline) -> int:
    """The pipeline's native ``sample.resolution`` (image families: denoiser sample_size × VAE factor)."""
    from ddpo_grpo.policies import policy_class

    return policy_class(pipeline).native_resolution(pipeline)
