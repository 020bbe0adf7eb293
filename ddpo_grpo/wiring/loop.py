"""The parts the epoch loop calls each epoch: the training sampler (``rollout.Sampler``) with its step plan, and
the objective's updater with the supervised term."""

from __future__ import annotations

import torch

from ddpo_grpo.wiring.trainable import Weights, fsdp_compute_dtype


def training_sampler(config, policy, autocast, reference=None, acc=None):
    """The run's ``rollout.Sampler``: sample.* (steps, guidance, the policy's noise level, the SDE window plan,
    the store dtype) bound."""
    from ddpo_grpo.memory import store_dtype
    from ddpo_grpo.rollout import Sampler

    s, d = config.sample, config.distributed
    if policy.sample_kind == "text":
        import functools

        from ddpo_grpo import sharding
        from ddpo_grpo.token_rollout import TokenSampler

        kl_reward = (reference, config.train.beta) if config.train.kl_in_reward else None
        gathered_by = None
        if d.gather_for_sampling and gather_fits(config, policy):
            plain = fsdp_compute_dtype(config) is None
            gathered_by = functools.partial(
                sharding.gathered, policy.denoiser, reshard_after_forward=d.reshard_after_forward, plain=plain
            )
        running = None
        if acc is not None and any(sharding.is_sharded(p) for p in policy.denoiser.parameters()):
            from ddpo_grpo import distributed

            # every process draws until the last one is done: the same number of (collective) forwards everywhere
            running = lambda alive: distributed.reduce(acc, float(alive.any()), "max") > 0  # noqa: E731
        return TokenSampler(policy, autocast=autocast, kl_reward=kl_reward, gathered_by=gathered_by, running=running)
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
    if policy.sample_kind == "text":
        from ddpo_grpo.token_updates import TokenUpdate

        update = TokenUpdate(
            ctx, config.sample.max_response_length, config.train.clip_range_high, kl_loss=not config.train.kl_in_reward
        )
        return update, supervised
    return make_update(ctx), supervised
