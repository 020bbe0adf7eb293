"""Group-relative advantages: turn per-sample rewards into per-sample advantages.

Notation
--------
A batch holds ``N`` samples. Sample ``i`` was generated from prompt ``p_i`` and
received reward ``r_i``. The *group* of a prompt ``g`` in this batch is
``G_g = {i : p_i = g}`` with size ``n_g``. Group statistics are

    mu_g    = (1 / n_g) * sum_{i in G_g} r_i
    sigma_g = sqrt((1 / n_g) * sum_{i in G_g} (r_i - mu_g)^2)      (population, ddof = 0)

and batch statistics ``mu_batch``, ``sigma_batch`` are the same quantities over
all ``N`` rewards.

Every mode produces, per sample, a *centre* ``c_i``, a *scale* ``s_i`` and a
*flat* flag ``f_i``; the advantage is

    A_i = 0                                 if f_i
    A_i = (r_i - c_i) / max(s_i, eps)       otherwise

optionally clipped to ``[-clip, clip]`` afterwards. The flat flag marks samples
whose reference distribution has (numerically) zero spread: there ``r_i - c_i``
is zero up to rounding and dividing by ``eps`` would only amplify round-off, so
the advantage is set to exactly ``0.0`` (never NaN). A set of rewards is flat
when ``max - min <= 1e-12 * max(1, |mean|)``.

Modes (registry :data:`ADVANTAGE_MODES`)
----------------------------------------
* ``"zscore"``      GRPO (Shao et al. 2024): ``c = mu_g``, ``s = sigma_g``.
* ``"mean"``        Dr. GRPO (Liu et al. 2025): ``c = mu_g``, ``s = 1``.
* ``"global_std"``  ``c = mu_g``, ``s = sigma_batch``.
* ``"buffer"``      DDPO (Black et al. 2023) per-prompt history buffers.
* ``"running"``     ``c = mu_g``, ``s = sqrt(v_run)`` with an EMA of batch variance.

For the group modes (zscore, mean, global_std, running) ``f_i`` is the group's
flatness, so a group whose rewards are all equal -- including a single-member
group -- gets advantage exactly 0. In ``"buffer"`` mode the centre is the
history of the prompt, so ``f_i`` is the flatness of that history (or of the
batch when falling back); a group that is flat in this batch can still get a
non-zero advantage there if its history has spread. In *every* mode
``adv/frac_zero_std`` reports the fraction of this batch's groups that are flat
(single-member groups count as flat).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "ADVANTAGE_MODES",
    "BATCH_MODES",
    "FLAT_RTOL",
    "PerPromptStatTracker",
    "compute_advantages",
    "group_keys",
    "group_means",
]

#: Relative tolerance below which a set of rewards counts as having zero spread.
FLAT_RTOL = 1e-12

_STATE_VERSION = 1


def _is_flat(spread: np.ndarray | float, mean: np.ndarray | float) -> np.ndarray:
    """Zero-spread test ``spread <= FLAT_RTOL * max(1, |mean|)`` (vectorised).

    ``spread`` is the peak-to-peak range ``max - min`` of a set of rewards. A
    tolerance (rather than ``==``) makes e.g. ``[0.1 + 0.2, 0.3]`` flat.
    """
    spread = np.asarray(spread, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    return spread <= FLAT_RTOL * np.maximum(1.0, np.abs(mean))


@dataclasses.dataclass(frozen=True)
class _Groups:
    """Per-prompt grouping of one batch (groups ordered by first appearance).

    Attributes:
        keys: prompt of each group, length ``G``.
        index: group id of each sample, int array ``[N]``.
        count: group sizes ``n_g``, ``[G]``.
        mean: group means ``mu_g``, ``[G]``.
        std: population group stds ``sigma_g``, ``[G]``.
        flat: zero-spread flag per group (single-member groups are flat), ``[G]``.
    """

    keys: list
    index: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    flat: np.ndarray

    @classmethod
    def build(cls, prompts: Sequence[str], rewards: np.ndarray) -> _Groups:
        """Group ``rewards`` ([N] float64) by ``prompts`` without assuming contiguity."""
        key_to_id: dict[str, int] = {}
        index = np.fromiter(
            (key_to_id.setdefault(p, len(key_to_id)) for p in prompts), dtype=np.int64, count=len(prompts)
        )  # [N]
        num_groups = len(key_to_id)
        count = np.bincount(index, minlength=num_groups).astype(np.float64)  # [G]
        mean = np.bincount(index, weights=rewards, minlength=num_groups) / count  # [G]
        resid = rewards - mean[index]  # [N]
        std = np.sqrt(np.bincount(index, weights=resid * resid, minlength=num_groups) / count)  # [G]
        high = np.full(num_groups, -np.inf)
        low = np.full(num_groups, np.inf)
        np.maximum.at(high, index, rewards)  # [G]
        np.minimum.at(low, index, rewards)  # [G]
        flat = _is_flat(high - low, mean) | (count < 2)  # [G]
        return cls(list(key_to_id), index, count, mean, std, flat)


def _batch_stats(rewards: np.ndarray) -> tuple[float, float, bool]:
    """Return ``(mu_batch, sigma_batch, flat_batch)`` of all rewards (ddof = 0)."""
    mean = float(rewards.mean())
    return mean, float(rewards.std()), bool(_is_flat(float(np.ptp(rewards)), mean))


# --------------------------------------------------------------------------- #
# Modes: fn(tracker, rewards [N], groups) -> (centre [N], scale [N], flat [N]) #
# --------------------------------------------------------------------------- #
def _mode_zscore(tracker: PerPromptStatTracker, rewards: np.ndarray, groups: _Groups):
    """GRPO: ``A_i = (r_i - mu_g) / max(sigma_g, eps)`` with this batch's group stats."""
    g = groups.index
    return groups.mean[g], groups.std[g], groups.flat[g]


