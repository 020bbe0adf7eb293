"""Sample from a pipeline or a finished run: one file (set) per prompt (per sample) and an index.jsonl.

Usage:
  python scripts/sample.py --model DIR --prompts FILE --out DIR --seed N [options]

  --model    a diffusers pipeline directory, a hub id, or a training run's output (the run directory
             or its final/; a LoRA run is loaded as its base model plus the exported LoRA weights)
  --prompts  a .txt (one prompt a line), .json (list of {"prompt": ...}) or .jsonl file, or a
             built-in prompt list name (see ddpo_grpo.prompts.BUILTIN_PROMPTS)
  --out      output directory (created): 00000.png, 00001.png, ... and index.jsonl with one line
             {"prompt": ..., "file": ..., "seed": ...} per image (file relative to --out); with
             --images_per_prompt K > 1 files are 00000_0.png ... 00000_{K-1}.png and rows carry
             "index" (k); the other fields of a JSON prompt row are copied under "metadata".

What is written depends on the kind of the decoded samples:
  images [3, H, W]          <stem>.png (as above)
  videos [F, 3, H, W]       (video families, e.g. Wan; --num_frames) <stem>.gif (animated, --fps), <stem>.mp4 when
                            PyAV is installed (the "video" extra) and <stem>.png (a filmstrip); the index row's "file"
                            is the .mp4, else the .gif, with "gif" / "png" beside it (ddpo_grpo/video.py)
  motions [frames, 263]     (MotionWorld pipelines, e.g. worlds/motion/models/mdm) <stem>.npy (float32
                            [frames, 263], denormalised HumanML3D features), <stem>.gif (stick figure, 20 fps)
                            and <stem>.png (filmstrip); the index row's "file" is the .npy, "gif" / "png" the
                            drawings (none for a non-finite sample)
  anything else             <stem>.npy (the decoded sample) and <stem>.png (the pipeline's preview)

Examples:
  python scripts/sample.py --model logs/my_run --prompts simple --out samples/my_run --seed 0
  python scripts/sample.py --model stabilityai/stable-diffusion-3.5-medium --prompts prompts.txt \
      --out samples/base --seed 0 --resolution 512 --num_steps 40 --guidance_scale 4.5

Sampling settings (--num_steps, --guidance_scale, --max_sequence_length, --resolution, --kernel,
--negative_prompt, --image_guidance_scale): a flag wins; else, for a training run's output, the run's own
(final/ddpo_grpo_final.json's "sampling", else its newest checkpoint's config: ddpo_grpo/cli.py), so a run's
samples look like its report's; else the defaults of DEFAULT_SAMPLING. The values used, and where each came
from, are printed.

Sampling is exactly the policy's sampler (``ddpo_grpo.rollout.sample_rollout`` on the model family's
``Policy`` adapter), so images match what training and its evaluation images see. The initial noise of
image k of prompt i is drawn from a seed derived from (--seed, i, k) only, so with the default
--noise_level 0 (deterministic ODE / DDIM η=0) an image does not depend on --batch_size or on the
other prompts. Generic denoiser pipelines take --kernel ("ddim": deterministic DDIM at noise level 0, what
the motion recipes evaluate with; "ddpm": at noise level 0 the posterior-mean chain; "" = the scheduler's kind). With --noise_level > 0 each step also draws noise from a generator seeded per batch,
so stochastic samples are reproducible for a given (--seed, --batch_size) but change with the batching.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ddpo_grpo.cli import (
    UsageError,
    check_model_source,
    load_model,
    load_rows,
    native_resolution,
    resolve_sampling,
)
from ddpo_grpo.evaluation import image_seed  # (shared with scripts/evaluate.py)
from ddpo_grpo.seeding import derive_seed

#: sampling settings when neither a flag nor the run's own settings give them (resolution None = native)
DEFAULT_SAMPLING = {
    "num_steps": 40,
    "guidance_scale": 4.5,
    "max_sequence_length": 77,
    "resolution": None,
    "kernel": "",
    "negative_prompt": "",
    "image_guidance_scale": None,
    "num_frames": 0,
    "guidance_scale_2": None,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Sample one PNG (images), .gif/.mp4/.png (videos) or .npy/.gif/.png (motions) per prompt, and an "
        "index.jsonl, from a pipeline or a run's output.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="pipeline directory, hub id, or a run directory / its final/")
    p.add_argument("--prompts", required=True, help=".txt / .json / .jsonl file or a built-in prompt list name")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument(
        "--seed", type=int, default=0, help="base seed; image k of prompt i uses a seed derived from (seed, i, k)"
    )
    p.add_argument("--num_steps", type=int, default=None, help="denoising steps (default: the run's, else 40)")
    p.add_argument(
        "--guidance_scale",
        type=float,
        default=None,
        help="classifier-free guidance weight, <= 1: off (default: the run's, else 4.5)",
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="image side in pixels (default: the run's, else the pipeline's native size, denoiser sample_size x "
        "VAE factor)",
    )
    p.add_argument(
        "--max_sequence_length",
        type=int,
        default=None,
        help="text tokens for encoders that take it, T5 (default: the run's, else 77)",
    )
    p.add_argument(
        "--noise_level",
        type=float,
        default=0.0,
        help="kernel stochasticity: 0 = deterministic ODE / DDIM; > 0 samples with the policy's SDE (η for SD)",
    )
    p.add_argument("--sde_type", default=None, help="deprecated: the old name of --kernel for flow models")
    p.add_argument(
        "--kernel",
        default=None,
        choices=["", "flow_grpo", "dance", "cps", "ddim", "ddpm"],
        help="the transition kernel (sample.kernel; '' = the family's default: flow_grpo, ddim, or a denoiser "
        "pipeline's scheduler kind; default: the run's)",
    )
    p.add_argument(
        "--negative_prompt",
        default=None,
        help="negative prompt for classifier-free guidance (default: the run's, else '')",
    )
    p.add_argument(
        "--image_guidance_scale",
        type=float,
        default=None,
        help="image-conditioned pipelines: the image guidance s_I >= 1 (default: the run's, else the adapter's)",
    )
    p.add_argument(
        "--num_frames",
        type=int,
        default=None,
        help="video families: frames per video (Wan: 4k + 1; default: the run's, else 0 = the family's default)",
    )
    p.add_argument(
        "--guidance_scale_2",
        type=float,
        default=None,
        help="two-expert models (Wan 2.2): the low-noise expert's CFG scale (default: the run's, else --guidance_scale)",
    )
    p.add_argument("--fps", type=int, default=16, help="video families: frames per second of the GIF / MP4")
    p.add_argument("--batch_size", type=int, default=8, help="images per denoiser batch")
    p.add_argument("--images_per_prompt", type=int, default=1, help="images per prompt")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    return p


def _check_args(args) -> None:
    for name in ("num_steps", "batch_size", "images_per_prompt", "max_sequence_length", "fps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.noise_level < 0:
        raise UsageError(f"--noise_level must be >= 0, got {args.noise_level}")
    if args.resolution is not None and args.resolution < 1:
        raise UsageError(f"--resolution must be a positive number of pixels, got {args.resolution}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} is a file; give a directory (created if missing)")
    problem = check_model_source(args.model)
    if problem:
        raise UsageError(f"--model {problem}")


def _save_png(image, path: Path) -> None:
    """image: [3, H, W] float in [0, 1] -> 8-bit RGB PNG."""
    import torch
    from PIL import Image

    array = (image.clamp(0, 1) * 255).round().to(dtype=torch.uint8).permute(1, 2, 0).cpu().numpy()
    Image.fromarray(array).save(path)


def _write_sample(sample, kind: str, out: Path, stem: str, title: str, policy, fps: int = 16) -> dict[str, str]:
    """Write one decoded sample as its kind says (module docstring); return the index row's file fields."""
    import numpy as np

    if kind == "image":
        _save_png(sample, out / f"{stem}.png")
        return {"file": f"{stem}.png"}
    if kind == "video":
        from ddpo_grpo.video import write_video

        return write_video(sample, out, stem, fps)
    if kind == "motion":
        from worlds.motion.files import write_motion

        return write_motion(sample, out, stem, title=title)
    np.save(out / f"{stem}.npy", sample.detach().float().cpu().numpy())
    _save_png(policy.preview(sample[None])[0], out / f"{stem}.png")
    return {"file": f"{stem}.npy", "png": f"{stem}.png"}


