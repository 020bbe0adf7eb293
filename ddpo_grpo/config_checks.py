"""Cross-field validation of a config at load time, and the derived totals printed at start-up.

Every message names the field(s) and says how to fix them. ``validate(config, num_processes)`` raises
``ConfigError`` (a ValueError) listing ALL problems at once, so a user fixes a config in one go.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ddpo_grpo import degradations, schedules
from ddpo_grpo.advantages import ADVANTAGE_MODES
from ddpo_grpo.heldout import scorer_kwargs, scorer_names
from ddpo_grpo.kernels import BOUNDED_NOISE, FLOW_KERNELS, KERNELS
from ddpo_grpo.losses import AGGREGATIONS, FORWARD_OBJECTIVES, KL_ESTIMATORS
from ddpo_grpo.policies.settings import VAE_DTYPES, noise_level_in_range
from ddpo_grpo.stat_tracker import STD_RULES
from ddpo_grpo.token_losses import AGGREGATIONS as TOKEN_AGGREGATIONS
from ddpo_grpo.token_losses import TOKEN_KL_ESTIMATORS
from foundation.errors import ConfigError

REFERENCE_UPDATES = ("fixed", "hard", "soft")
STRATEGIES = ("ddp", "fsdp")
STORE_DTYPES = ("float32", "bfloat16", "float16")
OBJECTIVES = ("grpo", *FORWARD_OBJECTIVES)
MIXED_PRECISION = ("no", "fp16", "bf16")
TRACKERS = ("wandb", "tensorboard", "none")
STEP_SELECTIONS = ("first", "random")


def _choice(problems, name, value, allowed):
    if value not in allowed:
        problems.append(f"{name}={value!r} is not one of {list(allowed)}")


def _positive(problems, name, value, *, integer=True, allow_zero=False):
    bad_type = integer and not isinstance(value, int)
    if bad_type or value < 0 or (value == 0 and not allow_zero):
        kind = "an integer" if integer else "a number"
        problems.append(f"{name}={value!r} must be {kind} {'≥ 0' if allow_zero else '> 0'}")


def derived_totals(config, num_processes: int) -> dict:
    s, t = config.sample, config.train
    per_process = s.batch_size * s.num_batches_per_epoch
    images = per_process * num_processes
    minibatches = per_process // t.batch_size if t.batch_size else 0
    return {
        "num_processes": num_processes,
        "images_per_epoch": images,
        "prompts_per_epoch": images // s.group_size if s.group_size else 0,
        "samples_per_process": per_process,
        "minibatches_per_inner_epoch": minibatches,
        "optimizer_steps_per_epoch": (
            minibatches // t.gradient_accumulation_steps if t.gradient_accumulation_steps else 0
        )
        * t.num_inner_epochs,
    }


def validate(config, num_processes: int = 1) -> dict:
    """Check every cross-field constraint; return the derived totals (see config/base.py). The problems are
    collected section by section (each function below names its own); the batch arithmetic is checked only when
    the fields it divides by are valid."""
    p: list[str] = []
    for check in (_counts, _choices, _noise, _steps_and_rate, _check_run_name, _objective, _image_conditioning):
        check(p, config)
    for check in (_updates, _sample_storage, _distributed, _reward):
        check(p, config)
    if not p:
        _batch_arithmetic(p, config, num_processes)
    for check in (_optimizer, _probe, _evaluation):
        check(p, config)
    if p:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(p))
    return derived_totals(config, num_processes)


def _counts(p: list[str], config) -> None:
    """Sizes and counts: positive integers; groups of at least 2."""
    s, t = config.sample, config.train
    for name in ("num_steps", "batch_size", "num_batches_per_epoch", "resolution", "group_size"):
        _positive(p, f"sample.{name}", s[name])
    _positive(p, "sample.dynamic_sampling_rounds", s.get("dynamic_sampling_rounds", 0), allow_zero=True)
    for name in ("batch_size", "gradient_accumulation_steps", "num_inner_epochs", "lora_rank"):
        _positive(p, f"train.{name}", t[name])
    _positive(p, "num_epochs", config.num_epochs, allow_zero=True)
    if isinstance(s.group_size, int) and s.group_size < 2:
        p.append(f"sample.group_size={s.group_size} must be ≥ 2: group-relative advantages need ≥ 2 images per prompt")


def _choices(p: list[str], config) -> None:
    """Fields that name one of a registry's entries (kernels, advantage modes, KL estimators, …)."""
    s, t = config.sample, config.train
    _choice(p, "sample.kernel", s.kernel, ("", *KERNELS))
    if s.get("sde_type") is not None:
        _choice(p, "sample.sde_type", s.sde_type, FLOW_KERNELS)
    _choice(p, "train.adv_mode", t.adv_mode, tuple(ADVANTAGE_MODES))
    _choice(p, "train.adv_std_rule", t.adv_std_rule, tuple(STD_RULES))
    _choice(p, "train.kl_estimator", t.kl_estimator, (*KL_ESTIMATORS, *TOKEN_KL_ESTIMATORS))  # (language models')
    _choice(p, "train.loss_aggregation", t.loss_aggregation, (*AGGREGATIONS, *TOKEN_AGGREGATIONS))
    _choice(p, "train.reference_update", t.reference_update, REFERENCE_UPDATES)
    _choice(p, "train.timestep_selection", t.timestep_selection, STEP_SELECTIONS)
    _choice(p, "mixed_precision", config.mixed_precision, MIXED_PRECISION)
    _choice(p, "logging.tracker", config.logging.tracker, TRACKERS)