def _mode_mean(tracker: PerPromptStatTracker, rewards: np.ndarray, groups: _Groups):
    """Dr. GRPO: ``A_i = r_i - mu_g`` (centring only, no std division).

    Dividing by ``sigma_g`` up-weights prompts that are too easy or too hard
    (small spread); Liu et al. 2025 ("Understanding R1-Zero-Like Training")
    drop it to remove that question-level difficulty bias.
    """
    g = groups.index
    return groups.mean[g], np.ones_like(rewards), groups.flat[g]


def _mode_global_std(tracker: PerPromptStatTracker, rewards: np.ndarray, groups: _Groups):
    """``A_i = (r_i - mu_g) / max(sigma_batch, eps)``: group centring, batch-wide scale."""
    g = groups.index
    _, batch_std, _ = _batch_stats(rewards)
    return groups.mean[g], np.full_like(rewards, batch_std), groups.flat[g]


def _mode_buffer(tracker: PerPromptStatTracker, rewards: np.ndarray, groups: _Groups):
    """DDPO-style per-prompt history buffers that persist across ``update`` calls.

    For each prompt ``g`` the batch's rewards are first appended (in input
    order) to the deque ``B_g`` holding its last ``buffer_size`` rewards. Then

        (c, s) = (mean(B_g), std(B_g))          if |B_g| >= min_count
        (c, s) = (mu_batch, sigma_batch)         otherwise (not enough history)

    and ``A_i = (r_i - c) / max(s, eps)``; ``f_i`` is the flatness of whichever
    set of rewards supplied ``(c, s)``.
    """
    batch_mean, batch_std, batch_flat = _batch_stats(rewards)
    num_groups = len(groups.keys)
    centre_g = np.full(num_groups, batch_mean)  # [G]
    scale_g = np.full(num_groups, batch_std)  # [G]
    flat_g = np.full(num_groups, batch_flat)  # [G]
    fallback_g = np.ones(num_groups, dtype=bool)  # [G]
    for gid, key in enumerate(groups.keys):
        buf = tracker._buffers.get(key)
        if buf is None:
            buf = tracker._buffers[key] = collections.deque(maxlen=tracker.buffer_size)
        buf.extend(rewards[groups.index == gid].tolist())
        if len(buf) >= tracker.min_count:
            hist = np.asarray(buf, dtype=np.float64)
            centre_g[gid], scale_g[gid] = hist.mean(), hist.std()
            flat_g[gid] = _is_flat(np.ptp(hist), centre_g[gid])
            fallback_g[gid] = False
    tracker._last_extra["adv/frac_fallback"] = float(fallback_g[groups.index].mean())
    g = groups.index
    return centre_g[g], scale_g[g], flat_g[g]


