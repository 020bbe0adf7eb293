"""Overhead benchmark: what the RL bookkeeping costs on top of the unavoidable model work, per model family.

What is measured, on the same tiny pipeline (``ddpo_grpo.tiny``: "sd3", "sd", "flux", "qwen_image", "wan", …, or
"all"), the same prompts (with source images for image-conditioned families), number of steps, batch size and
resolution (videos: 5 frames):

(a) rollout ÷ pipeline   ``ddpo_grpo.rollout.sample_rollout`` (every transition recorded with its
    log-prob, the kernel's default noise: flow_grpo noise_level 0.7, DDIM eta 1.0) against the family's plain
    diffusers call on the SAME pipeline object and initial noise, ``Policy.reference_sample`` (``pipeline(prompt,
    negative_prompt, num_inference_steps, guidance_scale, height, width, latents, output_type="pt", ...)``, with the
    policy's scheduler kind; progress bar off), both under the trainer's autocast (mixed_precision), as its rollouts
    run. Both encode the prompts (and source images), run T CFG denoiser passes
    and decode to tensors. Where the pipeline takes one prompt per call (Qwen-Image-Edit-Plus, Wan image-to-video),
    the baseline is one call per prompt, as a user of that pipeline must run it. Target ≤ 1.05.
(b) train pass ÷ bare loop   ``Trainer.update_phase`` (config/quickstart.py:tiny, LoRA) over a rollout from
    ``Trainer.sample_phase``, against a bare loop over the same minibatches and trained steps:
    ``policy.predict`` with CFG, a trivial loss ``out.float().pow(2).mean()``, ``backward()``, and one
    optimizer step + zero_grad per minibatch. The bare loop's optimizer is a separate AdamW with the
    trainer's hyper-parameters but lr = 0 (same arithmetic as the trainer's step, weights untouched),
    and its inputs are gathered before the clock starts. Target ≤ 1.10.

On a GPU every timed unit ends with ``torch.cuda.synchronize()``, so that it times the queued work, not its launch.

Why ratios: this machine's CPU cores are shared with other jobs, so absolute seconds drift by tens
of percent from minute to minute. Each measured function is warmed up once, then the two sides are
timed alternately (A, B, A, B, …) in one process, so both see the same machine state; the table
reports the median time of each side and the median of the per-repeat ratios A/B, which is far more
stable than either time.

Threads: torch's thread count is left at its default unless --threads is given. On a machine whose
cores are shared with other busy processes (load average ≥ number of cores), multi-threaded torch ops
stall on their thread barriers whenever one worker thread is descheduled: on the 2-core dev box with
two other jobs running, a 10-step tiny SD3 rollout took ~0.11 s with 1 thread and 1–7 s with the
default 2. Ratios measured in that state are meaningless (one run gave 15.6 with a min–max of
0.01–23.9), so the script warns when it sees an oversubscribed machine: rerun with --threads 1.

How to run:
    python scripts/benchmark.py                          # defaults: both models, 32 px, 7 repeats
    python scripts/benchmark.py --resolution 32,64 --repeats 5 --models sd3
    python scripts/benchmark.py --threads 1               # steady numbers on a shared, busy CPU

How to read the table: one row per (model, resolution, measurement). "ours" is our code path, "baseline"
the plain reference it is compared with, "ratio" = median over repeats of ours/baseline (1.00 =
no overhead), "min-max" the spread of the per-repeat ratios (a wide spread = a noisy machine: add
--repeats or use --threads 1), "target" the ceiling we aim for; "ok" / "MISS" says whether the median
ratio meets it. Times are seconds per call (one rollout batch / one update_phase).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

from ddpo_grpo.cli import UsageError
from ddpo_grpo.script_args import run_script, script_parser

TARGETS = {"rollout": 1.05, "train": 1.10}


def all_models() -> list[str]:
    """The tiny families ``--models all`` measures: every registered family's ``pretrained.tiny`` name whose spec says
    ``benchmark`` (``ddpo_grpo.policies.family``; the generic denoiser has no diffusers call to compare with)."""
    from ddpo_grpo.policies import families

    return [spec.name for spec in families().values() if spec.benchmark]


def interleaved(fn_a, fn_b, repeats: int, min_unit: float) -> dict:
    """Warm up each function once, then time A, B, A, B, … ; medians and median of per-repeat ratios.

    Each timed unit calls its function ``number`` times, ``number`` chosen (from one extra call of B) so
    that a unit lasts at least ``min_unit`` seconds: very short units are at the mercy of one scheduler
    hiccup. Times are reported per call.
    """
    fn_a()
    fn_b()
    _synchronize()
    start = time.perf_counter()
    fn_b()
    _synchronize()
    number = max(1, math.ceil(min_unit / max(time.perf_counter() - start, 1e-9)))
    times_a, times_b = [], []
    for _ in range(repeats):
        for fn, times in ((fn_a, times_a), (fn_b, times_b)):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            _synchronize()
            times.append((time.perf_counter() - start) / number)
    ratios = [a / b for a, b in zip(times_a, times_b)]
    return {
        "ours": statistics.median(times_a),
        "baseline": statistics.median(times_b),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "number": number,
    }


def _synchronize() -> None:
    """Wait for the GPU's queued work (a timer read before it would time the launches, not the work)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def make_config(model: str, args, resolution: int, logdir: str):
    from config.quickstart import tiny

    cfg = tiny()
    cfg.logdir = logdir
    cfg.run_name = f"bench_{model}_{resolution}"
    cfg.pretrained.tiny = model
    cfg.sample.num_steps = args.num_steps
    cfg.sample.batch_size = args.batch_size
    cfg.sample.num_batches_per_epoch = 1
    cfg.sample.resolution = resolution
    cfg.sample.max_sequence_length = 64
    cfg.sample.num_frames = 5  # video families only
    cfg.reward.fns = {"redness": 1.0}  # images and videos alike (reward_models/color.py)
    cfg.prompts.source = _prompt_file(logdir)  # rows with a source image, for image-conditioned families
    cfg.save_freq = 0
    cfg.logging.progress = False
    cfg.logging.tracker = "none"
    cfg.logging.image_freq = 0
    return cfg


