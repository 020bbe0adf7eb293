"""The pretraining data of the image-to-image model: fresh examples drawn by the *train* rules, and their randomness.

Each example is a restoration (probability ``restore_fraction``) or an edit, drawn exactly as the shipped
train rows are (:mod:`.data`): a restoration renders a fresh scene for a task-balanced ShapesWorld *train*
prompt and degrades it by a uniformly drawn kind at one of its *train* levels (never the held-out one); an
edit draws a uniformly chosen edit type and rejects edits touching held-out compositions. Images are made
by :func:`.data.images` from the example's JSON row, so training and shipped rows share one code path.

Randomness: a numpy generator seeded ``seed`` draws the examples; a torch generator seeded ``seed + 1`` draws
VAE posterior samples, condition dropout, timesteps and noise. Both are saved in every checkpoint.
"""

from __future__ import annotations

import numpy as np
import torch

from .data import images, sample_edit, sample_shape_row, shape_rows_by_task
from .edit import EDIT_TYPES, edit_row
from .restore import KINDS, levels, restore_row


class I2IStream:
    """Training examples and the training randomness (module docstring)."""

    def __init__(self, seed: int, restore_fraction: float = 0.5):
        if not 0.0 <= restore_fraction <= 1.0:
            raise ValueError(f"restore_fraction must be in [0, 1]; got {restore_fraction}")
        self.restore_fraction = float(restore_fraction)
        self.by_task = shape_rows_by_task("train")
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator().manual_seed(seed + 1)

    def row(self) -> dict:
        """One fresh JSON row (a restoration or an edit) of the train rules."""
        rng = self.rng
        if rng.random() < self.restore_fraction:
            kind = KINDS[int(rng.integers(len(KINDS)))]
            options = levels(kind, "train")
            level = options[int(rng.integers(len(options)))]
            return restore_row(sample_shape_row(self.by_task, rng), kind, level, int(rng.integers(2**31)), False)
        return edit_row(sample_edit(EDIT_TYPES[int(rng.integers(len(EDIT_TYPES)))], "train", rng))

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor, list[str], list[str]]:
        """``(sources, targets, instructions, tasks)``: float ``[n, 3, 64, 64]`` in [0, 1] twice, then strings."""
        rows = [self.row() for _ in range(n)]
        pairs = [images(r) for r in rows]
        src = torch.from_numpy(np.stack([s for s, _ in pairs])).float().div(255.0)
        tgt = torch.from_numpy(np.stack([t for _, t in pairs])).float().div(255.0)
        return src, tgt, [r["prompt"] for r in rows], [r["task"] for r in rows]

    def state_dict(self) -> dict:
        return {"data_rng": self.rng.bit_generator.state, "torch_gen": self.gen.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["data_rng"]
        self.gen.set_state(torch.tensor(state["torch_gen"], dtype=torch.uint8))
