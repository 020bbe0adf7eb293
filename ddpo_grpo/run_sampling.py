"""A run's own sampling settings: what a training run's output is sampled and evaluated with, written by the run
into ``final/sampling.json`` (:data:`MODEL_SAMPLING_FILE`, the schema of a shipped model's recommended settings:
:func:`settings_of_run`) and read back from it (an older run's ``final/ddpo_grpo_final.json`` "sampling", or, before
final/ is written, its newest checkpoint's config), so ``scripts/sample.py`` and ``scripts/evaluate.py`` sample a
run, or a copy of its final/ moved anywhere, as it evaluated itself (``ddpo_grpo/sampling_cli.py`` layers flags,
these, the model's recommended settings and the defaults)."""

from __future__ import annotations

import os
from pathlib import Path

from ddpo_grpo.cli import UsageError

#: a pipeline directory's recommended sampling settings, and a run's final/ its own: a JSON object of some of
#: SAMPLING_KEYS (e.g. ``{"kernel": "ddim", "num_steps": 20, "guidance_scale": 2.5}``; a language model's: of
#: TEXT_SAMPLING_KEYS, e.g. ``{"max_response_length": 64}``). Every shipped model has one (its world's evaluation
#: settings); every run writes one into final/ (:func:`settings_of_run`)
MODEL_SAMPLING_FILE = "sampling.json"
#: the sampling settings a model is sampled and evaluated with (the keys of MODEL_SAMPLING_FILE); a run's "num_steps"
#: is its sample.eval_num_steps, the steps of its deterministic evaluation
SAMPLING_KEYS = (
    "num_steps",
    "guidance_scale",
    "max_sequence_length",
    "resolution",
    "kernel",
    "negative_prompt",
    "image_guidance_scale",
    "num_frames",
    "guidance_scale_2",
)
#: a language model's sampling settings (its run's sample.temperature, top_p, max_prompt_length, max_response_length,
#: stop: ``policies.causal_lm.LanguageSettings``), read back like SAMPLING_KEYS (``ddpo_grpo/text_sampling.py``)
TEXT_SAMPLING_KEYS = ("temperature", "top_p", "max_prompt_length", "max_response_length", "stop")


def run_dirs(model: str) -> tuple[Path, Path] | None:
    """``(run dir, final dir)`` when ``model`` is a training run's output (the run directory or its final/)."""
    from ddpo_grpo.policies import FINAL_MANIFEST

    path = Path(os.path.expanduser(model))
    if (path / "final" / FINAL_MANIFEST).is_file():
        return path, path / "final"
    if (path / FINAL_MANIFEST).is_file():
        return path.parent, path
    return None


def default_out(model: str) -> Path:
    """scripts/evaluate.py's output directory by default: ``<run>/eval`` beside a training run (``model`` its directory
    or its final/); else ``./eval/<name>`` in the working directory, ``<name>`` the model's last path part: never
    inside a pipeline directory (a shipped model in the repository, a shared cache)."""
    dirs = run_dirs(model)
    if dirs is not None:
        return dirs[0] / "eval"
    return Path("eval") / (Path(os.path.expanduser(model)).name or "model")


def settings_of_run(config, policy) -> dict:
    """What a run writes into ``final/``'s :data:`MODEL_SAMPLING_FILE`: the settings it sampled and evaluated with,
    resolved by its policy (``policy.kernel`` and ``policy.resolution``, not the config's "" / None for the family's
    defaults; a language model's ``policy.sampling_manifest()``); settings that are None, or unused by the family
    (an image guidance without an image-conditioned model), left out."""
    if hasattr(policy, "sampling_manifest"):  # a family with settings of its own (causal language models)
        found = policy.sampling_manifest()
    else:
        s = config.sample
        found = {
            "num_steps": s.eval_num_steps,
            "guidance_scale": s.guidance_scale,
            "max_sequence_length": getattr(policy, "max_sequence_length", s.max_sequence_length),  # 0 resolved
            "resolution": policy.resolution,
            "kernel": policy.kernel,
            "negative_prompt": s.negative_prompt,
            "image_guidance_scale": s.image_guidance_scale if getattr(policy, "image_conditioned", False) else None,
            "num_frames": s.num_frames,
            "guidance_scale_2": s.get("guidance_scale_2"),
        }
    return _recorded(found)


