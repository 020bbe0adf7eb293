"""Group-relative advantages: turn per-sample rewards into per-sample advantages.

The advantage phase of an epoch, in order:

1. ``sample_keys``: the group of every sample (its row's prompt or ``id``; with shared initial noise, per group);
2. ``RewardAdvantages``: the rewards, weighted and aggregated (``reward.aggregation``), through one
   ``PerPromptStatTracker`` per aggregate (``stat_tracker.py``), in the mode of ``train.adv_mode``
   (``advantage_modes.py``: the notation, and each mode's centre, scale and flat flag);
3. ``group_means``, ``group_spread``: the training reward, its within-group spread and the fraction of flat groups
   per value of a row field (``eval.group_by``), for the logs.

The names of the two modules below are importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ddpo_grpo.advantage_modes import ADVANTAGE_MODES, BATCH_MODES, FLAT_RTOL, flat_groups
from ddpo_grpo.stat_tracker import PerPromptStatTracker, compute_advantages

__all__ = [
    "ADVANTAGE_MODES",
    "BATCH_MODES",
    "FLAT_RTOL",
    "PerPromptStatTracker",
    "RewardAdvantages",
    "compute_advantages",
    "group_keys",
    "group_means",
    "group_spread",
    "sample_keys",
]


def group_means(values: np.ndarray, rows: Sequence[dict], group_size: int, field: str) -> dict[str, float]:
    """``reward/<field>/<label>``: the NaN-aware mean of ``values`` [N] (group g's samples at g·size … (g+1)·size − 1)
    per value of the rows' ``field`` (e.g. the training reward per ShapesWorld task); rows without one are left out."""
    labels = [rows[i // group_size].get(field) for i in range(len(values))]
    out = {}
    for label in dict.fromkeys(x for x in labels if x is not None):
        mine = np.asarray([x == label for x in labels])
        out[f"reward/{field}/{label}"] = float(np.nanmean(values[mine]))
    return out


def group_spread(values: np.ndarray, rows: Sequence[dict], group_size: int, field: str | None) -> dict[str, float]:
    """Where an epoch's signal is (the stall diagnostics of docs/learning.md), per laid-out group of ``group_size``:
    ``reward/group_std`` the mean within-group standard deviation of ``values`` [N] (population; what a group-relative
    advantage divides by: 0 = no signal), and with ``field`` (e.g. task) ``adv/frac_flat/<label>`` the fraction of
    each label's groups whose rewards are all equal (``advantage_modes.flat_groups``)."""
    n = len(values) // group_size * group_size
    v = np.asarray(values[:n], dtype=np.float64).reshape(-1, group_size)
    stds = v.std(axis=1)
    stds = stds[np.isfinite(stds)]
    out = {"reward/group_std": float(stds.mean())} if len(stds) else {}
    if field:
        flat = flat_groups(v.reshape(-1), group_size)
        labels = [rows[g].get(field) for g in range(len(v))]
        for label in dict.fromkeys(x for x in labels if x is not None):
            out[f"adv/frac_flat/{label}"] = float(np.mean([f for f, x in zip(flat, labels) if x == label]))
    return out


def group_keys(group_prompts: Sequence[str], group_size: int, mode: str, shared_noise: bool) -> list[str]:
    """The stat tracker's key of every sample, for ``len(group_prompts)`` consecutive groups of ``group_size``.

    The key is the group's prompt, so two groups of one prompt in a batch form one larger group, except
    when the groups' members share an initial noise (``sample.share_group_noise``) and ``mode`` is a
    :data:`BATCH_MODES` mode. There each group started from its own initial noise, which the policy does
    not choose; merging them would put the reward difference between the two noises into the advantages,
    the very term shared noise removes. So each group keeps its own key (prompt + group index). The
    history modes (buffer, running) always key by prompt, since their history is per prompt.
    """
    by_slot = shared_noise and mode in BATCH_MODES
    return [f"{p}\x00{g}" if by_slot else p for g, p in enumerate(group_prompts) for _ in range(group_size)]


def sample_keys(rows: Sequence[dict], group_size: int, mode: str, shared_noise: bool) -> list[str]:
    """The stat tracker's key of every sample of an epoch laid out as ``epoch.Epoch`` lays it out (group g of
    ``rows[g]``: samples g·size … (g + 1)·size − 1): ``group_keys`` of the rows' ``id`` where they have one (rows that
    share a prompt, e.g. image-conditioned data), else of their prompt."""
    return group_keys([str(r.get("id", r["prompt"])) for r in rows], group_size, mode, shared_noise)


# --------------------------------------------------------------------------- #
# Several rewards: aggregate before or after normalisation                    #
# --------------------------------------------------------------------------- #
def _masked_update(tracker: PerPromptStatTracker, prompts: Sequence[str], rewards: np.ndarray):
    """Advantages of the non-NaN rewards (NaN = not applicable → advantage 0); (adv [N], stats)."""
    valid = ~np.isnan(rewards)  # [N]
    adv = np.zeros(len(rewards), dtype=np.float32)  # [N]
    if not valid.any():
        return adv, {"adv/frac_zero_std": float("nan"), "adv/mean": 0.0, "adv/std": 0.0}
    adv[valid], stats = tracker.update([p for p, v in zip(prompts, valid) if v], rewards[valid])
    return adv, stats


class RewardAdvantages:
    """Advantages from several weighted rewards, aggregated at one of two levels.

    - ``"reward"`` (default): the weighted sum r = Σ_i w_i·r_i (``reward_models.MultiReward.combine``, NaN terms
      skipped) through one stat tracker: A = norm(r).
    - ``"advantage"`` (MixGRPO / DanceGRPO style): each reward is normalised within its group by its own
      tracker, then weighted: A = Σ_i w_i·norm_i(r_i). Rewards on very different scales then contribute in
      proportion to their weights, not their spreads.

    The weights belong to the reward set (``MultiReward.weights``) and are applied once: by ``combine`` in
    "reward" mode, here (the ``weights`` argument) in "advantage" mode. Samples whose reward is NaN get
    advantage 0 from that reward (all NaN → 0 overall). State (per-prompt buffers, running moments)
    round-trips through state_dict().
    """

    def __init__(self, names: Sequence[str], aggregation: str = "reward", **tracker_kwargs):
        if aggregation not in ("reward", "advantage"):
            raise ValueError(f"reward.aggregation={aggregation!r} must be 'reward' or 'advantage'")
        self.aggregation = aggregation
        keys = ["__combined__"] if aggregation == "reward" else list(names)
        self.trackers = {name: PerPromptStatTracker(**tracker_kwargs) for name in keys}

    def __call__(
        self,
        keys: Sequence[str],
        per_reward: dict[str, np.ndarray],
        combined: np.ndarray,
        weights: dict[str, float],
    ) -> tuple[np.ndarray, dict]:
        """keys [N] (the samples' groups), per_reward name -> [N], combined [N] (the weighted sum), the reward
        weights -> (advantages [N], stats)."""
        if self.aggregation == "reward":
            return _masked_update(self.trackers["__combined__"], keys, np.asarray(combined, dtype=np.float64))
        total = np.zeros(len(keys), dtype=np.float64)  # [N]
        stats: dict = {}
        for name, tracker in self.trackers.items():
            adv, sub = _masked_update(tracker, keys, np.asarray(per_reward[name], dtype=np.float64))
            total += weights[name] * adv
            stats.update({f"adv/{name}/{k.split('/', 1)[1]}": v for k, v in sub.items()})
        stats["adv/frac_zero_std"] = float(np.nanmean([stats[f"adv/{n}/frac_zero_std"] for n in self.trackers]))
        stats["adv/mean"], stats["adv/std"] = float(total.mean()), float(total.std())
        return total.astype(np.float32), stats

    def state_dict(self) -> dict:
        return {name: tracker.state_dict() for name, tracker in self.trackers.items()}

    def load_state_dict(self, state: dict) -> None:
        missing = set(self.trackers) - set(state)
        if missing:
            raise ValueError(
                f"checkpoint has no advantage state for {sorted(missing)}; was it written with other "
                "reward.fns or reward.aggregation?"
            )
        for name, tracker in self.trackers.items():
            tracker.load_state_dict(state[name])
