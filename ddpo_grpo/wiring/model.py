"""The model of a run: the pipeline read from ``pretrained.model`` (or the tiny one) and its policy adapter, each
component read in its dtype; under FSDP the trained components built empty, to be read one shard per process."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch

from ddpo_grpo.precision import WEIGHT_DTYPES
from ddpo_grpo.token_losses import AGGREGATIONS as TOKEN_AGGREGATIONS
from ddpo_grpo.wiring.process import main_print, sharded
from foundation.errors import ConfigError


def model_path(config, acc) -> str:
    """``pretrained.model``, or the tiny pipeline ``pretrained.tiny`` built once under <logdir>/_tiny/."""
    from ddpo_grpo import tiny

    if config.pretrained.model:
        return config.pretrained.model
    builders = tiny.BUILDERS
    if config.pretrained.tiny not in builders:
        raise ConfigError(
            f"pretrained.tiny={config.pretrained.tiny!r} must be one of {sorted(builders)} "
            "(used when pretrained.model is empty)"
        )
    path = (Path(config.logdir) / "_tiny" / config.pretrained.tiny).resolve()
    if acc.is_main_process and not (path / "model_index.json").is_file():
        from ddpo_grpo.console import quiet_library_logs

        with torch.random.fork_rng(devices=[]), quiet_library_logs():  # its own RNG: the run's random state kept
            builders[config.pretrained.tiny](path)
    acc.wait_for_everyone()
    return str(path)


def build_policy_for(config, acc):
    """(policy adapter of the loaded pipeline, the model's path); ConfigError when the family cannot take the
    sampling settings (kernel, noise level, resolution, frames)."""
    from ddpo_grpo.policies import build_policy, denoiser_components, load_pipeline, policy_settings

    path = model_path(config, acc)
    trained = denoiser_components(path)
    dtypes = load_dtypes(config, trained) if trained else None  # (a factory's pipeline: cast by build_weights)
    pipeline = load_pipeline(path, torch_dtype=dtypes, components=empty_denoisers(config, acc, path, trained, dtypes))
    try:
        policy = build_policy(pipeline, policy_settings(pipeline, config.sample))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    s, t = config.sample, config.train
    if policy.sample_kind == "text":
        check_language_run(config)
    elif t.loss_aggregation in TOKEN_AGGREGATIONS:
        raise ConfigError(
            f"train.loss_aggregation={t.loss_aggregation!r} is a language model's; a {type(policy).__name__} takes "
            "'mean' or 'sum_norm'"
        )
    if policy.noise_level <= 0 and s.share_group_noise:
        raise ConfigError(
            "sample.noise_level=0 with sample.share_group_noise: deterministic sampling from one shared "
            "initial noise makes every member of a group the same image (no advantage); turn one of them off"
        )
    if policy.noise_level <= 0 and t.objective == "grpo":
        raise ConfigError(
            f"sample.noise_level={policy.noise_level}: with no noise every sampling step is deterministic "
            f"and there is no transition to train; set sample.noise_level > 0 (kernel {policy.kernel!r})"
        )
    if t.gradient_checkpointing or config.distributed.strategy == "fsdp":  # the blocks exist (before any write)
        from ddpo_grpo import sharding

        sharding.block_names(policy, config.distributed.shard_blocks)
    return policy, path


def check_language_run(config) -> None:
    """ConfigError for the settings a language-model run cannot take (before anything is written)."""
    s, t = config.sample, config.train
    if s.share_group_noise:
        raise ConfigError(
            "sample.share_group_noise=True with a language model: the members of a group would draw the same tokens "
            "(one seed); set it False"
        )
    from ddpo_grpo.token_updates import check_settings

    try:
        check_settings(t.objective, t.loss_aggregation, t.beta, t.kl_estimator)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if t.kl_in_reward and (t.beta <= 0 or config.reward.aggregation != "reward"):
        raise ConfigError(
            f"train.kl_in_reward=True needs train.beta > 0 (got {t.beta}) and reward.aggregation='reward' (got "
            f"{config.reward.aggregation!r}): the KL is subtracted from the combined reward"
        )


def check_rows(policy, rows: list[dict]) -> None:
    """A language model's prompt rows, each encoded once before anything is written: ConfigError naming the row that
    the model cannot take (too long for sample.max_prompt_length, empty, a chat row without a chat template)."""
    if policy.sample_kind != "text":
        return
    for i, row in enumerate(rows):
        try:
            policy.encode_rows([row])
        except ValueError as exc:
            raise ConfigError(f"prompts.source row {i}: {exc}".replace("prompt row 0 ", "")) from exc


def load_dtypes(config, trained) -> dict:
    """What each component is read from its files in (``load_pipeline``'s per-component torch_dtype): the weight
    dtype of ``mixed_precision``, the trained components (``trained``) in float32 for full fine-tuning, whose
    weights all train, and the VAE in the dtype it will run in, so that a float32 VAE holds the checkpoint's
    weights, not their 16-bit rounding: ``sample.vae_dtype`` when set; under "auto" float32 when the weights are
    float16 (the rule ``Policy.vae_dtype`` applies once the pipeline is known may upcast it; the cast down to float16
    otherwise is the rounding a float16 read makes), else the weight dtype (the rule keeps it)."""
    from ddpo_grpo.policies.base import VAE_DTYPES

    weight = WEIGHT_DTYPES[config.mixed_precision]
    denoiser = weight if config.train.use_lora else torch.float32
    vae = VAE_DTYPES[config.sample.vae_dtype] or (torch.float32 if weight == torch.float16 else weight)
    return {"default": weight, "vae": vae, **dict.fromkeys(trained, denoiser)}


def empty_denoisers(config, acc, path: str, trained, dtypes) -> dict:
    """Under FSDP with several processes: the trained components built empty (parameters on the meta device), each
    read later one shard per process (``sharded_loading``); {} otherwise. A component that cannot be built so (not
    a diffusers model with safetensors weights) is loaded whole, and the run says so."""
    from ddpo_grpo import sharded_loading
    from ddpo_grpo.policies import component_dtype

    if not sharded(config, acc):
        return {}
    if trained == ("model",) and not (Path(path) / "model_index.json").is_file():  # a causal language model
        main_print(acc)(
            "sharded loading: a language model is read whole by every process before it is sharded (its weights are "
            "not read shard by shard yet)"
        )
        return {}
    if not trained:
        main_print(acc)(
            f"sharded loading: pretrained.model={path!r} is a factory file or a run's LoRA output; every process "
            "builds the whole denoiser before it is sharded"
        )
        return {}
    directory = Path(path) if Path(path).is_dir() else None
    if directory is None:
        from diffusers import DiffusionPipeline

        directory = Path(DiffusionPipeline.download(path))
    index = json.loads((directory / "model_index.json").read_text())
    built = {}
    for name in trained:
        library, cls_name = index[name]
        try:
            cls = getattr(importlib.import_module(library), cls_name, None)
        except ImportError:
            cls = None
        empty = sharded_loading.empty_component(directory / name, cls, component_dtype(dtypes, name))
        if empty is None:
            main_print(acc)(
                f"sharded loading: {name} ({cls_name}) is not a diffusers model with safetensors "
                "weights; every process loads it whole before it is sharded"
            )
        else:
            built[name] = empty
    return built
