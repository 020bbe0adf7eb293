"""Command-line helpers shared by the scripts: argument errors that name the flag, and loading
what `--model` and `--prompts` point at (a pipeline directory, a hub id or a run's output; a built-in
prompt set or a prompt file)."""

from __future__ import annotations

import os
from pathlib import Path


class UsageError(Exception):
    """A problem with the command-line arguments, reported through argparse (exit status 2)."""


def load_rows(source: str) -> list[dict]:
    from ddpo_grpo.prompts import load_prompts

    try:
        return load_prompts(source)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--prompts {source!r}: {exc}") from exc


def _looks_like_path(model: str) -> bool:
    """True when `model` can only be meant as a local path (a hub id is `name` or `org/name`)."""
    return os.path.isabs(model) or model.startswith((".", "~")) or model.count("/") > 1 or (os.sep != "/" and os.sep in model)


def load_model(model: str):
    from ddpo_grpo.policies import FINAL_MANIFEST, load_pipeline

    path = Path(os.path.expanduser(model))
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"--model {model!r} is a file; expected a pipeline directory, a hub id or a run's output")
        if not ((path / "model_index.json").is_file() or (path / FINAL_MANIFEST).is_file()
                or (path / "final" / FINAL_MANIFEST).is_file()):
            raise UsageError(
                f"--model {model!r} is neither a diffusers pipeline directory (no model_index.json) nor a run's "
                f"output (no {FINAL_MANIFEST} in it or in its final/); a training run writes final/ only when it ends"
            )
        model = str(path)
    elif _looks_like_path(model):
        raise UsageError(f"--model {model!r}: no such directory")
    try:
        return load_pipeline(model)
    except (OSError, ValueError) as exc:
        hint = "" if path.exists() else " (no such local directory, and not loadable as a hub id)"
        raise UsageError(f"--model {model!r} could not be loaded{hint}: {exc}") from exc


def native_resolution(pipeline) -> int:
    """The pipeline's native image side: denoiser sample_size × VAE downsampling factor."""
    from ddpo_grpo.policies import policy_class

    denoiser = getattr(pipeline, policy_class(pipeline).denoiser_attr)
    size = denoiser.config.sample_size
    size = size[0] if isinstance(size, (list, tuple)) else size
    return int(size) * 2 ** (len(pipeline.vae.config.block_out_channels) - 1)
