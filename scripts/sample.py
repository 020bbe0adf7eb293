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
  a world's kind            as the world's sample-kind plug-in writes it (ddpo_grpo/sample_kinds.py); MotionWorld's
                            motions [frames, 263] (e.g. worlds/motion/models/mdm): <stem>.npy (float32 [frames, 263],
                            denormalised HumanML3D features), <stem>.gif (stick figure, 20 fps) and <stem>.png
                            (filmstrip); the index row's "file" is the .npy, "gif" / "png" the drawings (none for a
                            non-finite sample)
  anything else             <stem>.npy (the decoded sample) and <stem>.png (the pipeline's preview)
  text (a language model:   no file: index.jsonl rows {"prompt", "response", "tokens", "finished", "seed"} (+ "index",
  a causal-LM directory or  "metadata"); --images_per_prompt responses per prompt, at the run's settings or the
  a run's output on one)    flags --temperature, --top_p, --max_prompt_length, --max_response_length, --stop, --greedy
                            (ddpo_grpo/text_sampling.py); response k of prompt i is the one scripts/evaluate.py
                            scores with the same --seed

Examples:
  python scripts/sample.py --model logs/my_run --prompts simple --out samples/my_run --seed 0
  python scripts/sample.py --model stabilityai/stable-diffusion-3.5-medium --prompts prompts.txt \
      --out samples/base --seed 0 --resolution 512 --num_steps 40 --guidance_scale 4.5

Sampling settings (--num_steps, --guidance_scale, --max_sequence_length, --resolution, --kernel,
--negative_prompt, --image_guidance_scale): a flag wins; else, for a training run's output, the run's own
(final/sampling.json; an older run: its manifest or newest checkpoint, ddpo_grpo/run_sampling.py), so a run's
samples look like its report's; else the model's recommended settings (its pipeline directory's sampling.json:
docs/models.md); else the defaults of ddpo_grpo/sampling_cli.py's DEFAULT_SAMPLING. The values
used, and where each came from, are printed.

Sampling is exactly the policy's sampler (``ddpo_grpo.rollout.sample_rollout`` on the model family's
``Policy`` adapter), so images match what training and its evaluation images see. The initial noise of
image k of prompt i is drawn from a seed derived from (--seed, i, k) only, so with the default
--noise_level 0 (deterministic ODE / DDIM η=0) an image does not depend on --batch_size or on the
other prompts. Generic denoiser pipelines take --kernel ("ddim": deterministic DDIM at noise level 0, what
the motion recipes evaluate with; "ddpm": at noise level 0 the posterior-mean chain; "" = the scheduler's kind). With --noise_level > 0 each step also draws noise from a generator seeded per batch,
so stochastic samples are reproducible for a given (--seed, --batch_size) but change with the batching.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ddpo_grpo.cli import UsageError, check_model_source, check_rows_for, load_model, load_rows
from ddpo_grpo.evaluation import image_seed  # (shared with scripts/evaluate.py)
from ddpo_grpo.sample_kinds import kind_of_samples, write_sample, written_formats
from ddpo_grpo.sampling_cli import (
    add_sampling_flags,
    check_out,
    check_sampling,
    device_of,
    policy_from_flags,
    resolve_and_check,
    run_command,
)
from ddpo_grpo.script_args import ScriptParser, script_parser
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.text_sampling import add_text_flags, is_text, write_text_samples


def build_parser() -> ScriptParser:
    p = script_parser(
        __file__,
        "Sample one PNG (images), .gif/.mp4/.png (videos) or .npy/.gif/.png (motions) per prompt, and an "
        "index.jsonl, from a pipeline or a run's output.",
    )
    p.add_argument("--model", required=True, help="pipeline directory, hub id, or a run directory / its final/")
    p.add_argument("--prompts", required=True, help=".txt / .json / .jsonl file or a built-in prompt list name")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    add_sampling_flags(p, batch_size=8)
    p.add_argument(
        "--noise_level",
        type=float,
        default=0.0,
        help="kernel stochasticity: 0 = deterministic ODE / DDIM; > 0 samples with the policy's SDE (η for SD)",
    )
    p.add_argument("--sde_type", default=None, help="deprecated: the old name of --kernel for flow models")
    p.add_argument("--fps", type=int, default=16, help="video families: frames per second of the GIF / MP4")
    p.add_argument("--images_per_prompt", type=int, default=1, help="images (responses) per prompt")
    add_text_flags(p)
    return p


def _check_args(args) -> None:
    check_sampling(args)
    for name in ("images_per_prompt", "fps"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.noise_level < 0:
        raise UsageError(f"--noise_level must be >= 0, got {args.noise_level}")
    check_out(args.out)
    problem = check_model_source(args.model)
    if problem:
        raise UsageError(f"--model {problem}")


def sample(args) -> list[dict]:
    """Write the samples and index.jsonl described by ``args``; return the index rows."""
    import torch

    from ddpo_grpo.rollout import sample_rollout

    _check_args(args)
    rows = load_rows(args.prompts)
    pipeline = load_model(args.model)
    device = device_of(args)
    if is_text(pipeline):  # a language model: responses in index.jsonl
        return write_text_samples(args, rows, pipeline, device)
    resolve_and_check(args)  # the run's settings filled in, and checked
    policy, _ = policy_from_flags(pipeline, args, sde_type=args.sde_type)
    check_rows_for(policy, rows, args.prompts)  # an image-editing model needs rows with source images
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
            kind = kind_of_samples(rollout.samples)
            for (i, k), seed, decoded in zip(batch, seeds, rollout.samples):
                stem = f"{i:05d}_{k}" if many else f"{i:05d}"
                files = write_sample(decoded, kind, out, stem, rows[i]["prompt"], policy, args.fps)
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
    print(written_formats(kind, {"file": entry["file"], **files}), flush=True)  # (the last sample's files)
    return index_rows


def main(argv=None) -> int:
    return run_command(build_parser(), sample, argv)


if __name__ == "__main__":
    sys.exit(main())
