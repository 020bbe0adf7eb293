"""Wan 2.2's two experts on two processes: the two ways to keep the processes' collectives in step, timed side by side.

    python experiments/wan_expert_order.py                 # DDP and FSDP, both variants, 2 repeats, 3 epochs each
    python experiments/wan_expert_order.py --repeats 1 --epochs 2 --strategies fsdp

Each process shuffles its own samples' trained steps, so one process's minibatch routes to other experts than the
other's; DDP's gradient reduction and FSDP's all-gathers then part. Two remedies:

* ``both`` (what ``ddpo_grpo.policies.wan.WanExperts.calls`` does): under DDP a training call that has no sample for
  an expert joins that expert's trainable parameters to its output at a zero gradient, so every synchronised
  backward holds every trained parameter (``find_unused_parameters`` off, as launched); under FSDP the processes
  agree on the experts any of them needs (an all-reduce of two flags), and one without samples for it runs it on
  one token, so that all take the same all-gathers and reduce-scatters;
* ``sorted`` (a prototype, patched in here): each sample's shuffled steps are stably sorted high-noise expert first,
  so minibatch column k holds one expert's steps on every process (true when every sample trains as many steps of
  each expert, as here), each call runs the one expert its samples need, and DDP is built with
  ``find_unused_parameters=True`` (a synchronised backward then misses the other expert's parameters);
* ``both_sorted``: ``both`` with the steps sorted as in ``sorted`` (what ``train.shuffle_steps=False`` gives when
  every sample trains the same steps): a column then needs one expert on every process.

The run: ``config/wan.py:tiny_i2v`` (tiny two-expert Wan, boundary 0.9, UniPC grid: steps 0–1 high, 2–3 low) with 4
samples per process, minibatches of 4, CFG 3.0 / 1.5, on 2 CPU processes (gloo). Per epoch after the first, the
median of ``perf/train_s`` (the update phase) and ``perf/sample_s``; the variants alternate, so load drifts hit both.
Also printed: the largest difference of the final LoRA weights to ``both``'s (the same gradients, summed in another
order).

Result: docs/experiments/2026-11-27-wan-grid-guidance-experts.md §4.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config(logdir: str, name: str, strategy: str, epochs: int):
    sys.path.insert(0, str(ROOT))
    from config.wan import tiny_i2v

    config = tiny_i2v()
    config.logdir, config.run_name, config.num_epochs = logdir, name, epochs
    config.distributed.strategy = strategy
    s, t = config.sample, config.train
    s.batch_size, s.group_size, s.guidance_scale, s.guidance_scale_2 = 4, 2, 3.0, 1.5
    t.batch_size = 4
    config.logging.progress = False
    config.save_freq = 0
    return config


def _patch_sorted(boundary_of, own_experts: bool) -> None:
    """Each sample's shuffled steps sorted high-noise expert first; with ``own_experts`` each call runs only the
    experts its own samples need (the ``sorted`` prototype)."""
    import torch

    from ddpo_grpo.policies.wan import WanExperts
    from ddpo_grpo.rollout import Rollout

    if own_experts:
        WanExperts.calls = lambda self, high: ("run" if high.any() else "", "run" if (~high).any() else "")
    plain = Rollout.shuffle_steps

    def shuffle_then_sort(self, gen):
        plain(self, gen)
        t = torch.gather(self.timesteps, 1, self.train_steps)  # [B, K] the trained steps' timesteps
        low = (t < boundary_of()).long()  # 0 = high-noise expert
        order = torch.sort(low, dim=1, stable=True).indices
        self.train_steps = torch.gather(self.train_steps, 1, order)
        self.train_mask = torch.gather(self.train_mask, 1, order)
        return self

    Rollout.shuffle_steps = shuffle_then_sort


def worker(variant: str, logdir: str, name: str, strategy: str, epochs: int) -> None:
    from accelerate import Accelerator, DistributedDataParallelKwargs

    from ddpo_grpo.trainer import Trainer

    config = _config(logdir, name, strategy, epochs)
    accelerator = None
    holder = {}
    if variant != "both":
        _patch_sorted(lambda: holder["trainer"].policy.denoiser.boundary, own_experts=variant == "sorted")
    if variant == "sorted":
        ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
        accelerator = Accelerator(mixed_precision=config.mixed_precision, cpu=True, kwargs_handlers=[ddp])
    trainer = Trainer(config, accelerator=accelerator)
    holder["trainer"] = trainer
    trainer.run()


def launch(variant: str, logdir: Path, name: str, strategy: str, epochs: int) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__]
    cmd += ["--worker", variant, "--logdir", str(logdir), "--name", name, "--strategy", strategy]
    cmd += ["--epochs", str(epochs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode:
        sys.exit(f"{variant} / {strategy} failed:\n{proc.stderr[-3000:]}")
    rows = (logdir / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(r) for r in rows]


def _lora_gap(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    gap = 0.0
    for f in sorted(p.name for p in (a / "final").glob("*.safetensors")):
        x, y = load_file(a / "final" / f), load_file(b / "final" / f)
        gap = max(gap, max(float((x[k] - y[k]).abs().max()) for k in x))
    return gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--strategies", default="ddp,fsdp")
    parser.add_argument("--worker")
    parser.add_argument("--logdir")
    parser.add_argument("--name")
    parser.add_argument("--strategy")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.logdir, args.name, args.strategy, args.epochs)
    logdir = Path(tempfile.mkdtemp(prefix="wan_expert_order_"))
    for strategy in args.strategies.split(","):
        variants = ("both", "sorted", "both_sorted")
        times = {v: {"train": [], "sample": []} for v in variants}
        for r in range(args.repeats):
            for variant in variants if r % 2 == 0 else variants[::-1]:
                rows = launch(variant, logdir, f"{strategy}_{variant}_{r}", strategy, args.epochs)
                assert all(row["train/logp_mismatch"] <= 1e-4 for row in rows), rows
                times[variant]["train"] += [row["perf/train_s"] for row in rows[1:]]
                times[variant]["sample"] += [row["perf/sample_s"] for row in rows[1:]]
        gaps = [_lora_gap(logdir / f"{strategy}_both_0", logdir / f"{strategy}_{v}_0") for v in variants[1:]]
        for variant, t in times.items():
            print(
                f"{strategy:4s} {variant:6s} train_s median {statistics.median(t['train']):.3f} "
                f"(n={len(t['train'])}: {', '.join(f'{v:.2f}' for v in t['train'])}) "
                f"sample_s median {statistics.median(t['sample']):.3f}"
            )
        base = statistics.median(times["sorted"]["train"])
        ratios = ", ".join(f"{v} {statistics.median(times[v]['train']) / base:.3f}" for v in variants)
        print(f"{strategy:4s} train_s ÷ sorted's: {ratios}; final LoRA max |Δ| to both: {gaps[0]:.1e}, {gaps[1]:.1e}")


if __name__ == "__main__":
    main()