def _prompt_file(logdir: str) -> str:
    """A .jsonl of 8 prompts, each row with a 32-pixel source image (read by image-conditioned families only)."""
    import json

    import numpy as np
    from PIL import Image

    path = os.path.join(logdir, "bench_prompts.jsonl")
    if not os.path.isfile(path):
        rng = np.random.default_rng(0)
        with open(path, "w") as f:
            for i in range(8):
                image = os.path.join(logdir, f"bench_source_{i}.png")
                Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
                f.write(json.dumps({"prompt": f"a photo of object {i}", "source_image": image}) + "\n")
    return path


def build_trainer(cfg):
    import diffusers
    import transformers

    from ddpo_grpo.trainer import Trainer

    for library in (diffusers, transformers):  # loading bars and save warnings would bury the table
        library.utils.logging.set_verbosity_error()
        library.utils.logging.disable_progress_bar()
    with contextlib.redirect_stdout(io.StringIO()):  # start-up banner
        return Trainer(cfg)


# ---------------------------------------------------------------------------------------- (a)
def bench_rollout(trainer, args) -> dict:
    """sample_rollout vs pipeline(...) on the trainer's own pipeline (same denoiser, LoRA included)."""
    from ddpo_grpo.rollout import initial_noise, sample_rollout

    s = trainer.config.sample
    policy, pipe = trainer.policy, trainer.policy.pipeline
    pipe.set_progress_bar_config(disable=True)
    policy.denoiser.eval()
    b = s.batch_size
    rows = [trainer.rows[i % len(trainer.rows)] for i in range(b)]
    seeds = list(range(b))
    noise = trainer.noise_level  # sample.noise_level (SD3: 0.7, flow_grpo; SD: DDIM η 1.0)
    device = policy.device  # looked up once: diffusers' ModelMixin.device walks every submodule

    def ours():
        generator = torch.Generator(device).manual_seed(0)
        sample_rollout(
            policy,
            policy.denoiser,
            rows,
            seeds=seeds,
            num_steps=s.num_steps,
            guidance_scale=s.guidance_scale,
            noise_level=noise,
            generator=generator,
            negative_prompt=s.negative_prompt,
        )

    latents = initial_noise(policy.latent_shape(), seeds, device)  # the rollout's own x_0

    def baseline():
        policy.reference_sample(rows, latents, s.num_steps, s.guidance_scale, s.negative_prompt)

    with torch.no_grad(), trainer.autocast():  # the trainer's precision (its rollouts run under it), both sides
        result = interleaved(ours, baseline, args.repeats, args.min_unit)
    policy.denoiser.train()
    return result