def _mode_running(tracker: PerPromptStatTracker, rewards: np.ndarray, groups: _Groups):
    """Group centring with a running (EMA) global scale.

    With decay ``d`` the running moments are updated *before* use:

        first call:  m <- mu_batch,                       v <- sigma_batch^2
        later:       m <- d * m + (1 - d) * mu_batch,     v <- d * v + (1 - d) * sigma_batch^2

    and ``A_i = (r_i - mu_g) / max(sqrt(v), eps)``. The running mean ``m`` is
    not used for centring (group centring already removes the prompt's
    baseline); it is tracked for logging and checkpointing. A slowly moving
    scale keeps advantage magnitudes comparable across batches.
    """
    batch_mean, batch_std, _ = _batch_stats(rewards)
    d = tracker.ema_decay
    if tracker._running_mean is None:
        tracker._running_mean, tracker._running_var = batch_mean, batch_std**2
    else:
        tracker._running_mean = d * tracker._running_mean + (1.0 - d) * batch_mean
        tracker._running_var = d * tracker._running_var + (1.0 - d) * batch_std**2
    tracker._last_extra["adv/running_mean"] = float(tracker._running_mean)
    tracker._last_extra["adv/running_std"] = math.sqrt(tracker._running_var)
    g = groups.index
    return groups.mean[g], np.full_like(rewards, math.sqrt(tracker._running_var)), groups.flat[g]


#: Advantage modes: name -> fn(tracker, rewards [N], groups) -> (centre, scale, flat), each [N].
ADVANTAGE_MODES: dict[str, Callable] = {
    "zscore": _mode_zscore,
    "mean": _mode_mean,
    "global_std": _mode_global_std,
    "buffer": _mode_buffer,
    "running": _mode_running,
}


#: Modes whose groups are this batch's samples alone (no per-prompt history across batches).
BATCH_MODES = ("zscore", "mean", "global_std")