def _noise(p: list[str], config) -> None:
    """``sample.noise_level`` (and the deprecated ``sample.eta``) for the configured kernel: the field's one range
    check (``noise_level_in_range``). With ``sample.kernel`` "" the kernel is the family's default, known once the
    model is loaded: the policy checks that case (``Policy.resolve_noise_level``)."""
    s = config.sample
    if s.get("eta") is not None and not 0 <= s.eta <= 1:
        p.append(f"sample.eta={s.eta} must be in [0, 1] (0 = deterministic DDIM, 1 = DDPM-like)")
    kernel = s.kernel or s.get("sde_type") or ""
    if s.noise_level is not None and not noise_level_in_range(s.noise_level, kernel):
        p.append(
            f"sample.noise_level={s.noise_level} must be ≥ 0 (and ≤ 1 for the kernels {list(BOUNDED_NOISE)}; "
            "None = the kernel's default)"
        )


def _steps_and_rate(p: list[str], config) -> None:
    """The trained steps' fraction, the learning rate, the guard's limits."""
    t = config.train
    if not 0 < t.timestep_fraction <= 1:
        p.append(f"train.timestep_fraction={t.timestep_fraction} must be in (0, 1]")
    if not t.learning_rate >= 0:  # 0 is allowed: sampling and evaluation without updates, for checks
        p.append(f"train.learning_rate={t.learning_rate} must be ≥ 0 (typical: 1e-4 … 3e-4 for AdamW on LoRA)")
    for name in ("max_consecutive_skips", "max_degenerate_epochs"):
        _positive(p, f"train.{name}", t[name], allow_zero=True)


def _objective(p: list[str], config) -> None:
    """The objective, its clip range and forward-process settings, the supervised schedule."""
    t = config.train
    if t.clip_range <= 0:
        p.append(f"train.clip_range={t.clip_range} must be > 0 (the per-sample ratio bound, e.g. 0.2)")
    _choice(p, "train.objective", t.objective, OBJECTIVES)
    _choice(p, "train.forward_time", t.forward_time, ("uniform", "logit_normal"))
    _choice(p, "train.cfg_uncond_grad", t.cfg_uncond_grad, ("keep", "detach"))
    _positive(p, "train.forward_timesteps", t.forward_timesteps)
    p.extend(schedules.check(config))


def _image_conditioning(p: list[str], config) -> None:
    """Image-conditioned families: the image guidance, the data-consistency term and its degradation."""
    t = config.train
    g = config.sample.image_guidance_scale
    if isinstance(g, bool) or not isinstance(g, (int, float)) or g < 1:
        p.append(f"sample.image_guidance_scale={g!r} must be a number ≥ 1 (1 = no image guidance)")
    _positive(p, "train.consistency_weight", t.consistency_weight, integer=False, allow_zero=True)
    if t.degradation not in ("", "row"):
        try:
            degradations.parse(t.degradation, "train.degradation")
        except ValueError as exc:
            p.append(str(exc))
    if t.consistency_weight > 0 and not t.degradation:
        p.append("train.consistency_weight > 0 needs train.degradation: 'row' or a spec like 'blur:1.5'")


