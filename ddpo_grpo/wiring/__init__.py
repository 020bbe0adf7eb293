"""Setting a run up: every part the epoch loop uses, built once from the config by ``build_run``.

The order refuses bad input before anything is written: the config's fields and cross-field constraints
(``config_checks``), files on disk, the rewards, the prompt sources, the model and its policy adapter (kernel,
noise level, resolution) — and only then the run directory. ``build_run`` calls one small builder per part, each
in the module named for what it builds:

    process.py    check_config(config)                the fields, the constraints, the files (the derived totals)
                  accelerator(config, given)          the accelerate.Accelerator (CPU processes with gloo when no
                                                      GPU), the host-side process group, the fp16 loss scale
    data.py       build_rewards(config)               the training reward (``reward.fns``) and the evaluation reward
                  build_prompts(config)               the prompt rows and the epoch's prompt sampler
                  fit_rewards(config, policy, ...)    the rewards as the family's samples need them (videos: frame-wise)
                  build_tracker(config, reward)       the advantages of train.adv_mode over the rewards
    model.py      build_policy_for(config, acc)       the pipeline (or the tiny one) and its policy adapter
    trainable.py  build_weights(config, policy, acc)  trainable weights, EMA, lagging sampler, reference
                  prepare(config, acc, policy, ...)   the model to differentiate (DDP or FSDP) and the optimizer
    loop.py       training_sampler(config, ...)       the sampler that records the rollouts
                  build_update(...)                   the objective's updater and the supervised term
    reporting.py  build_hooks(config, ...)            evaluation, paired probe, run report
                  metrics_logger(config, ...)         metrics.jsonl and the tracker

Every builder's name is importable from here (``from ddpo_grpo.wiring import build_weights``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ddpo_grpo.wiring.data import build_prompts, build_rewards, build_tracker, fit_rewards, reward_pool
from ddpo_grpo.wiring.loop import build_update, gather_fits, step_plan, training_sampler
from ddpo_grpo.wiring.model import build_policy_for, check_rows, empty_denoisers, load_dtypes, model_path
from ddpo_grpo.wiring.process import accelerator, check_config, loss_scaling, main_print, sharded
from ddpo_grpo.wiring.reporting import build_hooks, metrics_logger
from ddpo_grpo.wiring.trainable import Weights, build_weights, fsdp_compute_dtype, init_from, prepare, scale_out


@dataclass
class Parts:
    """Every part of a run, as ``build_run`` made it: the trainer's attributes."""

    totals: dict  # the derived totals of config/base.py's batch arithmetic (images_per_epoch, samples_per_process, …)
    acc: object  # the accelerate.Accelerator
    reward: object  # reward_models.MultiReward, the training reward (reward.fns), as the family's samples need it
    scorers: dict | None  # the held-out scorers (eval.reward): name -> reward fn; None without eval.freq
    rows: list  # the rows of prompts.source
    prompt_sampler: object  # prompts.PromptSampler: the epoch's prompt groups
    policy: object  # the policy adapter of the loaded pipeline
    model_path: str  # pretrained.model, or the tiny pipeline's directory
    run_dir: Path  # <logdir>/<run_name>
    weights: Weights  # the trainable weights and the EMA, lagging sampler and reference (each None when off)
    params: dict  # weights.params: name -> trainable parameter
    ema: object | None  # weights.ema
    sampler: object | None  # weights.sampler (the lagging sampling policy)
    reference: object | None  # weights.reference
    model: torch.nn.Module  # the denoiser to differentiate (DDP-wrapped, or FSDP-sharded)
    optimizer: torch.optim.Optimizer
    guard: object  # guard.FiniteGuard (train.max_consecutive_skips)
    degenerate: object  # guard.DegenerateEpochs (train.max_degenerate_epochs)
    step: object  # optim.OptimizerStep
    tracker: object  # advantages.RewardAdvantages (train.adv_mode, reward.aggregation)
    rollout: object  # rollout.Sampler: the training sampler
    loop: object  # inner_loop.LoopSettings
    encoders: list  # sample.offload_encoders: the conditioning encoders kept off the device ([] otherwise)
    decoder: list  # sample.offload_encoders: the VAE kept off the device ([] otherwise)
    update: object  # the objective's updater (updates.make_update)
    supervised: object | None  # supervised.SupervisedTerm (train.sup_weight > 0)
    hooks: object  # hooks.RunHooks: evaluation, paired probe, run report
    reward_pool: object | None  # the reward threads (reward.num_workers > 0)
    sharded: bool  # the denoiser is sharded over the processes (FSDP with more than one)
    state: object  # checkpoint.RunState: save, resume, export
    resumed: bool  # resume_from named a run that saved a checkpoint, now loaded
    start_epoch: int  # the first epoch to run (0, or the one after the resumed checkpoint)
    logger: object  # metrics_log.MetricsLogger


