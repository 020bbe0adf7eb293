"""A paired probe: the training reward of fixed prompts, initial noise and sampler noise, against the untrained model.

Why: every epoch draws a fresh prompt mix and fresh noise, and on ShapesWorld the untrained model's reward
over one epoch's draw swings more from epoch to epoch than learning moves it, so ``reward/mean`` cannot show
learning at these effect sizes. The probe removes that variance by common random numbers: the same
``probe.prompts × probe.group_size`` samples (prompts drawn once by the run's PromptSampler, initial-noise
seeds and the step-noise generator fixed) are drawn with the untrained policy before the first update and
again every ``probe.freq`` epochs, with the training sampler's settings (kernel, noise level, SDE window,
CFG, sample.num_steps). Logged:

    probe/reward     mean training reward (the weighted sum of reward.fns) of the probe samples
    probe/diff       mean over samples of (reward now − reward of the same sample untrained)
    probe/diff_se    its standard error, std(diff) / sqrt(n): learning is visible when diff > 3·se

The untrained rewards are kept in ``<run>/report/probe_before.json`` (for resumed runs). Run by the main
process; its sampling draws only from its own seeded generators.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ddpo_grpo.seeding import derive_seed
from foundation.atomic_io import atomic_write_text

PROBE_FILE = "probe_before.json"
PROBE_EPOCH = 1_000_000  # the PromptSampler "epoch" of the probe's prompts: no training run draws it


class PairedProbe:
    """See the module docstring. ``sample_fn(rows, seeds, generator, rng) -> samples`` draws with the current
    policy (the trainer's training sampler), ``score_fn(samples, rows) -> combined rewards [n]``."""

    def __init__(self, run_dir, prompt_sampler, *, num_prompts: int, group_size: int, seed: int):
        self.path = Path(run_dir) / "report" / PROBE_FILE
        rows = prompt_sampler.draw(PROBE_EPOCH, num_prompts)
        self.rows = [row for row in rows for _ in range(group_size)]
        self.seeds = [derive_seed(seed, 7, g, m) for g in range(num_prompts) for m in range(group_size)]
        self.seed = seed
        self.before = self._load()

    def _load(self) -> np.ndarray | None:
        if not self.path.is_file():
            return None
        return np.asarray(json.loads(self.path.read_text())["rewards"], dtype=np.float64)

    def measure(self, sample_fn: Callable, score_fn: Callable, batch_size: int, device) -> np.ndarray:
        """The combined reward of every probe sample, drawn in batches of ``batch_size``."""
        rewards = []
        for start in range(0, len(self.rows), batch_size):
            rows = self.rows[start : start + batch_size]
            generator = torch.Generator(device).manual_seed(derive_seed(self.seed, 7, -1, start))
            rng = np.random.default_rng(derive_seed(self.seed, 7, -2, start))
            samples = sample_fn(rows, self.seeds[start : start + batch_size], generator, rng)
            rewards.append(np.asarray(score_fn(samples, rows), dtype=np.float64))
        return np.concatenate(rewards)

    def record_before(self, rewards: np.ndarray) -> None:
        self.before = np.asarray(rewards, dtype=np.float64)
        rewards = [None if math.isnan(r) else r for r in self.before.tolist()]
        atomic_write_text(self.path, json.dumps({"rewards": rewards}))

    def metrics(self, rewards: np.ndarray) -> dict:
        """probe/reward, and the paired difference to the untrained model with its standard error."""
        out = {"probe/reward": float(np.nanmean(rewards)) if len(rewards) else math.nan}
        if self.before is not None and len(self.before) == len(rewards):
            diff = rewards - self.before
            diff = diff[~np.isnan(diff)]
            if len(diff):
                out["probe/diff"] = float(diff.mean())
                out["probe/diff_se"] = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan
        return out
