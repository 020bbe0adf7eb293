"""Setting a run up: every part the epoch loop uses, built once from the config.

The order refuses bad input before anything is written: the config's fields and cross-field constraints
(``config_checks``), files on disk, the rewards, the prompt sources, the model and its policy adapter (kernel,
noise level, resolution) — and only then the run directory. Each builder below makes one part:

    accelerator(config, given)            the accelerate.Accelerator (CPU processes with gloo when no GPU), the
                                          host-side process group, the fp16 loss scale
    build_rewards(config)                 the training reward (``reward.fns``) and the evaluation reward
    build_prompts(config)                 the prompt rows and the epoch's prompt sampler
    build_policy_for(config, acc)         the pipeline (or the tiny one) and its policy adapter
    fit_rewards(config, policy, ...)      the rewards as the family's samples need them (videos: frame-wise)
    build_weights(config, policy)         trainable weights, EMA, lagging sampler, reference
    build_update(...)                     the objective's updater and the supervised term
    build_hooks(config, ...)              evaluation, paired probe, run report
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ddpo_grpo.precision import WEIGHT_DTYPES
from foundation.errors import ConfigError, RewardError


def check_config(config) -> dict:
    """Every field and constraint, then everything on disk (before any model is loaded or anything written); the
    deprecated fields' lines; return the derived totals (config/base.py's batch arithmetic)."""
    from ddpo_grpo import distributed
    from ddpo_grpo.config_checks import check_inputs, deprecations, validate

    totals = validate(config, distributed.world_size())
    check_inputs(config)
    if distributed.rank() == 0:
        for line in deprecations(config):
            print(line, flush=True)
    return totals


def accelerator(config, given=None):
    """``given`` or a new Accelerator; on a machine without GPUs, several processes run on CPU (gloo). The host-side
    process group is made here (``distributed.setup``), and under ``mixed_precision="fp16"`` the loss scale."""
    from accelerate import Accelerator

    from ddpo_grpo import distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    cpu = world > 1 and not torch.cuda.is_available()
    acc = given or Accelerator(mixed_precision=config.mixed_precision, cpu=cpu)
    if acc.num_processes != world:
        raise RuntimeError(
            f"launched as {world} processes (WORLD_SIZE) but accelerate set up {acc.num_processes}; "
            "on CPU-only machines launch with ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu ..."
        )
    distributed.setup()  # every process is here: the gloo group beside NCCL, when there is one
    if config.mixed_precision == "fp16":
        loss_scaling(acc)
    if config.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
    return acc


def loss_scaling(acc) -> None:
    """fp16: the one loss-scaling path, a ``torch.amp.GradScaler`` in ``acc.scaler`` (accelerate's own on GPUs).

    accelerate's ``backward`` multiplies the loss by its scale; ``optim.OptimizerStep`` does all the rest (unscale
    before the norm, the clip and the log, skip and halve on overflow, grow, state saved with the run) — so the
    optimizer is never handed to accelerate (``prepare``), which would step and update the scaler itself. On CPU
    accelerate neither autocasts nor scales under fp16 (its ``native_amp`` stays off and fp16 weights then meet
    float32 inputs); here it autocasts to float16 (``torch.autocast("cpu", float16)``) with a GradScaler, so CPU
    processes run the GPU's fp16 path."""
    if acc.device.type == "cpu":
        acc.native_amp = True
    if acc.scaler is None:
        acc.scaler = torch.amp.GradScaler(acc.device.type)


def build_rewards(config):
    """(training reward, the held-out scorers: name -> reward fn, or None); RewardError naming the reward when one
    cannot be built.

    The scorers (with eval.freq) are eval.reward's names (names or aliases of reward.sources) with
    eval.reward_kwargs; "" = the first training reward with its reward.kwargs (ddpo_grpo/heldout.py)."""
    from ddpo_grpo.heldout import scorer_kwargs, scorer_names
    from reward_models import build_reward, load_reward

    r, e = config.reward, config.eval
    try:
        sources = {k: v for k, v in r.sources.items() if k in r.fns}  # (the others are eval.reward's aliases)
        reward = build_reward(dict(r.fns), {k: dict(v) for k, v in r.kwargs.items()}, sources)
        evaluation = None
        if e.freq:
            names = scorer_names(e.reward) or [next(iter(r.fns))]
            kwargs = scorer_kwargs(names, e.reward_kwargs) if e.reward else {names[0]: dict(r.kwargs.get(names[0], {}))}
            evaluation = {n: load_reward(r.sources.get(n, n), **kwargs[n]) for n in names}
    except RewardError:
        raise
    except (ValueError, TypeError, RuntimeError, OSError) as exc:
        raise RewardError(f"building the rewards failed: {exc}") from exc
    return reward, evaluation