def build_run(config, given=None) -> Parts:
    """Every part of the run of ``config``, in the order of the module docstring; ``given`` an Accelerator to use."""
    from ddpo_grpo.checkpoint import RunState
    from ddpo_grpo.guard import DegenerateEpochs, FiniteGuard
    from ddpo_grpo.inner_loop import LoopSettings
    from ddpo_grpo.memory import offloaded
    from ddpo_grpo.optim import OptimizerStep
    from ddpo_grpo.run_dir import prepare_run_dir, starts_again

    totals = check_config(config)  # before any model is loaded and anything written
    acc = accelerator(config, given)
    log = main_print(acc)
    reward, scorers = build_rewards(config)  # before the seed: draws nothing the run uses
    rows, prompt_sampler = build_prompts(config)
    torch.manual_seed(config.seed)
    policy, path = build_policy_for(config, acc)
    check_rows(policy, rows)
    reward, scorers = fit_rewards(config, policy, reward, scorers)
    resumed = bool(config.resume_from) and not starts_again(config)  # a run that saved nothing starts again
    run_dir = prepare_run_dir(config, acc, log=log)  # the first thing written
    w = build_weights(config, policy, acc)
    model, optimizer = prepare(config, acc, policy, w.params)
    guard, t = FiniteGuard(config.train.max_consecutive_skips), config.train
    step = OptimizerStep(optimizer, w.params, acc, guard, t, ema=w.ema)
    tracker = build_tracker(config, reward)
    rollout = training_sampler(config, policy, acc.autocast, w.reference, acc)
    encoders, decoder = offloaded(policy) if config.sample.offload_encoders else ([], [])
    update, supervised = build_update(config, policy, model, acc, w, acc.autocast)
    hooks = build_hooks(
        config,
        run_dir,
        acc,
        policy,
        scorers=scorers,
        reward=reward,
        rows=rows,
        prompt_sampler=prompt_sampler,
        ema=w.ema,
        probe_sample=lambda rows, seeds, gen, rng: rollout(rows, seeds, gen, rng).reward_samples(),
        frozen=encoders + decoder,
    )
    state = RunState(run_dir, config, w, optimizer, step, tracker, model=model, sharded=sharded(config, acc))
    start_epoch = state.resume(config.resume_from, log=log) if resumed else 0
    return Parts(
        totals=totals, acc=acc, reward=reward, scorers=scorers, rows=rows, prompt_sampler=prompt_sampler,
        policy=policy, model_path=path, run_dir=run_dir,
        weights=w, params=w.params, ema=w.ema, sampler=w.sampler, reference=w.reference,
        model=model, optimizer=optimizer, guard=guard, degenerate=DegenerateEpochs(t.max_degenerate_epochs), step=step,
        tracker=tracker, rollout=rollout, loop=LoopSettings.from_config(config), encoders=encoders, decoder=decoder,
        update=update, supervised=supervised, hooks=hooks, reward_pool=reward_pool(config),
        sharded=sharded(config, acc), state=state, resumed=resumed, start_epoch=start_epoch,
        logger=metrics_logger(config, run_dir, acc, start_epoch if resumed else None, log),
    )  # fmt: skip


__all__ = [
    "Parts",
    "Weights",
    "accelerator",
    "build_hooks",
    "build_policy_for",
    "build_prompts",
    "build_rewards",
    "build_run",
    "build_tracker",
    "build_update",
    "build_weights",
    "check_config",
    "check_rows",
    "empty_denoisers",
    "fit_rewards",
    "fsdp_compute_dtype",
    "gather_fits",
    "init_from",
    "load_dtypes",
    "loss_scaling",
    "main_print",
    "metrics_logger",
    "model_path",
    "prepare",
    "reward_pool",
    "scale_out",
    "sharded",
    "step_plan",
    "training_sampler",
]