def sample_kind(samples) -> str:
    """Return "image" ([B, 3, H, W]), "video" ([B, F, 3, H, W]), "motion" ([B, frames, 263] HumanML3D features) or
    "array" (anything else)."""
    from foundation.images import is_video
    from worlds.motion.files import is_motion

    if samples.ndim == 4 and samples.shape[1] == 3:
        return "image"
    if is_video(samples):
        return "video"
    return "motion" if is_motion(samples) else "array"


def sample(args) -> list[dict]:
    """Write the samples and index.jsonl described by ``args``; return the index rows."""
    import torch

    from ddpo_grpo.policies import build_policy
    from ddpo_grpo.rollout import sample_rollout

    _check_args(args)
    rows = load_rows(args.prompts)
    resolve_sampling(args, args.model, DEFAULT_SAMPLING)
    _check_args(args)  # again, with the run's settings filled in
    pipeline = load_model(args.model)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    resolution = args.resolution or native_resolution(pipeline)
    extra = {"kernel": args.kernel} if args.kernel else {}
    if args.image_guidance_scale is not None:  # (read by the image-conditioned families only)
        extra["image_guidance_scale"] = args.image_guidance_scale
    if args.guidance_scale_2 is not None:  # (read by two-expert families only)
        extra["guidance_scale_2"] = args.guidance_scale_2
    try:
        policy = build_policy(
            pipeline,
            resolution=resolution,
            max_sequence_length=args.max_sequence_length,
            num_frames=args.num_frames,
            sde_type=args.sde_type,
            **extra,
        )
    except ValueError as exc:
        flag = f"--kernel {args.kernel!r}" if "kernel" in str(exc) else f"--resolution {resolution}"
        flag = f"--num_frames {args.num_frames}" if "num_frames" in str(exc) else flag
        flag = f"--guidance_scale_2 {args.guidance_scale_2}" if "guidance_scale_2" in str(exc) else flag
        raise UsageError(f"{flag}: {exc}") from exc
    pipeline.to(device)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    many = args.images_per_prompt > 1
    items = [(i, k) for i in range(len(rows)) for k in range(args.images_per_prompt)]
    index_rows = []
    with open(out / "index.jsonl", "w", encoding="utf-8") as index:
        for b, start in enumerate(range(0, len(items), args.batch_size)):
            batch = items[start : start + args.batch_size]
            seeds = [image_seed(args.seed, i, k) for i, k in batch]
            generator = torch.Generator(device).manual_seed(derive_seed(args.seed, 1, b, args.batch_size))
            rollout = sample_rollout(
                policy,
                policy.denoiser,
                [rows[i] for i, _ in batch],
                seeds=seeds,
                num_steps=args.num_steps,
                guidance_scale=args.guidance_scale,
                noise_level=args.noise_level,
                generator=generator,
                negative_prompt=args.negative_prompt,
            )
            kind = sample_kind(rollout.samples)
            for (i, k), seed, decoded in zip(batch, seeds, rollout.samples):
                stem = f"{i:05d}_{k}" if many else f"{i:05d}"
                files = _write_sample(decoded, kind, out, stem, rows[i]["prompt"], policy, args.fps)
                entry = {"prompt": rows[i]["prompt"], "file": files.pop("file"), **files}
                if many:
                    entry["index"] = k
                entry["seed"] = seed
                metadata = {key: v for key, v in rows[i].items() if key != "prompt"}
                if metadata:
                    entry["metadata"] = metadata
                index.write(json.dumps(entry) + "\n")
                index_rows.append(entry)
            index.flush()
            print(f"{len(index_rows)}/{len(items)} samples written to {out}", flush=True)
    return index_rows


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sample(args)
    except UsageError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
