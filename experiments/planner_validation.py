"""The memory planner against the measured peak memory of a real training epoch, on CPU processes.

    python experiments/planner_validation.py --points all          # every point, one after the other
    python experiments/planner_validation.py --points lora_b2      # one point (a name of POINTS)
    python experiments/planner_validation.py --table docs/experiments/2026-11-27-planner-validation.jsonl

A FLUX.1-architecture transformer of a few hundred million random parameters (FluxTransformer2DModel from its
config: d = 1024, 4 double- and 8 single-stream blocks, 277 M parameters; the tiny CLIP / T5 / VAE of
``ddpo_grpo.tiny``), written once as a pipeline directory with its weights (``<logdir>/pipeline``, 1.1 GB; ``pipeline_bf16`` stored in
bf16 for the bf16 points, as the hub's checkpoints are) so that every point loads it as a real checkpoint is loaded:
each component read in its dtype and, under FSDP, the denoiser built empty and read one shard per process. Each point runs ``scripts/train.py``'s code path — ``Trainer(config)`` and
one ``run_epoch`` (sampling, reward, advantages, the training minibatch(es) with their optimizer step) — under
``torchrun`` (1 or 2 processes, gloo), and every process reports two peak resident-memory increases over its resident
set after the imports (/proc/self/status: the high-water mark VmHWM, reset through /proc/self/clear_refs after the
imports and again after set-up): the set-up peak (while ``Trainer(config)`` loads, shards and makes the shadow
copies: the planner's set-up phase) and the epoch's peak (the largest of its training, encoding and swap phases);
the point's peak is the larger of the two. (Without FSDP, a component read in the dtype it is stored in is mapped
from its file: its pages count in the resident set once the run touches them, in the epoch, so the set-up of those
points measures less than the weights it holds; under FSDP each process copies its slices into its shards, and the
set-up is the load's own peak.) glibc's allocator is told to map every block ≥ 64 KiB
(MALLOC_MMAP_THRESHOLD_), so freed tensors leave the resident set as a GPU caching allocator's would be reused,
instead of staying in the heap. The planner's prediction is ``ddpo_grpo.planner.plan`` for the same config and
pipeline directory.

Points in fp32 (mixed_precision "no") and some under bf16 autocast (the frozen base read in bf16); several backward
passes per optimizer step (``steps`` trained sampling steps); a reference (KL, full fine-tuning: its weights are
swapped in for the reference forward); an image reward's model on the device (a random CLIP-B/16 image tower written
next to the pipeline, the ``aesthetic`` reward's layout). Measured on 2 shared CPU cores, one point at a time (at
most ~5 GB together); docs/scaling.md has the table, docs/experiments/2026-11-27-planner-validation.jsonl the rows
(``--repredict FILE`` recomputes their predictions with today's planner).
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
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Point(NamedTuple):
    processes: int
    strategy: str
    lora: bool
    batch: int
    checkpointing: bool = False
    small: bool = False  # the d = 768 transformer (156 M) instead of d = 1024
    steps: int = 2  # sampling steps
    trained: int = 1  # trained steps per sample: backward passes per optimizer step
    precision: str = "no"
    beta: float = 0.0  # KL to the reference (full fine-tuning: a swapped-in float32 copy)
    reward: bool = False  # the aesthetic reward (a CLIP-B/16 image tower) instead of redness


POINTS = {
    "lora_b1": Point(1, "ddp", True, 1),
    "lora_b2": Point(1, "ddp", True, 2),
    "lora_b4": Point(1, "ddp", True, 4),
    "lora_b4_ckpt": Point(1, "ddp", True, 4, True),
    "full_b2": Point(1, "ddp", False, 2),
    "full_b2_ckpt": Point(1, "ddp", False, 2, True),
    "full_b1_two_steps": Point(1, "ddp", False, 1, steps=2, trained=2),
    "ddp2_lora_b2": Point(2, "ddp", True, 2),
    "ddp2_full_b2_small": Point(2, "ddp", False, 2, small=True),
    "fsdp2_lora_b2": Point(2, "fsdp", True, 2),
    "fsdp2_full_b2": Point(2, "fsdp", False, 2),
    "fsdp2_full_b2_ckpt": Point(2, "fsdp", False, 2, True),
    "fsdp2_full_b1_four_steps": Point(2, "fsdp", False, 1, steps=4, trained=4),
    "fsdp2_full_b1_ckpt_kl": Point(2, "fsdp", False, 1, True, steps=2, trained=2, beta=0.01),
    "lora_b4_bf16": Point(1, "ddp", True, 4, precision="bf16"),
    "fsdp2_lora_b2_bf16": Point(2, "fsdp", True, 2, precision="bf16"),
    "lora_b2_reward": Point(1, "ddp", True, 2, reward=True),
}

WIDTH = dict(num_layers=4, num_single_layers=8, attention_head_dim=128, num_attention_heads=8)
#: the smaller one for DDP full fine-tuning on 2 processes (weights, gradients and DDP's buckets in each): d = 768
SMALL = dict(WIDTH, num_attention_heads=6)
#: the reward point's image tower: CLIP-B/16's (86 M parameters)
REWARD_TOWER = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)


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


def pipeline_dir(logdir: str, small: bool, precision: str = "no") -> Path:
    """The pipeline directory with weights (written on first use), stored in the dtype the point reads it in (as
    the hub's checkpoints are stored in the bf16 their LoRA runs read)."""
    import torch

    directory = Path(logdir) / ("pipeline" + ("_small" if small else "") + ("_bf16" if precision == "bf16" else ""))
    if not (directory / "model_index.json").is_file():
        tmp = directory.with_name(directory.name + ".tmp")
        pipeline = build(SMALL if small else None)
        if precision == "bf16":
            pipeline.to(torch.bfloat16)
        pipeline.save_pretrained(tmp)
        tmp.rename(directory)
    return directory


def reward_files(logdir: str) -> dict:
    """The aesthetic reward's kwargs for the reward point: a random CLIP image tower and head (written once)."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    from reward_models.aesthetic import AestheticMLP

    directory = Path(logdir) / "reward_tower"
    head = Path(logdir) / "reward_head.pt"
    if not (directory / "config.json").is_file():
        torch.manual_seed(0)
        tower = CLIPVisionModelWithProjection(CLIPVisionConfig(**REWARD_TOWER, patch_size=16, projection_dim=512))
        tower.save_pretrained(directory)
        torch.save(AestheticMLP(512).state_dict(), head)
    return {"clip_model": str(directory), "head_path": str(head), "device": "cpu"}


def config_for(point: str, logdir: str):
    from config.flux import tiny

    pt = POINTS[point]
    c = tiny()
    c.pretrained.tiny = ""
    c.pretrained.model = str(pipeline_dir(logdir, pt.small, pt.precision))
    c.logdir, c.run_name = logdir, point
    c.num_epochs, c.save_freq = 1, 0
    s = c.sample
    s.resolution, s.max_sequence_length, s.num_steps = 128, 128, pt.steps
    s.batch_size, s.group_size, s.num_batches_per_epoch = max(pt.batch, 2 // pt.processes), 2, 1  # one step
    t = c.train
    t.batch_size, t.use_lora, t.gradient_checkpointing = pt.batch, pt.lora, pt.checkpointing
    t.timestep_fraction = pt.trained / pt.steps
    t.beta = pt.beta
    c.mixed_precision = pt.precision
    t.optimizer = "adamw" if pt.lora else "sgd"  # full fine-tuning: plain SGD keeps no state (memory for the point)
    c.distributed.strategy = pt.strategy
    c.logging.progress = False
    if pt.reward:
        c.reward.fns = {"aesthetic": 1.0}
        c.reward.kwargs = {"aesthetic": reward_files(logdir)}
    return c


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def worker(point: str, logdir: str, out: str) -> None:
    """One process of a point (under torchrun): the run's code path, then its peak memory increases."""
    import accelerate  # noqa: F401
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401  (the imports come before the baseline)
    import transformers  # noqa: F401

    from ddpo_grpo import console
    from ddpo_grpo.trainer import Trainer

    config = config_for(point, logdir)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    base = _status("VmRSS")
    trainer = Trainer(config)
    setup = _status("VmHWM") - base
    kinds = {"setup_file": _status("RssFile"), "setup_anon": _status("RssAnon")}  # (file-mapped vs anonymous)
    Path("/proc/self/clear_refs").write_text("5")
    trainer.run_epoch(0, console.Clock(1))
    epoch = _status("VmHWM") - base
    kinds.update(end_file=_status("RssFile"), end_anon=_status("RssAnon"))
    rank = int(os.environ.get("RANK", "0"))
    Path(out, f"rank{rank}.json").write_text(json.dumps({"epoch": epoch, "setup": setup, "base": base, **kinds}))


def predict(point: str, logdir: str) -> dict:
    from ddpo_grpo import planner

    pt = POINTS[point]
    c = config_for(point, logdir)
    p = planner.plan(c, pt.processes, 0, model=c.pretrained.model, accelerator=False)
    e = p.estimate(pt.strategy)
    epoch = {k: v for k, v in e.phases.items() if k != "load"}
    return {
        "peak": e.peak,
        "phase": e.peak_phase,
        "setup": e.load_phase,
        "epoch": max(epoch.values()),
        "epoch_phase": max(epoch, key=epoch.get),
        "parts": e.parts,
        "phases": e.phases,
    }


def _row(point: str, epoch: list, setup: list, pred: dict, seconds: float, kinds: list = ()) -> dict:
    """The point's JSON row: predicted and measured (per process) peaks of the epoch, the set-up and the two
    together, with the prediction's error against the largest process's."""
    gib = 2**30
    peak = [max(e, s) for e, s in zip(epoch, setup)]

    def err(predicted, measured):
        return 100 * (predicted - max(measured)) / max(measured)

    return {
        "point": point,
        "setting": POINTS[point]._asdict(),
        "predicted_gib": pred["peak"] / gib,
        "predicted_phase": pred["phase"],
        "measured_gib": [x / gib for x in peak],
        "error_pct": err(pred["peak"], peak),
        "epoch_predicted_gib": pred["epoch"] / gib,
        "epoch_phase": pred["epoch_phase"],
        "epoch_measured_gib": [x / gib for x in epoch],
        "epoch_error_pct": err(pred["epoch"], epoch),
        "setup_predicted_gib": pred["setup"] / gib,
        "setup_measured_gib": [x / gib for x in setup],
        "setup_error_pct": err(pred["setup"], setup),
        "parts_gib": {k: v / gib for k, v in pred["parts"].items()},
        "phases_gib": {k: v / gib for k, v in pred["phases"].items()},
        "seconds": seconds,
        "rss_gib": [{k: v / gib for k, v in r.items()} for r in kinds],  # per process: file-mapped / anonymous
    }


def run_point(point: str, logdir: str) -> dict:
    processes = POINTS[point].processes
    config_for(point, logdir)  # writes the pipeline (and the reward's files) before any process starts
    out = tempfile.mkdtemp(prefix=f"plan_{point}_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    cmd += [__file__, "--worker", point, "--logdir", logdir, "--out", out]
    start = time.time()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(processes)]
    kinds = [{k: r[k] for k in ("setup_file", "setup_anon", "end_file", "end_anon")} for r in ranks]
    seconds = time.time() - start
    return _row(point, [r["epoch"] for r in ranks], [r["setup"] for r in ranks], predict(point, logdir), seconds, kinds)


def describe(pt: Point) -> str:
    """The run of a point in words (the table's column)."""
    words = ["LoRA r 4" if pt.lora else "full", f"batch {pt.batch}"]
    if pt.trained > 1:
        words.append(f"{pt.trained} backward passes per step")
    if pt.checkpointing:
        words.append("checkpointing")
    if pt.beta:
        words.append("KL (reference swapped in)")
    if pt.precision == "bf16":
        words.append("bf16 autocast")
    if pt.small:
        words.append("d = 768, 156 M")
    if pt.reward:
        words.append("a 86 M CLIP reward")
    return ", ".join(words)


def table(results: Path) -> str:
    """The markdown table of a results file: per point the predicted and measured peaks (the point's, and the
    set-up's on 2 processes: one process's set-up maps its weights untouched), the errors, the phase the
    prediction peaks in."""

    def gib(xs):
        return ", ".join(f"{x:.2f}" for x in xs)

    lines = [
        "| point | processes, strategy | run | predicted peak GiB (phase) | measured GiB | error | set-up: predicted, "
        "measured GiB | error | measured on |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in results.read_text().splitlines():
        r = json.loads(line)
        pt = Point(**r["setting"]) if isinstance(r["setting"], dict) else Point(*r["setting"])
        setup = "—", "—"
        if pt.processes > 1:
            setup = (
                f"{r['setup_predicted_gib']:.2f}, {gib(r['setup_measured_gib'])}",
                f"{r['setup_error_pct']:+.1f} %",
            )
        lines.append(
            f"| `{r['point']}` | {pt.processes} × {pt.strategy} | {describe(pt)} | {r['predicted_gib']:.2f} "
            f"({r['predicted_phase']}) | {gib(r['measured_gib'])} | {r['error_pct']:+.1f} % | {setup[0]} | {setup[1]} | "
            f"{r.get('measured', '')[:10]} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="all")
    ap.add_argument("--worker")
    ap.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(), "planner_validation"))
    ap.add_argument("--out")
    ap.add_argument("--results", default="")
    ap.add_argument("--repredict", default="", help="a results file: print its rows with today's planner predictions")
    ap.add_argument("--table", default="", help="a results file: print its rows as docs/scaling.md's markdown table")
    args = ap.parse_args()
    if args.table:
        print(table(Path(args.table)))
        return
    if args.worker:
        worker(args.worker, args.logdir, args.out)
        return
    if args.repredict:
        for line in Path(args.repredict).read_text().splitlines():
            row = json.loads(line)
            gib = 2**30
            epoch = [x * gib for x in row["epoch_measured_gib"]]
            setup = [x * gib for x in row["setup_measured_gib"]]
            new = _row(row["point"], epoch, setup, predict(row["point"], args.logdir), row["seconds"])
            new.update({k: row[k] for k in ("rss_gib", "measured") if k in row})  # (what the run recorded)
            print(json.dumps(new))
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
