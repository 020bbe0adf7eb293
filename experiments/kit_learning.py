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

The kit's run (its settings, config and prompt rows) is copied here from tests/adapter_kit.py and
tests/test_adapter_kit.py, not imported (an experiment does not import the tests); the ``# Copied from`` markers make
tests/test_copies.py fail when a copy drifts from the kit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TESTS = REPO / "tests"  # where the kit's reward file lives (kit_rewards.py: the denoiser's feature mean)

from ddpo_grpo.policies import families  # noqa: E402

# Copied from tests.adapter_kit.PROMPTS
PROMPTS = ["a red circle", "two blue squares", "a green cat on a mat"]

# Copied from tests.adapter_kit.SMALL_SOURCE
SMALL_SOURCE = 32 * 32

# Copied from tests.adapter_kit.EDIT_FAMILIES
EDIT_FAMILIES = ("QwenImageEditPipeline", "QwenImageEditPlusPipeline")

# Copied from tests.adapter_kit._built
_built: dict[str, str] = {}

# Copied from tests.test_adapter_kit.LEARNING_RUN
LEARNING_RUN = {
    "num_epochs": 10,
    "save_freq": 0,
    "sample.num_steps": 4,
    "sample.batch_size": 16,
    "sample.num_batches_per_epoch": 4,
    "sample.group_size": 8,
    "sample.share_group_noise": True,
    "train.batch_size": 16,
    "train.use_lora": False,
    "train.learning_rate": 3e-2,
    "train.clip_range": 100.0,
}


# Copied from tests.adapter_kit.family_dir
def family_dir(root: Path, family: str) -> str:
    """The family's tiny pipeline directory, built once per process."""
    from ddpo_grpo.tiny import FAMILIES as BUILDERS

    if family not in _built:
        path = Path(root) / family
        BUILDERS[family](path)
        _built[family] = str(path)
    return _built[family]


# Copied from tests.test_adapter_kit.policy_class_of
def policy_class_of(family: str):
    return families()[family].adapter


# Copied from tests.test_adapter_kit.kit_config with Path(__file__).parent->TESTS
def kit_config(root: Path, tmp_path: Path, family: str, **overrides):
    """A two-epoch LoRA run of the family's tiny pipeline on ``redness`` (images and videos): config/tiny.py's tiny
    variant, on the kit's pipeline directory and prompt rows (with source-image files), 2 steps."""
    from config.tiny import tiny_family

    cls = policy_class_of(family)
    cfg = tiny_family(family, image_conditioned=cls.image_conditioned, video=cls.sample_kind == "video")
    cfg.logdir, cfg.run_name = str(tmp_path / "logs"), "run"
    cfg.pretrained.model = family_dir(root, family)
    cfg.sample.num_steps, cfg.sample.max_sequence_length = 2, 256
    cfg.sample.source_pixels = SMALL_SOURCE if family in EDIT_FAMILIES else 0
    cfg.reward.num_workers, cfg.logging.progress = 0, False
    if cls.sample_kind == "array":  # neither images nor videos: a dense mean of the decoded values
        cfg.reward.sources = {"redness": f"{TESTS / 'kit_rewards.py'}:feature_mean"}
    cfg.prompts.source = write_prompts(tmp_path)
    for key, value in overrides.items():
        node = cfg
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        node[leaf] = value
    return cfg


# Copied from tests.test_adapter_kit.write_prompts
def write_prompts(tmp_path: Path, n: int = 4) -> str:
    """A .jsonl of n rows, each with a source image file (read by image-conditioned families only)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "prompts.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            image = tmp_path / f"source_{i}.png"
            Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
            f.write(json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "source_image": str(image)}) + "\n")
    return str(path)


# Copied from tests.test_adapter_kit.run_trainer
def run_trainer(cfg):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(cfg)
    trainer.run()
    return trainer


# Copied from tests.test_adapter_kit.metrics
def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


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