def _updates(p: list[str], config) -> None:
    """The update's guards and coefficients: gradient clips, the lagging sampler, the objectives' temperatures,
    LoRA dropout, KL, the reference model, how rewards combine."""
    t = config.train
    if not (t.max_grad_norm > 0 and t.grad_norm_ratio >= 0):
        p.append(
            f"train.max_grad_norm={t.max_grad_norm} must be > 0 and train.grad_norm_ratio={t.grad_norm_ratio} "
            "≥ 0 (0 = no relative clip)"
        )
    if not (t.sampler_decay_rate >= 0 and 0 <= t.sampler_decay_max < 1 and t.sampler_decay_flat >= 0):
        p.append(
            f"train.sampler_decay_rate={t.sampler_decay_rate}, train.sampler_decay_max={t.sampler_decay_max}, "
            f"train.sampler_decay_flat={t.sampler_decay_flat}: need rate ≥ 0, 0 ≤ max < 1, flat ≥ 0"
        )
    if t.sampler_decay_rate > 0 and t.objective == "grpo":
        p.append(
            "train.sampler_decay_rate > 0 with train.objective='grpo': a lagging sampler is for the forward-process "
            "objectives ('awm', 'nft', 'rwr'); GRPO's stored log-probs are the current policy's. Set it to 0"
        )
    if not (t.nft_beta > 0 and t.rwr_temperature > 0):
        p.append(f"train.nft_beta={t.nft_beta} and train.rwr_temperature={t.rwr_temperature} must be > 0")
    if t.objective == "grpo" and t.use_lora and t.lora_dropout > 0:
        p.append(
            f"train.lora_dropout={t.lora_dropout} with train.objective='grpo': the stored log-probs must be "
            "recomputable exactly, and dropout changes them; set it to 0 (dropout is fine for the "
            "forward-process objectives)"
        )
    if t.beta < 0 or t.kl_threshold < 0:
        p.append("train.beta and train.kl_threshold must be ≥ 0 (0 disables them)")
    if t.reference_update != "fixed" and t.reference_update_freq < 1:
        p.append(
            f"train.reference_update_freq={t.reference_update_freq} must be ≥ 1 with reference_update={t.reference_update!r}"
        )
    if not 0 <= t.reference_mix_alpha <= 1 or not 0 <= t.ema_decay < 1:
        p.append("train.reference_mix_alpha must be in [0, 1] and train.ema_decay in [0, 1)")
    _choice(p, "reward.aggregation", config.reward.aggregation, ("reward", "advantage"))


def _sample_storage(p: list[str], config) -> None:
    """The stored trajectories' dtype, the VAE's dtype, the text length."""
    s = config.sample
    _choice(p, "sample.store_dtype", s.store_dtype, STORE_DTYPES)
    _choice(p, "sample.vae_dtype", s.get("vae_dtype", "auto"), tuple(VAE_DTYPES))
    _positive(p, "sample.max_sequence_length", s.get("max_sequence_length", 0), allow_zero=True)


def _distributed(p: list[str], config) -> None:
    d = config.distributed
    _choice(p, "distributed.strategy", d.strategy, STRATEGIES)
    if d.cpu_offload and d.strategy != "fsdp":
        p.append(
            "distributed.cpu_offload needs distributed.strategy='fsdp' (it is FSDP2's offload of the sharded "
            "parameters); set the strategy or turn the offload off"
        )


def _reward(p: list[str], config) -> None:
    if not isinstance(config.reward.num_workers, int) or config.reward.num_workers < 0:
        p.append(f"reward.num_workers={config.reward.num_workers!r} must be an integer ≥ 0 (0 = score synchronously)")
    if not config.reward.fns:
        p.append("reward.fns is empty: set it to {name: weight}, e.g. {'jpeg_compressibility': 1.0}")
    stray = sorted(set(config.reward.kwargs) - set(config.reward.fns))
    if stray and config.reward.fns:
        p.append(
            f"reward.kwargs has entries {stray} for rewards that are not in reward.fns {sorted(config.reward.fns)}: "
            f"add those rewards to reward.fns, or give reward.kwargs only for the rewards you train with "
            f'(e.g. --config.reward.kwargs="{{}}")'
        )


