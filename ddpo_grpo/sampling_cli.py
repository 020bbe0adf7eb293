"""Sampling a model from the command line, as ``scripts/sample.py`` and ``scripts/evaluate.py`` both do.

One place for what the two share: the sampling flags and where their values come from (:func:`resolve_settings`: a
flag; else the run's own settings, ``ddpo_grpo.run_sampling.run_sampling_settings``; else the settings the model recommends in
its pipeline directory's :data:`MODEL_SAMPLING_FILE`; else :data:`DEFAULT_SAMPLING`), their range checks and
--out's, the policy built from a loaded pipeline with a refused setting reported as the flag that set it,
deterministic samples scored by rewards (evaluate.py's, for the model and for --compare's base), the torch device,
and a command's ``main`` (``ddpo_grpo.script_args``: a ``UsageError`` is one line and exit status 2).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpo_grpo.cli import UsageError, check_rows_for, native_resolution
from ddpo_grpo.run_sampling import MODEL_SAMPLING_FILE, read_settings_file, run_dirs, run_sampling_settings

#: sampling settings when no flag, run or model (MODEL_SAMPLING_FILE) gives them (resolution None = native)
DEFAULT_SAMPLING = {
    "num_steps": 40,
    "guidance_scale": 4.5,
    "max_sequence_length": 77,
    "resolution": None,
    "kernel": "",
    "negative_prompt": "",
    "image_guidance_scale": None,
    "num_frames": 0,
    "guidance_scale_2": None,
}
#: --kernel's choices ('' = the family's default)
KERNELS = ("", "flow_grpo", "dance", "cps", "ddim", "ddpm")


def add_sampling_flags(p: argparse.ArgumentParser, batch_size: int) -> None:
    """The flags of :data:`DEFAULT_SAMPLING`, --seed, --batch_size (default ``batch_size``) and --device."""
    p.add_argument(
        "--seed", type=int, default=0, help="base seed; image k of prompt i uses a seed derived from (seed, i, k)"
    )
    p.add_argument(
        "--num_steps",
        type=int,
        default=None,
        help=f"denoising steps (default: the run's, else the model's {MODEL_SAMPLING_FILE}, else "
        f"{DEFAULT_SAMPLING['num_steps']})",
    )
    p.add_argument(
        "--guidance_scale",
        type=float,
        default=None,
        help=f"classifier-free guidance weight, <= 1: off (default: the run's, else the model's {MODEL_SAMPLING_FILE}, "
        f"else {DEFAULT_SAMPLING['guidance_scale']})",
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="image side in pixels (default: the run's, the model's sampling.json, else the pipeline's native size, denoiser sample_size x "
        "VAE factor)",
    )
    p.add_argument(
        "--max_sequence_length",
        type=int,
        default=None,
        help=f"text tokens for encoders that take it, T5 (default: the run's, the model's sampling.json, else {DEFAULT_SAMPLING['max_sequence_length']})",
    )
    p.add_argument(
        "--kernel",
        default=None,
        choices=list(KERNELS),
        help="the transition kernel (sample.kernel; '' = the family's default: flow_grpo, ddim, or a denoiser "
        "pipeline's scheduler kind; default: the run's, else the model's sampling.json)",
    )
    p.add_argument(
        "--negative_prompt",
        default=None,
        help="negative prompt for classifier-free guidance (default: the run's, the model's sampling.json, else '')",
    )
    p.add_argument(
        "--image_guidance_scale",
        type=float,
        default=None,
        help="image-conditioned pipelines: the image guidance s_I >= 1 (default: the run's, the model's sampling.json, else the adapter's)",
    )
    p.add_argument(
        "--num_frames",
        type=int,
        default=None,
        help="video families: frames per video (Wan: 4k + 1; default: the run's, the model's sampling.json, else 0 = the family's default)",
    )
    p.add_argument(
        "--guidance_scale_2",
        type=float,
        default=None,
        help="two-expert models (Wan 2.2): the low-noise expert's CFG scale (default: the run's, the model's sampling.json, else --guidance_scale)",
    )
    p.add_argument("--batch_size", type=int, default=batch_size, help="images per denoiser batch")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")


def check_sampling(args) -> None:
    """The sampling flags' ranges (a flag still None, to be resolved, passes)."""
    for name in ("num_steps", "max_sequence_length", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.resolution is not None and args.resolution < 1:
        raise UsageError(f"--resolution must be a positive number of pixels, got {args.resolution}")
    if args.guidance_scale is not None and not math.isfinite(args.guidance_scale):
        raise UsageError(f"--guidance_scale must be a finite number, got {args.guidance_scale}")


def check_out(out: str | None) -> None:
    """--out must be a directory or creatable as one (no file at it or above it)."""
    if out is not None:
        blocked = next((p for p in [Path(out), *Path(out).parents] if p.exists()), None)
        if blocked is not None and not blocked.is_dir():
            raise UsageError(f"--out {out!r}: {str(blocked)!r} is a file; give a directory (created if missing)")


def model_sampling_settings(model: str) -> tuple[dict, str]:
    """The sampling settings ``model`` recommends, and the file they were read from: its pipeline directory's
    :data:`MODEL_SAMPLING_FILE` (``ddpo_grpo.run_sampling``; for a LoRA run's output, its base model's: the run's
    own final/sampling.json is the run's layer, ``run_sampling_settings``); ``({}, "")`` when there is none (a hub
    id, a factory file, a directory without one). An unreadable file, or one with a key that is not a sampling
    setting, is a UsageError naming it."""
    from ddpo_grpo.policies import is_factory_spec, resolve_model

    base, _ = resolve_model(os.path.expanduser(str(model)))
    dirs = run_dirs(model)
    own = dirs[1].resolve() if dirs is not None else None  # a run's final/: read as the run's settings
    if is_factory_spec(base) or not Path(base).is_dir() or Path(base).resolve() == own:
        return {}, ""
    path = Path(base) / MODEL_SAMPLING_FILE
    return (read_settings_file(path, model), str(path)) if path.is_file() else ({}, "")


def resolve_settings(args, model: str, defaults: dict, out=None) -> dict:
    """Fill every attribute of ``args`` named by a key of ``defaults`` (``SAMPLING_KEYS``, or a language model's
    ``TEXT_SAMPLING_KEYS``) and left None: from the run's own settings when ``model`` is a run's output, else from
    the model's :data:`MODEL_SAMPLING_FILE`, else from ``defaults``; print one line naming each value's source (flag,
    run, model, default) and the files read. Returns ``{key: value}`` of those used."""
    run, run_source = run_sampling_settings(model)
    recommended, model_source = model_sampling_settings(model)
    used, origin = {}, {}
    for key in (k for k in defaults if hasattr(args, k)):
        layers = (("flag", {key: getattr(args, key)} if getattr(args, key) is not None else {}), ("run", run))
        layers += (("model", recommended), ("default", {key: defaults.get(key)}))
        origin[key], value = next((name, layer[key]) for name, layer in layers if key in layer)
        setattr(args, key, value)
        used[key] = value
    shown = ", ".join(f"{k}={used[k]!r} ({origin[k]})" for k in used)
    where = "".join(f"; {o} settings from {s}" for o, s in (("run", run_source), ("model", model_source)) if s)
    print(f"sampling settings: {shown}{where}", file=out or sys.stdout, flush=True)
    return used


def resolve_and_check(args) -> dict:
    """Fill the sampling flags left None (:func:`resolve_settings`: the run's, the model's recommended, else
    :data:`DEFAULT_SAMPLING`; printing where each value came from), and check them; return ``{setting: value}``."""
    used = resolve_settings(args, args.model, DEFAULT_SAMPLING)
    check_sampling(args)
    return used


def policy_from_flags(pipeline, args, **extra):
    """``(policy, resolution)``: ``pipeline`` wrapped in its family's adapter with the sampling flags of ``args``
    (``extra``: more adapter settings, e.g. the deprecated ``sde_type``); a setting the adapter refuses is a
    UsageError naming its flag."""
    from ddpo_grpo.policies import build_policy

    resolution = args.resolution or native_resolution(pipeline)
    if args.kernel:
        extra["kernel"] = args.kernel
    if args.image_guidance_scale is not None:  # (read by the image-conditioned families only)
        extra["image_guidance_scale"] = args.image_guidance_scale
    if args.guidance_scale_2 is not None:  # (read by two-expert families only)
        extra["guidance_scale_2"] = args.guidance_scale_2
    try:
        policy = build_policy(
            pipeline,
            resolution=resolution,
            max_sequence_length=args.max_sequence_length,
            num_frames=args.num_frames,
            **extra,
        )
    except ValueError as exc:
        flag = f"--kernel {args.kernel!r}" if "kernel" in str(exc) else f"--resolution {resolution}"
        flag = f"--num_frames {args.num_frames}" if "num_frames" in str(exc) else flag
        flag = f"--guidance_scale_2 {args.guidance_scale_2}" if "guidance_scale_2" in str(exc) else flag
        raise UsageError(f"{flag}: {exc}") from exc
    return policy, resolution


@dataclass
class Sampled:
    """One model's deterministic samples scored by every reward (:func:`sample_and_score`)."""

    scorers: Any  # ddpo_grpo.evaluation.Scorers
    samples: Any  # the first ``max_samples`` decoded samples
    captions: list[str]
    policy: Any
    resolution: int


def sample_and_score(pipeline, args, rows: list[dict], rewards: dict, device, max_samples: int | None) -> Sampled:
    """Deterministic samples of ``pipeline`` (the sampling flags of ``args``, and --per_prompt, --per_group,
    --group_by, --frame_reduction) for ``rows``, scored by every reward of ``rewards`` (``ddpo_grpo.evaluation``)."""
    from ddpo_grpo.evaluation import Scorers, evaluate
    from reward_models import check_kinds, for_sample_kind

    policy, resolution = policy_from_flags(pipeline, args)
    check_rows_for(policy, rows, args.prompts)  # an image-editing model needs rows with source images
    pipeline.to(device)
    try:  # a video family's frames scored by image rewards, reduced per video by --frame_reduction
        check_kinds(rewards, policy.sample_kind, type(policy).__name__)
        rewards = {n: for_sample_kind(f, policy.sample_kind, args.frame_reduction) for n, f in rewards.items()}
    except ValueError as exc:
        raise UsageError(f"--reward: {exc}") from exc
    scorers = Scorers(rewards, args.group_by)
    _, samples, captions = evaluate(
        policy,
        rows,
        scorers,
        num_steps=args.num_steps,
        guidance_scale=args.guidance_scale,
        per_prompt=args.per_prompt,
        per_group=args.per_group,
        group_by=args.group_by,
        seed=args.seed,
        batch_size=args.batch_size,
        negative_prompt=args.negative_prompt,
        max_samples=max_samples,
    )
    return Sampled(scorers, samples, captions, policy, resolution)


def device_of(args):
    """The torch device of --device (default: cuda when available, else cpu)."""
    import torch

    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def run_command(parser, fn, argv=None) -> int:
    """Parse ``argv`` and run ``fn(args)`` (``ddpo_grpo.script_args.run_script``): 0 on success; a bad command line
    or input prints one line and raises ``SystemExit(2)``, as argparse does; --debug shows the traceback."""
    from ddpo_grpo.script_args import run_script

    return run_script(parser, fn, argv, raise_status=True)