# ---------------------------------------------------------------------------------------- (b)
def bench_train(trainer, args) -> dict:
    """Trainer.update_phase vs the bare predict + backward + optimizer-step loop over the same inputs."""
    import dataclasses

    from ddpo_grpo.rollout import transition_inputs

    t, s = trainer.config.train, trainer.config.sample
    ep, timing = trainer.sample_phase(0)
    advantages, _ = trainer.advantage_phase(ep, trainer.reward_phase(ep, timing))
    rollout = ep.rollout
    guidance = s.guidance_scale if t.cfg else 1.0
    policy, model = trainer.policy, trainer.model

    # The bare loop's inputs, gathered before timing: per minibatch, per trained step k, (x_j, t_j, cond).
    n, mb = len(rollout), t.batch_size
    minibatches = []
    for i in range(n // mb):
        batch = rollout.select(torch.arange(i * mb, (i + 1) * mb))
        steps = []
        for k in range(batch.train_steps.shape[1]):
            x, timesteps, *_ = transition_inputs(batch, k)
            steps.append((x.contiguous(), timesteps.contiguous()))
        minibatches.append((batch.cond, steps))
    params = list(trainer.params.values())
    bare_optimizer = torch.optim.AdamW(
        params,
        lr=0.0,
        betas=(t.adam_beta1, t.adam_beta2),
        weight_decay=t.adam_weight_decay,
        eps=t.adam_epsilon,
    )
    state = {"epoch": 0}

    def ours():
        state["epoch"] += 1
        trainer.update_phase(dataclasses.replace(ep, index=state["epoch"]), advantages)

    def baseline():
        model.train()
        for _ in range(t.num_inner_epochs):
            for cond, steps in minibatches:
                for x, timesteps in steps:
                    with trainer.autocast():
                        out = policy.predict(model, x, timesteps, cond, guidance)
                    out.float().pow(2).mean().backward()
                bare_optimizer.step()
                bare_optimizer.zero_grad(set_to_none=True)

    before = [p.detach().to("cpu", copy=True) for p in params]  # host memory: a full fine-tune's copy would not fit
    baseline()
    if not all(torch.equal(a, p.detach().cpu()) for a, p in zip(before, params)):
        raise RuntimeError("the bare loop changed the trainable weights (its optimizer must have lr = 0)")
    result = interleaved(ours, baseline, args.repeats, args.min_unit)
    k_steps = rollout.train_steps.shape[1]
    result["detail"] = f"{n // mb} minibatches × K={k_steps} steps × {t.num_inner_epochs} inner epoch(s)"
    return result


# ---------------------------------------------------------------------------------------- main
def build_parser():
    summary, details = __doc__.split("\n\n", 1)
    parser = script_parser(__file__, summary, epilog=details)
    parser.add_argument("--repeats", type=int, default=7, help="timed A/B pairs per measurement (after 1 warm-up)")
    parser.add_argument("--num_steps", type=int, default=10, help="denoising steps T")
    parser.add_argument("--batch_size", type=int, default=8, help="images per sampling batch (sample.batch_size)")
    parser.add_argument(
        "--resolution", default="32", help="image side in pixels; a comma list runs each size, e.g. 32,64"
    )
    parser.add_argument(
        "--models", default="sd3,sd", help=f"comma list of tiny pipelines ({', '.join(all_models())}) or 'all'"
    )
    parser.add_argument("--only", default="rollout,train", help="comma list of measurements: rollout, train")
    parser.add_argument(
        "--min_unit", type=float, default=0.2, help="seconds; each timed unit repeats its call until this long"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch.set_num_threads(N) before measuring; 0 = leave torch's default (on a shared 2-core machine, "
        "1 gives far steadier numbers: see the note in the module docstring)",
    )
    return parser


def main(argv=None) -> int:
    """Measure and print the table; the exit status (2 and one line for a bad flag)."""
    return run_script(build_parser(), run, argv)


def _checked(args) -> tuple[list[str], list[int], set[str]]:
    """The models, resolutions and measurements of the flags; a bad one is a UsageError naming it."""
    models = all_models() if args.models == "all" else [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in all_models()]
    if unknown or not models:
        raise UsageError(f"--models {args.models!r}: give a comma list of {', '.join(all_models())}, or 'all'")
    try:
        resolutions = [int(r) for r in args.resolution.split(",") if r.strip()]
    except ValueError:
        resolutions = []
    if not resolutions or min(resolutions) < 1:
        raise UsageError(f"--resolution {args.resolution!r}: give a comma list of positive pixel sizes, e.g. 32,64")
    only = {m.strip() for m in args.only.split(",")}
    if not only or not only <= {"rollout", "train"}:
        raise UsageError(f"--only {args.only!r}: give a comma list of rollout, train")
    if args.repeats < 1 or args.num_steps < 1 or args.batch_size < 1:
        raise UsageError("--repeats, --num_steps and --batch_size must be >= 1")
    return models, resolutions, only


def run(args) -> None:
    models, resolutions, only = _checked(args)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; repeats={args.repeats} "
        f"num_steps={args.num_steps} batch_size={args.batch_size} resolution={resolutions}",
        flush=True,
    )
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if torch.get_num_threads() > 1 and load >= cores:
        print(
            f"WARNING: load average {load:.1f} on {cores} cores with {torch.get_num_threads()} torch threads: "
            "multi-threaded ops stall when cores are oversubscribed and the ratios below will be noise; "
            "rerun with --threads 1",
            flush=True,
        )
    results = []
    start_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ddpo_grpo_bench_") as logdir:
        for model in models:
            for resolution in resolutions:
                trainer = build_trainer(make_config(model, args, resolution, logdir))
                label = f"{model} @{resolution}px"
                if "rollout" in only:
                    r = bench_rollout(trainer, args)
                    results.append((label, "rollout / pipeline()", r, TARGETS["rollout"]))
                    print(
                        f"  {label}: rollout done (ratio {r['ratio']:.3f}, {r['number']} call(s) per timed unit)",
                        flush=True,
                    )
                if "train" in only:
                    r = bench_train(trainer, args)
                    results.append((label, "update_phase / bare loop", r, TARGETS["train"]))
                    print(
                        f"  {label}: train done (ratio {r['ratio']:.3f}, {r['number']} call(s) per timed unit; "
                        f"{r['detail']})",
                        flush=True,
                    )
                del trainer

    header = (
        f"{'model':<12} | {'measurement':<24} | {'ours (s)':>9} | {'baseline (s)':>12} | {'ratio':>6} | "
        f"{'min-max':>11} | target"
    )
    print()
    print(header)
    print("-" * len(header))
    for label, name, r, target in results:
        verdict = "ok" if r["ratio"] <= target else "MISS"
        print(
            f"{label:<12} | {name:<24} | {r['ours']:>9.4f} | {r['baseline']:>12.4f} | {r['ratio']:>6.3f} | "
            f"{r['ratio_min']:>5.2f}-{r['ratio_max']:<5.2f} | ≤ {target:.2f} {verdict}"
        )
    elapsed, load = time.perf_counter() - start_all, os.getloadavg()[0]
    print(f"\ntotal wall time {elapsed:.0f} s; load average now {load:.1f} on {cores} cores")


if __name__ == "__main__":
    sys.exit(main())
