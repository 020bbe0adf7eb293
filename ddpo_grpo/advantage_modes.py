"""The advantage modes: per sample, a centre, a scale and a flat flag from a batch's rewards and their groups.

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

optionally clipped to ``[-clip, clip]`` afterwards (``stat_tracker.py`` applies
it). The flat flag marks samples whose reference distribution has (numerically)
zero spread: there ``r_i - c_i`` is zero up to rounding and dividing by ``eps``
would only amplify round-off, so the advantage is set to exactly ``0.0`` (never
NaN). A set of rewards is flat
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

__all__ = ["ADVANTAGE_MODES", "BATCH_MODES", "FLAT_RTOL", "Groups", "batch_stats", "flat_groups", "is_flat"]

#: Relative tolerance below which a set of rewards counts as having zero spread.
FLAT_RTOL = 1e-12


def is_flat(spread: np.ndarray | float, mean: np.ndarray | float) -> np.ndarray:
    """Zero-spread test ``spread <= FLAT_RTOL * max(1, |mean|)`` (vectorised).

    ``spread`` is the peak-to-peak range ``max - min`` of a set of rewards. A
    tolerance (rather than ``==``) makes e.g. ``[0.1 + 0.2, 0.3]`` flat.
    """
    spread = np.asarray(spread, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    return spread <= FLAT_RTOL * np.maximum(1.0, np.abs(mean))


def flat_groups(values: np.ndarray, group_size: int) -> np.ndarray:
    """Per consecutive group of ``group_size`` in ``values`` [n]: True when its rewards are all equal (``is_flat``
    of its range); a group with a NaN reward counts as flat (dynamic sampling does not pick it)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1, group_size)
    with np.errstate(invalid="ignore"):
        spread = v.max(axis=1) - v.min(axis=1)
        return ~np.isfinite(spread) | is_flat(spread, v.mean(axis=1))


@dataclasses.dataclass(frozen=True)
class Groups:
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
    def build(cls, prompts: Sequence[str], rewards: np.ndarray) -> Groups:
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
        flat = is_flat(high - low, mean) | (count < 2)  # [G]
        return cls(list(key_to_id), index, count, mean, std, flat)


def batch_stats(rewards: np.ndarray) -> tuple[float, float, bool]:
    """Return ``(mu_batch, sigma_batch, flat_batch)`` of all rewards (ddof = 0)."""
    mean = float(rewards.mean())
    return mean, float(rewards.std()), bool(is_flat(float(np.ptp(rewards)), mean))


# --------------------------------------------------------------------------- #
# Modes: fn(tracker, rewards [N], groups) -> (centre [N], scale [N], flat [N]) #
# (tracker: the stat_tracker.PerPromptStatTracker; the history modes keep     #
# their state in it: _buffers, _running_mean / _running_var, _last_extra)     #
# --------------------------------------------------------------------------- #
def _mode_zscore(tracker, rewards: np.ndarray, groups: Groups):
    """GRPO: ``A_i = (r_i - mu_g) / max(sigma_g, eps)`` with this batch's group stats."""
    g = groups.index
    return groups.mean[g], groups.std[g], groups.flat[g]


def _mode_mean(tracker, rewards: np.ndarray, groups: Groups):
    """Dr. GRPO: ``A_i = r_i - mu_g`` (centring only, no std division).

    Dividing by ``sigma_g`` up-weights prompts that are too easy or too hard
    (small spread); Liu et al. 2025 ("Understanding R1-Zero-Like Training")
    drop it to remove that question-level difficulty bias.
    """
    g = groups.index
    return groups.mean[g], np.ones_like(rewards), groups.flat[g]


def _mode_global_std(tracker, rewards: np.ndarray, groups: Groups):
    """``A_i = (r_i - mu_g) / max(sigma_batch, eps)``: group centring, batch-wide scale."""
    g = groups.index
    _, batch_std, _ = batch_stats(rewards)
    return groups.mean[g], np.full_like(rewards, batch_std), groups.flat[g]


def _mode_buffer(tracker, rewards: np.ndarray, groups: Groups):
    """DDPO-style per-prompt history buffers that persist across ``update`` calls.

    For each prompt ``g`` the batch's rewards are first appended (in input
    order) to the deque ``B_g`` holding its last ``buffer_size`` rewards. Then

        (c, s) = (mean(B_g), std(B_g))          if |B_g| >= min_count
        (c, s) = (mu_batch, sigma_batch)         otherwise (not enough history)

    and ``A_i = (r_i - c) / max(s, eps)``; ``f_i`` is the flatness of whichever
    set of rewards supplied ``(c, s)``.
    """
    batch_mean, batch_std, batch_flat = batch_stats(rewards)
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
            flat_g[gid] = is_flat(np.ptp(hist), centre_g[gid])
            fallback_g[gid] = False
    tracker._last_extra["adv/frac_fallback"] = float(fallback_g[groups.index].mean())
    g = groups.index
    return centre_g[g], scale_g[g], flat_g[g]


def _mode_running(tracker, rewards: np.ndarray, groups: Groups):
    """Group centring with a running (EMA) global scale.

    With decay ``d`` the running moments are updated *before* use:

        first call:  m <- mu_batch,                       v <- sigma_batch^2
        later:       m <- d * m + (1 - d) * mu_batch,     v <- d * v + (1 - d) * sigma_batch^2

    and ``A_i = (r_i - mu_g) / max(sqrt(v), eps)``. The running mean ``m`` is
    not used for centring (group centring already removes the prompt's
    baseline); it is tracked for logging and checkpointing. A slowly moving
    scale keeps advantage magnitudes comparable across batches.
    """
    batch_mean, batch_std, _ = batch_stats(rewards)
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
