"""The adapter kit's learning check (``tests/test_adapter_kit.py::test_dense_reward_rises``: ``redness`` over 10
epochs of the kit's ``LEARNING_RUN``) on one family's tiny pipeline, for several seeds, with its per-epoch trace.

Measures, per seed, the rise of the mean reward of the last two epochs over epoch 0, in epoch-0 standard deviations
(the check asks ≥ 3), and prints the per-epoch means. The results live in docs/models.md and
docs/experiments/2026-11-27-real-size-and-scale.md (Wan I2V on the checkpoint's grid).

    OMP_NUM_THREADS=1 python experiments/kit_learning.py WanImageToVideoPipeline --seeds 42,0,1
    OMP_NUM_THREADS=1 python experiments/kit_learning.py WanImageToVideoPipeline --seeds 42 --steps 8
    OMP_NUM_THREADS=1 python experiments/kit_learning.py WanImageToVideoPipeline --seeds 42 --euler-grid

``--euler-grid``: a Wan policy samples FlowMatchEuler's shifted grid instead of the checkpoint's UniPC grid (what it
did before issue 32); ``--deterministic-last``: an SDE window over every step but the last.

The kit's run (its settings, config and prompt rows) comes from the kit's module, tests/adapter_kit.py, as
experiments/kit_table.py's figures do: no test module is imported, and the run is the kit's, not a copy of it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.adapter_kit import LEARNING_RUN, kit_config, metrics, run_trainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("family", help="a pipeline class of tiny.FAMILIES, e.g. WanImageToVideoPipeline")
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--steps", type=int, default=0, help="sample.num_steps (0: the kit's)")
    ap.add_argument("--euler-grid", action="store_true")
    ap.add_argument("--deterministic-last", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.euler_grid:
        from ddpo_grpo.policies import wan

        wan.WanPolicy.sampling_sigmas = lambda self, num_steps: None
    fields = dict(LEARNING_RUN)
    if args.steps:
        fields["sample.num_steps"] = args.steps
    if args.deterministic_last:
        fields["sample.sde_window_size"] = fields["sample.num_steps"] - 1
        fields["sample.sde_window_range"] = (0, 0)
    root = Path(tempfile.mkdtemp())
    for seed in (int(s) for s in args.seeds.split(",")):
        config = kit_config(root / "pipelines", root / f"run{seed}", args.family, **fields, seed=seed)
        rows = metrics(run_trainer(config).run_dir)
        start, std = rows[0]["reward/mean"], rows[0]["reward/std"]
        end = float(np.mean([r["reward/mean"] for r in rows[-2:]]))
        trace = " ".join(f"{r['reward/mean']:.4f}" for r in rows)
        print(
            f"{args.family} seed {seed}: {start:.4f} (std {std:.4f}) -> {end:.4f}: {(end - start) / std:+.1f} std | {trace}"
        )


if __name__ == "__main__":
    main()
