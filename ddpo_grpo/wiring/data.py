"""What a run learns from: the prompt rows and their sampler, the rewards, the advantage tracker over them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from foundation.errors import ConfigError, RewardError


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
        std_rule=t.adv_std_rule,
    )


def reward_pool(config):
    """The threads that score a batch while the next is sampled (reward.num_workers > 0), or None."""
    workers = config.reward.num_workers
    return ThreadPoolExecutor(workers, thread_name_prefix="reward") if workers > 0 else None
