"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2): train on groups that carry a signal, sampling more until there are
enough (``sample.dynamic_sampling_rounds``).

Why. A group whose rewards are all equal (all pass, all fail, one partial score) has zero group-relative advantage
for every member: it teaches GRPO nothing and, for the forward objectives, only pulls the model towards the sampling
policy (the "nft" loss of r = ½ has gradient 2β²(v_θ − v_old), ``losses.py``). As a model improves, more groups of
the easy prompts become all-pass and the epoch's signal shrinks; ``adv/frac_zero_std`` measures it.

What. Each process keeps its own share of S groups per epoch (``samples_per_process / group_size``; a group never
spans processes in this mode, ``config_checks``). Round 0 is the epoch as without dynamic sampling. A process whose
round-0 groups hold fewer than S groups with spread asks for another round; every process then samples one more
round of the epoch's size (new prompts drawn for the round, new noise), so the processes stay in step (the decision is
an all-reduce of "short" flags), up to R = ``sample.dynamic_sampling_rounds`` extra rounds. Each process then trains
exactly S groups: its groups with spread in sampling order, topped up with flat groups (in sampling order) when R
rounds did not find S. Every process trains the same number of samples, so the update phase is unchanged. DAPO
itself keeps sampling without a bound and trains the first full batch; the bound R and the top-up keep an epoch's
cost bounded on a model that rarely succeeds.

Cost. Generated images per epoch = (1 + rounds run) × images_per_epoch (``sample/images``); the learning benchmark
compares at equal generated images.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from ddpo_grpo import distributed
from ddpo_grpo.advantage_modes import flat_groups
from ddpo_grpo.epoch import Epoch

__all__ = ["merged_epoch", "pick_groups", "round_seed_parts", "sample_rounds"]

#: a constant in the seeds of the extra rounds (round 0 keeps the seeds of an epoch without dynamic sampling)
ROUND_TAG = 0xDA90


def round_seed_parts(round_index: int) -> tuple[int, ...]:
    """The parts appended to a seed's parts in extra round ``round_index`` (none in round 0)."""
    return () if round_index == 0 else (ROUND_TAG, round_index)


def pick_groups(flat_per_round: list[np.ndarray], share: int) -> list[tuple[int, int]]:
    """The ``share`` groups a process trains, as (round, group of that round's local groups): the groups with spread
    in sampling order, then flat ones in sampling order while fewer than ``share``."""
    order = [(r, g) for r, flat in enumerate(flat_per_round) for g in range(len(flat))]
    flags = [bool(flat_per_round[r][g]) for r, g in order]
    informative = [k for k, f in zip(order, flags) if not f]
    return (informative + [k for k, f in zip(order, flags) if f])[:share]


def merged_epoch(
    rounds: list[tuple[Epoch, dict[str, np.ndarray]]],
    picked: list[tuple[int, int]],
    global_picked: np.ndarray,
    group_size: int,
    rank: int,
    cat,
) -> tuple[Epoch, dict[str, np.ndarray]]:
    """The epoch the later phases see: ``rounds`` (each an Epoch with this process's rollout and its scores) reduced
    to this process's ``picked`` groups, laid out as an ordinary epoch whose global rows are every process's picks
    (``global_picked`` [P·S, 2]: (round, global group index) rows in process order), process r holding groups
    r·S … (r + 1)·S − 1; ``cat`` joins rollouts (the sampler's)."""
    first, share = rounds[0][0], len(picked)
    rows = [rounds[int(r)][0].rows[int(g)] for r, g in global_picked]
    rollouts, scores = [], {name: [] for name in rounds[0][1]}
    for r, local in picked:
        ep, sc = rounds[r]
        index = np.arange(local * group_size, (local + 1) * group_size)
        rollouts.append(ep.rollout.select(index))
        for name, values in sc.items():
            scores[name].append(np.asarray(values)[index])
    items = [(rank * share + i, m) for i in range(share) for m in range(group_size)]
    merged = dataclasses.replace(first, rows=rows, items=items, rollout=cat(rollouts), pending=[])
    return merged, {name: np.concatenate(parts) for name, parts in scores.items()}


def sample_rounds(
    sample_round: Callable[[int], tuple[Epoch, dict[str, np.ndarray], dict]],
    combine: Callable[[dict[str, np.ndarray]], np.ndarray],
    *,
    max_extra: int,
    share: int,
    group_size: int,
    images_per_round: int,
    acc,
    cat,
) -> tuple[Epoch, dict[str, np.ndarray], dict, dict]:
    """The module docstring's rounds: ``sample_round(r)`` samples and scores round r (this process's Epoch, its
    scores per reward, its timing); ``combine`` weights the scores into the reward whose spread counts. Returns the
    merged epoch, its scores, the summed timing and the sample/* metrics. Every process runs the same rounds."""
    ep, scores, timing = sample_round(0)
    rounds, flat = [(ep, scores)], [flat_groups(combine(scores), group_size)]
    while len(rounds) <= max_extra:
        short = sum(int((~f).sum()) for f in flat) < share
        if not distributed.any_process(torch.tensor([short], device=acc.device)).item():  # where NCCL maps it
            break
        ep, scores, more = sample_round(len(rounds))
        rounds.append((ep, scores))
        flat.append(flat_groups(combine(scores), group_size))
        for key, value in more.items():
            timing[key] = timing.get(key, 0.0) + value
    picked = pick_groups(flat, share)
    first = [r_ep.items[0][0] for r_ep, _ in rounds]  # this process's first global group in each round
    mine = np.asarray([(r, first[r] + g) for r, g in picked], dtype=np.int64).reshape(-1, 2)
    every = distributed.gather(acc, mine).reshape(-1, 2)  # (float32: exact for indices below 2**24)
    merged, merged_scores = merged_epoch(rounds, picked, every, group_size, acc.process_index, cat)
    metrics = {
        "sample/images": images_per_round * len(rounds),
        "sample/rounds": float(len(rounds)),
        "sample/frac_flat_sampled": distributed.reduce(acc, float(np.concatenate(flat).mean()), "mean"),
        "sample/frac_flat_trained": distributed.reduce(acc, float(np.mean([flat[r][g] for r, g in picked])), "mean"),
    }
    return merged, merged_scores, timing, metrics