def group_means(values: np.ndarray, rows: Sequence[dict], group_size: int, field: str) -> dict[str, float]:
    """``reward/<field>/<label>``: the NaN-aware mean of ``values`` [N] (group g's samples at g·size … (g+1)·size − 1)
    per value of the rows' ``field`` (e.g. the training reward per ShapesWorld task); rows without one are left out."""
    labels = [rows[i // group_size].get(field) for i in range(len(values))]
    out = {}
    for label in dict.fromkeys(x for x in labels if x is not None):
        mine = np.asarray([x == label for x in labels])
        out[f"reward/{field}/{label}"] = float(np.nanmean(values[mine]))
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


class PerPromptStatTracker:
    """Turn rewards into group-relative advantages, grouping samples by prompt.

    Args:
        mode: key of :data:`ADVANTAGE_MODES` (see module docstring).
        buffer_size: ``"buffer"`` mode: rewards remembered per prompt (>= 1).
        min_count: ``"buffer"`` mode: history needed before a prompt's own
            statistics replace the batch statistics (1 <= min_count <= buffer_size).
        ema_decay: ``"running"`` mode: EMA decay ``d`` in ``[0, 1)``.
        eps: lower bound on the divisor, ``A = (r - c) / max(s, eps)`` (> 0).
        clip: if given (> 0), advantages are clipped to ``[-clip, clip]``
            after normalisation.

    Only ``"buffer"`` and ``"running"`` carry state across :meth:`update` calls;
    it round-trips through :meth:`state_dict` / :meth:`load_state_dict`.
    """

    def __init__(
        self,
        mode: str = "zscore",
        *,
        buffer_size: int = 64,
        min_count: int = 8,
        ema_decay: float = 0.9,
        eps: float = 1e-6,
        clip: float | None = None,
    ) -> None:
        if mode not in ADVANTAGE_MODES:
            raise ValueError(f"mode={mode!r} is not a known advantage mode; use one of {sorted(ADVANTAGE_MODES)}")
        if int(buffer_size) != buffer_size or buffer_size < 1:
            raise ValueError(f"buffer_size={buffer_size!r} must be a positive integer")
        if int(min_count) != min_count or not 1 <= min_count <= buffer_size:
            raise ValueError(
                f"min_count={min_count!r} must be an integer in [1, buffer_size={buffer_size}]; "
                "lower min_count or raise buffer_size"
            )
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError(f"ema_decay={ema_decay!r} must lie in [0, 1)")
        if not eps > 0.0:
            raise ValueError(f"eps={eps!r} must be > 0")
        if clip is not None and not clip > 0.0:
            raise ValueError(f"clip={clip!r} must be > 0 or None (no clipping)")
        self.mode = mode
        self.buffer_size = int(buffer_size)
        self.min_count = int(min_count)
        self.ema_decay = float(ema_decay)
        self.eps = float(eps)
        self.clip = None if clip is None else float(clip)
        self._buffers: dict[str, collections.deque[float]] = {}
        self._running_mean: float | None = None
        self._running_var: float | None = None
        self._num_updates = 0
        self._last_extra: dict[str, float] = {}

    # ------------------------------------------------------------------ #
    @staticmethod
    def _validate(prompts: Sequence[str], rewards) -> np.ndarray:
        """Check inputs and return rewards as float64 ``[N]``."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.ndim != 1:
            raise ValueError(f"rewards must be 1-D [N], got shape {rewards.shape}; flatten it first")
        if len(prompts) != rewards.shape[0]:
            raise ValueError(
                f"prompts has {len(prompts)} entries but rewards has {rewards.shape[0]}; pass one prompt per reward"
            )
        if rewards.shape[0] == 0:
            raise ValueError("rewards is empty; call update() with at least one sample")
        bad = np.flatnonzero(~np.isfinite(rewards))
        if bad.size:
            raise ValueError(
                f"rewards[{int(bad[0])}] = {rewards[bad[0]]} is not finite ({bad.size} non-finite in total); "
                "filter NaN/inf rewards out before computing advantages"
            )
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise ValueError(f"prompts[{i}] = {p!r} is a {type(p).__name__}; prompts must be str")
        return rewards

    def update(self, prompts: Sequence[str], rewards) -> tuple[np.ndarray, dict]:
        """Compute advantages for one batch (and update the mode's state).

        Args:
            prompts: prompt of each sample, length ``N`` (any order).
            rewards: reward of each sample, ``[N]``, finite.

        Returns:
            ``(advantages, stats)``: float32 ``[N]`` in input order, and a dict
            of python floats: ``adv/frac_zero_std`` (fraction of this batch's
            prompt groups with zero reward spread, single-member included),
            ``adv/num_groups``, ``adv/mean`` and ``adv/std`` of the returned
            advantages, ``adv/frac_clipped``, plus mode-specific entries
            (``adv/frac_fallback`` for buffer, ``adv/running_mean`` and
            ``adv/running_std`` for running).
        """
        rewards = self._validate(prompts, rewards)  # [N]
        groups = _Groups.build(prompts, rewards)
        self._last_extra = {}
        centre, scale, flat = ADVANTAGE_MODES[self.mode](self, rewards, groups)  # each [N]
        adv = (rewards - centre) / np.maximum(scale, self.eps)  # [N]
        adv = np.where(flat, 0.0, adv)  # [N]
        frac_clipped = 0.0
        if self.clip is not None:
            frac_clipped = float(np.mean(np.abs(adv) > self.clip))
            adv = np.clip(adv, -self.clip, self.clip)  # [N]
        self._num_updates += 1
        adv = adv.astype(np.float32)  # [N]
        stats = {
            "adv/frac_zero_std": float(groups.flat.mean()),
            "adv/num_groups": float(len(groups.keys)),
            "adv/mean": float(adv.mean()),
            "adv/std": float(adv.std()),
            "adv/frac_clipped": frac_clipped,
            **self._last_extra,
        }
        return adv, stats

    # ------------------------------------------------------------------ #
    def state_dict(self) -> dict:
        """JSON-serialisable state (plain lists, floats, str) for checkpointing."""
        return {
            "version": _STATE_VERSION,
            "mode": self.mode,
            "buffer_size": self.buffer_size,
            "buffers": {k: [float(x) for x in v] for k, v in self._buffers.items()},
            "running_mean": self._running_mean,
            "running_var": self._running_var,
            "num_updates": self._num_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore state written by :meth:`state_dict` (after a JSON round-trip too).

        The configuration (buffer_size, min_count, ...) stays the one passed to
        the constructor; buffers longer than ``buffer_size`` keep their newest
        entries. The saved ``mode`` must match this tracker's mode.
        """
        missing = {"version", "mode", "buffers", "running_mean", "running_var", "num_updates"} - set(state)
        if missing:
            raise ValueError(f"state is missing field(s) {sorted(missing)}; pass a dict from state_dict()")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"state['version']={state['version']!r} is unsupported; expected {_STATE_VERSION}")
        if state["mode"] != self.mode:
            raise ValueError(
                f"state['mode']={state['mode']!r} does not match this tracker's mode={self.mode!r}; "
                "build the tracker with the checkpoint's mode"
            )
        self._buffers = {
            str(k): collections.deque((float(x) for x in v), maxlen=self.buffer_size)
            for k, v in state["buffers"].items()
        }
        rm, rv = state["running_mean"], state["running_var"]
        self._running_mean = None if rm is None else float(rm)
        self._running_var = None if rv is None else float(rv)
        self._num_updates = int(state["num_updates"])


def compute_advantages(prompts: Sequence[str], rewards, mode: str = "zscore", **kwargs) -> tuple[np.ndarray, dict]:
    """One-shot advantages: ``PerPromptStatTracker(mode, **kwargs).update(prompts, rewards)``."""
    return PerPromptStatTracker(mode, **kwargs).update(prompts, rewards)


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
