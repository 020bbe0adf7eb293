"""The memory planner against the measured peak memory of a real training epoch, on CPU processes.

    python experiments/planner_validation.py --points all          # every point, one after the other
    python experiments/planner_validation.py --points lora_b2      # one point (a name of POINTS)

A FLUX.1-architecture transformer of a few hundred million random parameters (FluxTransformer2DModel from its
config: d = 1024, 4 double- and 8 single-stream blocks, 277 M parameters; the tiny CLIP / T5 / VAE of
``ddpo_grpo.tiny``), built in-process by a factory (``build``) so that nothing is read from disk. Each point runs
``scripts/train.py``'s code path — ``Trainer(config)`` and one ``run_epoch`` (sampling, reward, advantages, one
training minibatch with its optimizer step) — under ``torchrun`` (1 or 2 processes, gloo), and every process
reports its peak resident memory increase: /proc/self/status VmHWM at the end minus VmRSS after the imports (the
high-water mark reset there through /proc/self/clear_refs). glibc's allocator is told to map every block ≥ 64 KiB
(MALLOC_MMAP_THRESHOLD_), so freed tensors leave the resident set as a GPU caching allocator's would be reused,
instead of staying in the heap. The planner's prediction is ``ddpo_grpo.planner.plan`` for the same config, its
``pretrained.model`` the configs written next to the run (no weights).

Points in fp32 (mixed_precision "no") and two under bf16 autocast (the frozen base cast to bf16). Measured on 2
shared CPU cores, one point at a time (at most ~6 GB together); docs/scaling.md has the table,
docs/experiments/2026-11-26-planner-validation.jsonl the rows (``--repredict FILE`` recomputes their predictions).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (processes, strategy, use_lora, train batch, gradient checkpointing[, builder: "build" or "build_small"
#: [, train.timestep_fraction of the 2 steps: 0.5 = one backward pass per optimizer step[, mixed_precision]]])
POINTS = {
    "lora_b1": (1, "ddp", True, 1, False),
    "lora_b2": (1, "ddp", True, 2, False),
    "lora_b4": (1, "ddp", True, 4, False),
    "lora_b4_ckpt": (1, "ddp", True, 4, True),
    "full_b2": (1, "ddp", False, 2, False),
    "full_b2_ckpt": (1, "ddp", False, 2, True),
    "ddp2_lora_b2": (2, "ddp", True, 2, False),
    "fsdp2_lora_b2": (2, "fsdp", True, 2, False),
    "fsdp2_full_b2": (2, "fsdp", False, 2, False),
    "fsdp2_full_b2_ckpt": (2, "fsdp", False, 2, True),
    "ddp2_full_b2_small": (2, "ddp", False, 2, False, "build_small"),
    "full_b1_two_steps": (1, "ddp", False, 1, False, "build", 1.0),  # both steps trained: 2 backward passes
    "lora_b4_bf16": (1, "ddp", True, 4, False, "build", 0.5, "bf16"),  # bf16 autocast, frozen base in bf16
    "lora_b8_bf16": (1, "ddp", True, 8, False, "build", 0.5, "bf16"),
}

WIDTH = dict(num_layers=4, num_single_layers=8, attention_head_dim=128, num_attention_heads=8)
#: the smaller one for DDP full fine-tuning on 2 processes (weights, gradients and DDP's buckets in each): d = 768
SMALL = dict(WIDTH, num_attention_heads=6)


def build_small():
    """As ``build`` with d = 768 (156 M parameters)."""
    return build(SMALL)


def build(width=None):
    """The FLUX.1-architecture pipeline of the module docstring (random weights, seeded)."""
    import torch
    from diffusers import FluxPipeline, FluxTransformer2DModel

    from ddpo_grpo.tiny import flux as tiny_flux
    from ddpo_grpo.tiny.common import TEXT_HIDDEN

    components = tiny_flux._components(0)
    torch.manual_seed(0)
    components["transformer"] = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        joint_attention_dim=TEXT_HIDDEN,
        pooled_projection_dim=TEXT_HIDDEN,
        guidance_embeds=True,
        axes_dims_rope=(16, 56, 56),
        **(width or WIDTH),
    )
    return FluxPipeline(**components)


def config_for(point: str, logdir: str):
    from config.flux import tiny

    processes, strategy, lora, batch, ckpt, *builder = POINTS[point]
    c = tiny()
    c.pretrained.model = f"{__file__}:{builder[0] if builder else 'build'}"
    c.logdir, c.run_name = logdir, point
    c.num_epochs, c.save_freq = 1, 0
    s = c.sample
    s.resolution, s.max_sequence_length, s.num_steps = 128, 128, 2
    s.batch_size, s.group_size, s.num_batches_per_epoch = max(batch, 2), 2, 1
    t = c.train
    t.batch_size, t.use_lora, t.gradient_checkpointing = batch, lora, ckpt
    t.timestep_fraction = builder[1] if len(builder) > 1 else 0.5  # 0.5: one trained step per sample
    c.mixed_precision = builder[2] if len(builder) > 2 else "no"
    t.optimizer = "adamw" if lora else "sgd"  # full fine-tuning: plain SGD keeps no state (memory for the point)
    c.distributed.strategy = strategy
    c.logging.progress = False
    return c


def write_configs(pipeline, directory: Path) -> None:
    """The pipeline's model_index.json and component configs, no weights (what the planner reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    pipeline.save_config(directory)
    for name, module in pipeline.components.items():
        if hasattr(module, "save_config") and hasattr(module, "parameters"):
            module.save_config(directory / name)
        elif hasattr(module, "config") and hasattr(module, "parameters"):
            module.config.save_pretrained(directory / name)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def worker(point: str, logdir: str, out: str) -> None:
    """One process of a point (under torchrun): the run's code path, then its peak memory increase."""
    import diffusers  # noqa: F401
    import torch  # noqa: F401  (the imports come before the baseline)
    import transformers  # noqa: F401

    from ddpo_grpo import console
    from ddpo_grpo.trainer import Trainer

    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    base = _status("VmRSS")
    trainer = Trainer(config_for(point, logdir))
    trainer.run_epoch(0, console.Clock(1))
    peak = _status("VmHWM") - base
    rank = int(os.environ.get("RANK", "0"))
    Path(out, f"rank{rank}.json").write_text(json.dumps({"peak": peak, "base": base}))


