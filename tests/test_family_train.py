"""Every registered family trains end to end through the command line, driven by the family specs (issue 24's "done
when", kept for issue 32's families): the family's pipeline — built from its first checkpoint's real configs where its
spec has one (``ddpo_grpo.tiny.from_configs``), else by its tiny builder — trains for 2 epochs through

    python scripts/train.py --config config/base.py --config.pretrained.model=DIR   (LoRA, ``redness``, 32 px, 2 steps)

with rows that carry a source image (image-conditioned families read it) and 5-frame videos; then every metric is
finite, ``train/logp_mismatch`` ≤ 1e-4, and ``final/`` loads into the plain pipeline (``from_pretrained(DIR)`` and the
adapter's ``load_lora``: diffusers' ``load_lora_weights``) and changes its samples. Slow: one train.py process per
family (``python -m pytest -m slow tests/test_family_train.py``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ddpo_grpo.policies import build_policy, families, load_pipeline

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["make it red", "a blue square", "a green circle", "two yellow dots"]


def build(spec, path: Path) -> str:
    """The family's pipeline at ``path``: its first checkpoint's real configs, else its tiny build."""
    if spec.checkpoints:
        from ddpo_grpo.tiny.from_configs import build_from_configs

        build_from_configs(spec, spec.checkpoints[0], path)
    else:
        spec.tiny_builder()(path, **spec.kit_tiny_kwargs)
    return str(path)


def rows_file(tmp: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    path = tmp / "rows.jsonl"
    with open(path, "w") as f:
        for i, text in enumerate(PROMPTS):
            image = tmp / f"source_{i}.png"
            Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
            f.write(json.dumps({"prompt": text, "source_image": str(image)}) + "\n")
    return path


def train(spec, model: str, tmp: Path) -> tuple[list[dict], Path]:
    """2 epochs of ``scripts/train.py`` on ``model``: (metrics rows, final/ directory)."""
    args = [
        "--config", str(REPO / "config" / "base.py"), f"--config.pretrained.model={model}",
        f"--config.logdir={tmp / 'logs'}", "--config.run_name=run", "--config.num_epochs=2",
        "--config.sample.resolution=32", "--config.sample.num_steps=2", "--config.sample.eval_num_steps=2",
        "--config.sample.batch_size=2", "--config.sample.group_size=2", "--config.sample.num_batches_per_epoch=1",
        "--config.sample.max_sequence_length=64", "--config.train.batch_size=2", "--config.train.learning_rate=1e-2",
        "--config.reward.fns={'redness': 1.0}", "--config.logging.tracker=none", "--config.logging.progress=False",
        f"--config.prompts.source={rows_file(tmp)}",
    ]  # fmt: skip
    if spec.video:
        args.append("--config.sample.num_frames=5")
    if spec.adapter.sample_kind == "array":  # neither images nor videos: the mean of the decoded values
        args.append(f"--config.reward.sources={{'redness': '{REPO / 'tests' / 'kit_rewards.py'}:feature_mean'}}")
    if spec.source_tokens:  # editing families: small sources (the Qwen-Image-Edit rule would take 1024²)
        args.append(f"--config.sample.source_pixels={32 * 32}")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), *args], capture_output=True, text=True)
    assert proc.returncode == 0, f"train.py exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}"
    run = tmp / "logs" / "run"
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()], run / "final"


def plain_samples(spec, model: str, final: Path | None, source: Path) -> torch.Tensor:
    """The plain pipeline's samples (2 steps, fixed initial noise; its call as the adapter describes it), with the
    final LoRA loaded into it when given."""
    pipe = spec.pipeline_class().from_pretrained(model)
    pipe.set_progress_bar_config(disable=True)
    if final is not None:
        spec.adapter.load_lora(pipe, str(final))
    sizes = dict(resolution=32, num_frames=5 if spec.video else 0, source_pixels=32 * 32 if spec.source_tokens else 0)
    policy = build_policy(pipe, max_sequence_length=64, **sizes)
    rows = [{"prompt": PROMPTS[0], "source_image": str(source)}]
    latents = torch.randn(1, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    return policy.reference_sample(rows, latents, 2, 1.0)


def check_trains_and_exports(spec, model: str, tmp_path: Path) -> None:
    """The check (module docstring) of the pipeline directory ``model`` of family ``spec``."""
    metrics, final = train(spec, model, tmp_path)
    assert len(metrics) == 2, f"{len(metrics)} epochs logged"
    assert all(math.isfinite(v) for r in metrics for v in r.values() if isinstance(v, float)), metrics
    mismatch = max(r["train/logp_mismatch"] for r in metrics)
    assert mismatch <= 1e-4, f"train/logp_mismatch {mismatch:.2e}"
    assert type(load_pipeline(str(final))).__name__ == spec.pipeline  # a run's output loads back
    base = plain_samples(spec, model, None, tmp_path / "source_0.png")
    tuned = plain_samples(spec, model, final, tmp_path / "source_0.png")
    assert (tuned - base).abs().max().item() > 1e-6, "the exported LoRA does not change the plain pipeline's samples"


@pytest.mark.slow
@pytest.mark.parametrize("family", [pytest.param(p, id=s.name) for p, s in families().items()])
def test_trains_through_the_cli_and_exports(family, tmp_path):
    spec = families()[family]
    check_trains_and_exports(spec, build(spec, tmp_path / "model"), tmp_path)