def fit_rewards(config, policy, reward, scorers):
    """(training reward, scorers) as they must be called on ``policy``'s samples: refused in one line (ConfigError)
    when a reward cannot score what the family samples; image rewards wrapped frame-wise (``reward.frame_reduction``)
    for a video family (reward_models/video.py)."""
    from reward_models import MultiReward, check_kinds, for_sample_kind

    kind, family = policy.sample_kind, type(policy).__name__
    try:
        check_kinds({n: f for n, _, f in reward.entries}, kind, family)
        check_kinds(scorers or {}, kind, family)
        rule = config.reward.frame_reduction
        reward = MultiReward([(n, w, for_sample_kind(f, kind, rule)) for n, w, f in reward.entries])
        scorers = {n: for_sample_kind(f, kind, rule) for n, f in scorers.items()} if scorers else scorers
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return reward, scorers


def build_prompts(config):
    """(rows of prompts.source, their PromptSampler)."""
    from ddpo_grpo.prompts import PromptSampler, load_prompts

    rows = load_prompts(config.prompts.source)
    try:
        return rows, PromptSampler(rows, seed=config.seed, stratify_by=config.prompts.stratify_by)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


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
        with torch.random.fork_rng(devices=[]):  # its own RNG: building it leaves the run's random state alone
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
    if not trained:
        _main_print(acc)(
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
            _main_print(acc)(
                f"sharded loading: {name} ({cls_name}) is not a diffusers model with safetensors "
                "weights; every process loads it whole before it is sharded"
            )
        else:
            built[name] = empty
    return built


@dataclass
class Weights:
    """The trainable weights and the other values of them a run keeps (each None when not configured)."""

    params: dict  # name -> trainable parameter (LoRA factors, or the whole denoiser), float32
    ema: object | None  # weights.EMA (train.ema)
    sampler: object | None  # weights.LaggingSampler (train.sampler_decay_rate > 0)
    reference: object | None  # reference.Reference (train.beta > 0)


def build_weights(config, policy, acc) -> Weights:
    """Put the model on the device (frozen parts in the mixed-precision dtype), attach LoRA or unfreeze the
    denoiser, load pretrained.init_from; make the EMA, lagging sampler and reference the config asks for.

    A denoiser built empty (``empty_denoisers``: FSDP) is LoRA-wrapped, checkpointed and sharded while empty, then
    each process reads its own shards (``sharded_loading.materialize``), and init_from comes after."""
    from ddpo_grpo import sharded_loading
    from ddpo_grpo.reference import Reference
    from ddpo_grpo.weights import EMA, LaggingSampler, trainable_parameters

    t = config.train
    weight_dtype = WEIGHT_DTYPES[config.mixed_precision]
    denoiser = policy.denoiser
    empty = sharded_loading.is_empty(denoiser)
    if empty:  # the frozen parts only: FSDP puts the denoiser's shards on the device
        for module in policy.frozen_modules():
            module.to(acc.device)
    else:
        policy.pipeline.to(acc.device)
    for module in policy.frozen_modules():
        module.requires_grad_(False)
        module.eval()
        dtype = policy.frozen_dtype(module, weight_dtype)  # the VAE's: sample.vae_dtype ("auto": the checkpoint's)
        if dtype != torch.float32 or weight_dtype != torch.float32:
            module.to(dtype=dtype)
        if config.sample.offload_encoders:  # on the device only while they run (memory.resident)
            module.to("cpu")
    if t.use_lora:
        if weight_dtype != torch.float32:
            denoiser.to(dtype=weight_dtype)
        with sharded_loading.cpu_stand_ins(denoiser) if empty else contextlib.nullcontext():
            policy.add_lora(
                rank=t.lora_rank, alpha=t.lora_alpha, target_modules=t.lora_target_modules, dropout=t.lora_dropout
            )
    else:
        denoiser.requires_grad_(True)
    if config.pretrained.init_from and not empty:
        init_from(config, denoiser, log=_main_print(acc))
    for p in trainable_parameters(denoiser).values():
        p.data = p.data.float()  # trainable weights (and their optimizer state) in float32
    scale_out(config, policy, acc)
    if empty:
        sharded_loading.materialize(denoiser, "cpu" if config.distributed.cpu_offload else acc.device)
        if config.pretrained.init_from:
            init_from(config, denoiser, log=_main_print(acc))
    params = trainable_parameters(denoiser)  # (FSDP's sharded parameters when sharded)
    ema = EMA(params, t.ema_decay) if t.ema else None
    sampler = None  # the forward objectives' lagging sampling policy (train.sampler_decay_*)
    if t.sampler_decay_rate > 0:
        sampler = LaggingSampler(
            params, rate=t.sampler_decay_rate, max_decay=t.sampler_decay_max, flat=t.sampler_decay_flat
        )
    reference = None
    if t.beta > 0:
        reference = Reference(
            policy,
            denoiser,
            lora=t.use_lora,
            update=t.reference_update,
            freq=t.reference_update_freq,
            alpha=t.reference_mix_alpha,
        )
    return Weights(params, ema, sampler, reference)


def sharded(config, acc) -> bool:
    """True when the run shards the denoiser: distributed.strategy "fsdp" with more than one process."""
    return config.distributed.strategy == "fsdp" and acc.num_processes > 1


def scale_out(config, policy, acc) -> None:
    """Gradient checkpointing of the denoiser's blocks (train.gradient_checkpointing), then FSDP2 sharding
    (distributed.strategy "fsdp"; with one process there is nothing to shard and the run says so)."""
    from ddpo_grpo import sharding

    d = config.distributed
    if not (config.train.gradient_checkpointing or d.strategy == "fsdp"):
        return
    names = sharding.block_names(policy, d.shard_blocks)
    if config.train.gradient_checkpointing:
        sharding.checkpoint_blocks(policy.denoiser, names)
    if d.strategy != "fsdp":
        return
    if not sharded(config, acc):
        _main_print(acc)("distributed.strategy='fsdp' with one process: nothing to shard, the model stays whole")
        return
    sharding.shard(
        policy.denoiser,
        names,
        reshard_after_forward=d.reshard_after_forward,
        cpu_offload=d.cpu_offload,
        mixed_precision=fsdp_compute_dtype(config),
    )


def fsdp_compute_dtype(config):
    """The dtype FSDP gathers the parameters in and casts every unit's inputs to (its mixed-precision policy):
    bfloat16 under mixed_precision "bf16" on GPUs, else None (the parameters' own)."""
    return torch.bfloat16 if config.mixed_precision == "bf16" and torch.cuda.is_available() else None


def prepare(config, acc, policy, params):
    """(the model to differentiate, the optimizer): accelerate's DDP wrapping, or the FSDP-sharded denoiser itself.
    The optimizer stays ours under both strategies (``optim.OptimizerStep`` steps it, with the loss scale)."""
    from ddpo_grpo.optim import build_optimizer

    optimizer = build_optimizer(params, config.train)
    if sharded(config, acc):
        return policy.denoiser, optimizer
    return acc.prepare(policy.denoiser), optimizer


def init_from(config, denoiser, log=print) -> None:
    """Start from a checkpoint's trainable weights (another run's, e.g. of a supervised warm-up), reporting
    missing and unexpected keys; a mismatch is refused unless pretrained.init_strict is False."""
    from ddpo_grpo import checkpoint as ckpt
    from ddpo_grpo import sharding

    loaded = ckpt.load_latest(config.pretrained.init_from, log=log)
    try:
        report = ckpt.load_state_dict_checked(
            denoiser,
            sharding.sharded_like(denoiser, loaded["tensors"]["model"]),
            strict=config.pretrained.init_strict,
            source=f"pretrained.init_from checkpoint {loaded['path']}",
        )
    except ValueError as exc:
        raise ConfigError(f"{exc} (set pretrained.init_strict=False)") from exc
    log(
        f"initialised from {loaded['path']}: {len(report['loaded'])} tensors loaded, {len(report['missing'])} "
        f"missing, {len(report['unexpected'])} unexpected, {len(report['mismatched'])} of another shape"
    )


def build_tracker(config, reward):
    """The advantage computation of train.adv_mode over the reward set's rewards (reward.aggregation)."""
    from ddpo_grpo.advantages import RewardAdvantages

    t = config.train
    return RewardAdvantages(
        reward.names,
        config.reward.aggregation,
        mode=t.adv_mode,
        buffer_size=t.adv_buffer_size,
        min_count=t.adv_min_count,
        ema_decay=t.adv_ema_decay,
        clip=t.adv_clip_max if t.adv_clip_max > 0 else None,
    )


def training_sampler(config, policy, autocast):
    """The run's ``rollout.Sampler``: sample.* (steps, guidance, the policy's noise level, the SDE window plan,
    the store dtype) bound."""
    from ddpo_grpo.memory import store_dtype
    from ddpo_grpo.rollout import Sampler

    s, d = config.sample, config.distributed
    return Sampler(
        policy,
        num_steps=s.num_steps,
        guidance_scale=s.guidance_scale,
        noise_level=policy.noise_level,
        plan=step_plan(config),
        negative_prompt=s.negative_prompt,
        autocast=autocast,
        store_dtype=store_dtype(s.store_dtype),
        gather=d.gather_for_sampling and gather_fits(config, policy),
        reshard_after_forward=d.reshard_after_forward,
        plain=fsdp_compute_dtype(config) is None,  # (FSDP casts no inputs: its hooks can be set aside)
    )


def gather_fits(config, policy) -> bool:
    """Whether a sharded denoiser, all-gathered whole, fits the device's free memory (distributed.gather_for_sampling;
    on CPU, True). When it does not, sampling gathers block by block, and the run says so."""
    from ddpo_grpo import distributed, sharding

    device = policy.device
    if device.type != "cuda" or not any(sharding.is_sharded(p) for p in policy.denoiser.parameters()):
        return True
    need = sharding.unsharded_bytes(policy.denoiser, fsdp_compute_dtype(config))
    free = torch.cuda.mem_get_info(device)[0]
    if need <= free:
        return True
    if distributed.rank() == 0:
        print(
            f"distributed.gather_for_sampling: the whole denoiser ({need / 2**30:.1f} GiB) does not fit the "
            f"{free / 2**30:.1f} GiB free; sampling gathers it block by block at every step",
            flush=True,
        )
    return False


def step_plan(config):
    """Which sampling steps are stochastic and trained (rollout.StepPlan)."""
    from ddpo_grpo.rollout import StepPlan

    s, t = config.sample, config.train
    return StepPlan(
        window_size=s.sde_window_size,
        window_range=tuple(s.sde_window_range) if s.sde_window_range is not None else None,
        fraction=t.timestep_fraction,
        selection=t.timestep_selection,
    )


def build_update(config, policy, model, acc, weights: Weights, autocast):
    """(the updater of train.objective, the supervised term or None); ``model`` is the wrapped denoiser."""
    from ddpo_grpo.supervised import SupervisedSettings, SupervisedTerm
    from ddpo_grpo.updates import UpdateContext, UpdateSettings, make_update

    settings = UpdateSettings.from_config(config)
    ctx = UpdateContext(
        settings, policy, model, acc, weights.params, weights.reference, autocast, acc.process_index, weights.sampler
    )
    supervised = SupervisedTerm(ctx, SupervisedSettings.from_config(config)) if config.train.sup_weight > 0 else None
    return make_update(ctx), supervised


def build_hooks(
    config, run_dir: Path, acc, policy, *, scorers, reward, rows, prompt_sampler, ema, probe_sample, frozen
):
    """The ``hooks.RunHooks`` of the run: held-out evaluation (eval.freq), paired probe (probe.freq), run report."""
    from ddpo_grpo.heldout import HeldOut
    from ddpo_grpo.hooks import RunHooks
    from ddpo_grpo.probe import PairedProbe
    from ddpo_grpo.prompts import split_rows
    from ddpo_grpo.report import RunReport

    def training(samples, prompts, metadata):  # the training reward as a reward fn of the contract
        return reward.combine(reward(samples, prompts, metadata)[0]), {}

    evaluator = None
    if config.eval.freq:
        evaluator = HeldOut(config, scorers, training, reward.names, run_dir, write=acc.is_main_process)
    p = config.probe
    probe = None
    if p.freq:
        probe = PairedProbe(run_dir, prompt_sampler, num_prompts=p.prompts, group_size=p.group_size, seed=config.seed)
    report_rows = evaluator.rows if evaluator is not None else rows
    report = RunReport(
        run_dir,
        [report_rows[i % len(report_rows)] for i in range(config.logging.num_images)],
        policy.preview,
        group_by=config.eval.group_by,
    )
    return RunHooks(
        config,
        policy,
        acc,
        evaluator=evaluator,
        probe=probe,
        report=report,
        ema=ema,
        probe_sample=probe_sample,
        probe_score=lambda samples, rows: training(samples, *split_rows(rows))[0],
        everyone=sharded(config, acc),
        frozen=frozen,
    )


def metrics_logger(config, run_dir: Path, acc, resume_epoch, log):
    """The run's MetricsLogger (metrics.jsonl and the tracker); rows a resumed run replays are moved aside."""
    from ddpo_grpo.metrics_log import MetricsLogger

    logger = MetricsLogger(
        str(run_dir),
        tracker=config.logging.tracker,
        project=config.logging.project,
        run_name=run_dir.name,
        config=config.to_dict(),
        enabled=acc.is_main_process,
        resume_epoch=resume_epoch,
    )
    if logger.superseded:
        log(
            f"metrics.jsonl: {logger.superseded} row(s) logged after the checkpoint (epochs this run replays) "
            "moved to metrics.superseded.jsonl"
        )
    return logger


def _main_print(acc):
    return lambda line: print(line, flush=True) if acc.is_main_process else None