def _batch_arithmetic(p: list[str], config, num_processes: int) -> None:
    """Groups, minibatches and optimizer steps that divide an epoch; the SDE window inside the schedule."""
    s, t = config.sample, config.train
    per_process = s.batch_size * s.num_batches_per_epoch
    total = per_process * num_processes
    if total % s.group_size:
        p.append(
            f"images per epoch = sample.batch_size × sample.num_batches_per_epoch × processes = "
            f"{s.batch_size}×{s.num_batches_per_epoch}×{num_processes} = {total} is not divisible by "
            f"sample.group_size={s.group_size}: change num_batches_per_epoch or group_size"
        )
    if per_process % t.batch_size:
        p.append(
            f"samples per process per epoch ({per_process} = sample.batch_size × sample.num_batches_per_epoch) "
            f"is not divisible by train.batch_size={t.batch_size}"
        )
    elif (per_process // t.batch_size) % t.gradient_accumulation_steps:
        p.append(
            f"minibatches per epoch ({per_process // t.batch_size}) is not divisible by "
            f"train.gradient_accumulation_steps={t.gradient_accumulation_steps}: no optimizer step may straddle epochs"
        )
    if s.get("dynamic_sampling_rounds", 0) and per_process % s.group_size:
        p.append(
            f"sample.dynamic_sampling_rounds={s.dynamic_sampling_rounds} keeps or drops whole groups per process: "
            f"samples per process ({per_process}) must be a multiple of sample.group_size={s.group_size}"
        )
    w = s.sde_window_size
    if w < 0 or w > s.num_steps:
        p.append(f"sample.sde_window_size={w} must be in [0, sample.num_steps={s.num_steps}]")
    elif w and s.sde_window_range is not None:
        lo, hi = s.sde_window_range
        if not 0 <= lo <= hi <= s.num_steps - w:
            p.append(
                f"sample.sde_window_range={tuple(s.sde_window_range)} must satisfy 0 ≤ lo ≤ hi ≤ num_steps − "
                f"sde_window_size = {s.num_steps - w}, so the window stays inside the schedule"
            )
    if s.eval_num_steps < 1:
        p.append(f"sample.eval_num_steps={s.eval_num_steps} must be ≥ 1")


def _optimizer(p: list[str], config) -> None:
    _choice(p, "train.optimizer", config.train.get("optimizer", "adamw"), ("adamw", "sgd"))
    if not 0.0 <= config.train.get("sgd_momentum", 0.0) < 1.0:
        p.append(f"train.sgd_momentum={config.train.sgd_momentum} must be in [0, 1)")


def _probe(p: list[str], config) -> None:
    for name in ("freq", "prompts", "group_size"):
        _positive(p, f"probe.{name}", config.probe[name], allow_zero=name == "freq")


def _evaluation(p: list[str], config) -> None:
    """The held-out evaluation's sizes and scorers, and reward.sources that nothing names."""
    ev = config.eval
    for name in ("freq", "limit", "per_group"):
        if ev[name] < 0:
            p.append(f"eval.{name}={ev[name]} must be ≥ 0 (0 = {'never' if name == 'freq' else 'off'})")
    if ev.per_prompt < 1:
        p.append(f"eval.per_prompt={ev.per_prompt} must be ≥ 1")
    if ev.per_group and not ev.group_by:
        p.append(f"eval.per_group={ev.per_group} needs eval.group_by (the row field to balance, e.g. 'task')")
    if ev.freq and ev.reward:
        names = scorer_names(ev.reward)
        for name in names:
            if name not in config.reward.sources and ":" in name:
                p.append(f"eval.reward={name!r}: give a file reward an alias in reward.sources and name the alias")
        try:
            scorer_kwargs(names, ev.reward_kwargs)
        except ValueError as exc:
            p.append(str(exc))
        if "train" in names:
            p.append("eval.reward: 'train' is the training reward's own name in the evaluation; name another scorer")
    used = set(config.reward.fns) | (set(scorer_names(ev.reward)) if ev.freq else set())
    unused = sorted(set(config.reward.sources) - used)
    if unused:
        p.append(
            f"reward.sources has entries {unused} that neither reward.fns nor eval.reward names: add them there, "
            "or remove them"
        )


#: deprecated field -> (its replacement, what the old field still does this release)
DEPRECATED = {
    "sample.sde_type": ("sample.kernel", "still read this release, the same names: flow_grpo | dance | cps"),
    "sample.eta": (
        "sample.noise_level",
        "read this release as the noise level of the ddim / ddpm kernels only; flow-matching models ignore it",
    ),
}


def deprecations(config) -> list[str]:
    """One line per deprecated field the config sets, saying what it still does (docs/migration.md)."""
    lines = []
    for field, (new, meaning) in DEPRECATED.items():
        section, key = field.split(".")
        value = config[section].get(key)
        if value is not None:
            lines.append(f"deprecated: {field}={value!r} is {meaning}; use {new} (docs/migration.md)")
    return lines


def _check_run_name(problems, config) -> None:
    """run_name is one directory name: the run stays inside logdir."""
    name = str(config.run_name)
    if name and (name in (".", "..") or "/" in name or "\\" in name or os.path.isabs(name)):
        problems.append(
            f"run_name={name!r} must be a plain directory name (no '/', '..' or absolute path): runs "
            f"are written to <logdir>/<run_name>; set logdir to choose where"
        )


def check_inputs(config) -> None:
    """Everything checkable on disk before any model is loaded or the run directory is created: the model,
    the checkpoint to resume, an existing run of the same name, the prompt sources and the reward names.
    Raises ConfigError listing every problem, each with its fix."""
    from ddpo_grpo import checkpoint as ckpt
    from ddpo_grpo.cli import check_model_source
    from ddpo_grpo.heldout import scorer_names
    from ddpo_grpo.metrics_log import tracker_problem
    from ddpo_grpo.prompts import load_prompts
    from ddpo_grpo.run_dir import holds_result, starts_again
    from reward_models import check_reward_spec

    p: list[str] = []
    problem = check_model_source(config.pretrained.model) if config.pretrained.model else None
    if problem:
        p.append(f"pretrained.model: {problem}")
    if config.resume_from and not starts_again(config):
        try:
            ckpt.find_checkpoint(config.resume_from)
        except (FileNotFoundError, ValueError) as exc:
            p.append(f"resume_from={config.resume_from!r}: {exc}")
    elif config.run_name and not config.resume_from:
        run = Path(config.logdir) / config.run_name
        if holds_result(run):
            held = [x for x in (ckpt.CHECKPOINTS_DIRNAME, "final") if (run / x).exists()]
            p.append(
                f"run_name={config.run_name!r}: {run} already holds a run ({', '.join(held)}); continue it with "
                f"--config.resume_from={run}, or choose another run_name (nothing was overwritten)"
            )
    sources = {"prompts.source": config.prompts.source}
    if config.eval.freq:
        sources["eval.prompts"] = config.eval.prompts or config.prompts.source
    for field, source in sources.items():
        try:
            load_prompts(source)
        except (ValueError, OSError) as exc:
            p.append(f"{field}: {exc}")
    names = {f"reward.fns[{n!r}]": config.reward.sources.get(n, n) for n in config.reward.fns}
    if config.eval.freq and config.eval.reward:
        for name in scorer_names(config.eval.reward):
            names[f"eval.reward ({name})"] = config.reward.sources.get(name, name)
    for field, spec in names.items():
        problem = check_reward_spec(spec)
        if problem:
            p.append(f"{field}: {problem}")
    problem = tracker_problem(config.logging.tracker)  # before the run directory: the tracker's package
    if problem:
        p.append(problem)
    if p:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(p))


def trained_steps_per_sample(config) -> int:
    """K, the number of transitions trained per sample (upper bound; CPS's final step is deterministic)."""
    s = config.sample
    stochastic = s.sde_window_size or s.num_steps
    return math.ceil(config.train.timestep_fraction * stochastic)
