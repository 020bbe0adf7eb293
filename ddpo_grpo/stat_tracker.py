"""``PerPromptStatTracker``: rewards in, group-relative advantages out, with the mode's state across batches.

A_i = 0 where the sample's reference rewards are flat, else (r_i − c_i) / max(s_i, eps) (or verl's / TRL's rule,
``STD_RULES``), optionally clipped; the
centre c, scale s and flat flag come from the mode (``advantage_modes.py``, which states the notation and each
mode's formula). The history modes' state round-trips through ``state_dict``.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from ddpo_grpo.advantage_modes import ADVANTAGE_MODES, Groups

__all__ = ["STD_RULES", "PerPromptStatTracker", "compute_advantages"]

#: ``train.adv_std_rule``: how the zscore / global_std modes divide by a std. "max": A = (r − c) / max(σ, eps) with the
#: population σ (ddof 0), the house's rule; "verl": A = (r − c) / (s + 1e-6) with the sample std s (ddof 1, torch.std)
#: as verl's ``compute_grpo_outcome_advantage``; "trl": (r − c) / (s + 1e-4) as TRL's GRPOTrainer. The value is the
#: epsilon added (the "max" rule's is the tracker's ``eps``).
STD_RULES = {"max": 0.0, "verl": 1e-6, "trl": 1e-4}

_STATE_VERSION = 1


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
        std_rule: str = "max",
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
        if std_rule not in STD_RULES:
            raise ValueError(f"train.adv_std_rule={std_rule!r} must be one of {sorted(STD_RULES)}")
        self.std_rule = std_rule
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

    def _scaled(self, centred: np.ndarray, scale: np.ndarray, groups: Groups) -> np.ndarray:
        """The centred rewards divided by the mode's scale under ``std_rule`` (``STD_RULES``)."""
        if self.std_rule == "max" or self.mode not in ("zscore", "global_std"):
            return centred / np.maximum(scale, self.eps)
        n = groups.count[groups.index] if self.mode == "zscore" else np.full_like(centred, len(centred))
        sample_std = scale * np.sqrt(n / np.maximum(n - 1.0, 1.0))  # Bessel: the population std's n → n − 1
        return centred / (sample_std + STD_RULES[self.std_rule])

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
        groups = Groups.build(prompts, rewards)
        self._last_extra = {}
        centre, scale, flat = ADVANTAGE_MODES[self.mode](self, rewards, groups)  # each [N]
        adv = self._scaled(rewards - centre, scale, groups)  # [N]
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