def predict(point: str, logdir: str) -> dict:
    from ddpo_grpo import planner

    processes, strategy, *rest = POINTS[point]
    small = len(rest) > 3 and rest[3] == "build_small"
    directory = Path(logdir) / ("configs_small" if small else "configs")
    if not (directory / "model_index.json").is_file():
        write_configs(build_small() if small else build(), directory)
    c = config_for(point, logdir)
    p = planner.plan(c, processes, 0, model=str(directory), accelerator=False)
    e = p.estimate(strategy)
    return {"peak": e.peak, "parts": e.parts}


def run_point(point: str, logdir: str) -> dict:
    processes = POINTS[point][0]
    out = tempfile.mkdtemp(prefix=f"plan_{point}_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    cmd += [__file__, "--worker", point, "--logdir", logdir, "--out", out]
    start = time.time()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    measured = [json.loads(Path(out, f"rank{r}.json").read_text())["peak"] for r in range(processes)]
    pred = predict(point, logdir)
    m = max(measured)
    return {
        "point": point,
        "setting": POINTS[point],
        "predicted_gib": pred["peak"] / 2**30,
        "measured_gib": [x / 2**30 for x in measured],
        "error_pct": 100 * (pred["peak"] - m) / m,
        "parts_gib": {k: v / 2**30 for k, v in pred["parts"].items()},
        "seconds": time.time() - start,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="all")
    ap.add_argument("--worker")
    ap.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(), "planner_validation"))
    ap.add_argument("--out")
    ap.add_argument("--results", default="")
    ap.add_argument("--repredict", default="", help="a results file: print its rows with today's planner predictions")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.logdir, args.out)
        return
    if args.repredict:
        for line in Path(args.repredict).read_text().splitlines():
            row = json.loads(line)
            pred = predict(row["point"], args.logdir)
            m = max(row["measured_gib"]) * 2**30
            row.update(predicted_gib=pred["peak"] / 2**30, error_pct=100 * (pred["peak"] - m) / m)
            row["parts_gib"] = {k: v / 2**30 for k, v in pred["parts"].items()}
            print(json.dumps(row), flush=True)
        return
    names = list(POINTS) if args.points == "all" else args.points.split(",")
    for name in names:
        row = run_point(name, args.logdir)
        print(json.dumps(row), flush=True)
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