def read_settings_file(path: Path, model: str) -> dict:
    """The settings of a :data:`MODEL_SAMPLING_FILE` (None values dropped); a file that is not JSON, not an object or
    holds a key that is not a sampling setting is a UsageError naming it and ``model`` (--model)."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"--model {model!r}: cannot read {path}: {exc}") from exc
    keys = SAMPLING_KEYS + TEXT_SAMPLING_KEYS
    unknown = sorted(set(data) - set(keys)) if isinstance(data, dict) else None
    if unknown is None or unknown:
        raise UsageError(
            f"--model {model!r}: {path} must be a JSON object of sampling settings ({', '.join(keys)})"
            + (f"; unknown: {unknown}" if unknown else "")
        )
    return {k: v for k, v in data.items() if v is not None}


def _from_config(config: dict) -> dict:
    """The SAMPLING_KEYS and TEXT_SAMPLING_KEYS of a run's config (as stored in a checkpoint's state.json)."""
    sample = config.get("sample", {}) if isinstance(config, dict) else {}
    pick = {
        "num_steps": sample.get("eval_num_steps"),
        "guidance_scale": sample.get("guidance_scale"),
        "max_sequence_length": sample.get("max_sequence_length"),
        "resolution": sample.get("resolution"),
        "kernel": sample.get("kernel"),
        "negative_prompt": sample.get("negative_prompt"),
        "image_guidance_scale": sample.get("image_guidance_scale"),
        "num_frames": sample.get("num_frames"),
        "guidance_scale_2": sample.get("guidance_scale_2"),
        **{key: sample.get(key) for key in TEXT_SAMPLING_KEYS},
    }
    return _recorded(pick)


def _recorded(settings: dict) -> dict:
    """The settings a run recorded, without the unset ones: None, and a ``max_sequence_length`` of 0 (the config's
    "the pipeline's default", which older manifests and every checkpoint's config hold; the model's own applies)."""
    return {k: v for k, v in settings.items() if v is not None and not (k == "max_sequence_length" and v == 0)}


def run_sampling_settings(model: str) -> tuple[dict, str]:
    """The sampling settings a run used, and where they were read, for ``model`` (a run directory or its final/).

    Looked up in order: ``final/sampling.json`` (:data:`MODEL_SAMPLING_FILE`, what a run writes, so a copy of final/
    alone has them); an older run's ``final/ddpo_grpo_final.json`` ``"sampling"`` object; the ``"config"`` of the run's
    newest complete checkpoint (``<run>/checkpoints/epoch_*/state.json``: ``sample.eval_num_steps`` as
    ``num_steps``, ``sample.guidance_scale``, …); ``({}, "")`` when ``model`` is not a run's output or neither
    holds them (the scripts' own defaults apply). Only SAMPLING_KEYS and TEXT_SAMPLING_KEYS are returned; a manifest or state file that
    is not valid JSON is a UsageError naming it.
    """
    import json

    from ddpo_grpo.checkpoint import STATE_FILE, list_checkpoints
    from ddpo_grpo.policies import FINAL_MANIFEST

    dirs = run_dirs(model)
    if dirs is None:
        return {}, ""
    run, final = dirs

    def read(path: Path) -> dict:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"--model {model!r}: cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise UsageError(f"--model {model!r}: {path} holds {type(data).__name__}, expected a JSON object")
        return data

    own = final / MODEL_SAMPLING_FILE
    if own.is_file():
        return read_settings_file(own, model), str(own)
    manifest = final / FINAL_MANIFEST
    sampling = read(manifest).get("sampling")
    if isinstance(sampling, dict) and sampling:
        keys = SAMPLING_KEYS + TEXT_SAMPLING_KEYS
        return _recorded({k: sampling.get(k) for k in keys}), str(manifest)
    checkpoints = list_checkpoints(run)
    if checkpoints:
        state = checkpoints[-1] / STATE_FILE
        found = _from_config(read(state).get("config", {}))
        if found:
            return found, str(state)
    return {}, ""
