r"""ShapesWorld's commands: ``python -m worlds.shapes <command> [flags]`` (``--help`` lists them, ``<command> --help``
its flags).

* ``pretrain`` — pretrain a small text-to-image model (SD3 or SD architecture) on CPU. ``--arch sd3`` (default)
  trains everything from scratch; ``--arch sd`` then builds the SD-architecture counterpart on top of an SD3
  result (``--base``). Each architecture's settings are the fields of its config dataclass, one flag each
  (``pretrain --arch sd --help`` lists the SD ones). ``--arch sd3`` (:mod:`worlds.shapes.pretrain.sd3`): an
  AutoencoderKL 64×64×3 ↔ 16×16×4 on fresh renders, then two word-level CLIP text encoders and an
  SD3Transformer2DModel by rectified flow, saved as a ``StableDiffusion3Pipeline`` (no T5). ``--arch sd``
  (:mod:`worlds.shapes.pretrain.sd`): a ``StableDiffusionPipeline`` whose frozen VAE, tokenizer and (first two
  layers of) text encoder come from ``--base`` (default: the shipped SD3 model), a UNet2DConditionModel trained
  by DDPM on SD's schedule. Both run the core's pretraining loop (``ddpo_grpo/pretraining/``): data rendered on
  the fly from the *train* split, EMA of the weights, evaluations on the *test* split with the library's
  deterministic evaluation (``<out>/pretrain_log.jsonl``), atomic checkpoints every ``--ckpt_every`` steps in
  ``<out>/checkpoints/``, the EMA pipeline in ``<out>/final`` and its evaluation in ``<out>/final_eval.json``.
  ``--resume`` continues the run exactly, with the config saved in the checkpoint (``--threads`` and the
  evaluation/bookkeeping flags may change; a larger ``--flow_steps`` / ``--steps`` extends a finished or running
  run, re-stretching the cosine LR schedule over the new total). Launch (≈ 45 min on one CPU thread with the
  defaults) and resume::

      nohup .venv/bin/python -m worlds.shapes pretrain --out /tmp/shapes_pretrain/sd3 --threads 1 \
          > /tmp/shapes_pretrain/sd3.log 2>&1 &
      nohup .venv/bin/python -m worlds.shapes pretrain --out /tmp/shapes_pretrain/sd3 --threads 1 --resume \
          >> /tmp/shapes_pretrain/sd3.log 2>&1 &

      # SD architecture on the shipped SD3 model's VAE / tokenizer / text encoder (≈ 40 min on one thread)
      nohup env OMP_NUM_THREADS=1 .venv/bin/python -m worlds.shapes pretrain --arch sd \
          --out /tmp/shapes_pretrain/sd --threads 1 > /tmp/shapes_pretrain/sd.log 2>&1 &
      # resume it: the same line with --resume (the saved config is reused, so --arch sd is all it needs)

      # continue a finished SD3 run for 8000 more flow steps, 30 % of its images near misses of their captions
      # (the README's base-model experiment; --caption_noise and a larger --flow_steps may change on --resume)
      nohup .venv/bin/python -m worlds.shapes pretrain --out /tmp/shapes_pretrain/sd3 --threads 1 --resume \
          --flow_steps 13000 --caption_noise 0.3 >> /tmp/shapes_pretrain/sd3.log 2>&1 &

  Load the results: ``StableDiffusion3Pipeline.from_pretrained("/tmp/shapes_pretrain/sd3/final",
  text_encoder_3=None, tokenizer_3=None)``, ``StableDiffusionPipeline.from_pretrained("/tmp/shapes_pretrain/sd/final")``.
* ``split`` — regenerate the train/test prompt split (deterministic; no RNG, SHA-256 ranks; the rule is in
  :mod:`worlds.shapes.grammar`). Each line is ``{"prompt", "task", "objects": [{"color", "shape", "count"}],
  "relation"}``::

      python -m worlds.shapes split            # rewrite worlds/shapes/data/shapes_{train,test}.jsonl
      python -m worlds.shapes split --check    # exit 1 if the shipped files differ from a regeneration
      python -m worlds.shapes split --out DIR --seed 3   # another split, elsewhere

* ``calibration`` — the judge's agreement with the ground truth; ``--calibrate`` every calibration table
  (:mod:`worlds.shapes.calibration`).
* ``agreement`` — the judge and the independent detector side by side (:mod:`worlds.shapes.agreement`).
* ``train-detector`` — train the detector's shape classifier from a seed (:mod:`worlds.shapes.detector.train`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROG = "python -m worlds.shapes"


def _pretrain_flags(arch: str):
    def add(p: argparse.ArgumentParser) -> None:
        from ddpo_grpo.pretraining.cli import add_config_flags, add_run_flags

        from .pretrain import ARCHS, recipe

        p.add_argument(
            "--arch",
            choices=sorted(ARCHS),
            default="sd3",
            help="sd3: StableDiffusion3Pipeline from scratch; sd: StableDiffusionPipeline on --base's "
            f"VAE/tokenizer/text encoder. The config flags below are those of --arch (now: {arch})",
        )
        add_run_flags(p)
        add_config_flags(p, recipe(arch).config_class)

    return add


def _pretrain(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from ddpo_grpo.pretraining.cli import run_parsed

    from .pretrain import recipe

    run_parsed(recipe(args.arch), vars(args), label=f"--arch {args.arch}", skip=("command", "arch"))


def _split_flags(p: argparse.ArgumentParser) -> None:
    from .grammar import DATA_DIR, SPLIT_SEED

    p.add_argument("--out", default=str(DATA_DIR), help="output directory (default: the shipped worlds/shapes/data)")
    p.add_argument("--seed", type=int, default=SPLIT_SEED, help="split seed (the shipped split uses %(default)s)")
    p.add_argument("--check", action="store_true", help="only compare the files in --out with a regeneration")


def _split(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    from .grammar import make_split, split_rule, write_split

    out = Path(args.out)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write_split(Path(tmp), args.seed)
            stale = [
                str(out / p.name)
                for p in fresh.values()
                if not (out / p.name).is_file() or (out / p.name).read_bytes() != p.read_bytes()
            ]
        if stale:
            print(f"out of date: {', '.join(stale)}; run `python -m worlds.shapes split`", file=sys.stderr)
            return 1
        print(f"{out}: shapes split (seed {args.seed}) is up to date")
        return 0
    paths = write_split(out, args.seed)
    split = make_split(args.seed)
    print(f"held-out rule (seed {args.seed}): {split_rule(args.seed)}")
    for name, path in paths.items():
        print(f"wrote {path}: {len(split[name])} prompts")
    return 0


def _calibration_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=200, help="renders per task / per distortion level / fit scenes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibrate", action="store_true", help="all three tables (several minutes at --n 200)")


def _calibration(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from .calibration import (
        fit_statistics,
        format_fits,
        format_rejection,
        format_table,
        measure_agreement,
        measure_rejection,
    )
    from .judge import MIN_FIT_IOU

    print(f"## Agreement with the ground truth (n = {args.n} per task, seed {args.seed})")
    print("cells: positives judged strict=1 / hard negatives judged strict=0")
    print(format_table(measure_agreement(args.n, args.seed)), flush=True)
    if not args.calibrate:
        return
    print(f"\n## Gray zones: rejection rates (n = {args.n} scenes per cell, seed {args.seed})")
    print(format_rejection(measure_rejection(args.n, args.seed)), flush=True)
    print(f"\n## Fits of rendered objects to their own class ({args.n} two-object scenes, seed {args.seed})")
    print(f"thresholds: MAX_HAUSDORFF = 1 px, MIN_FIT_IOU = {MIN_FIT_IOU}")
    print(format_fits(fit_statistics(args.n, args.seed)), flush=True)


def _agreement_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=100, help="scenes per task (table 1) / per distortion level (table 2)")
    p.add_argument("--seed", type=int, default=0)


def _agreement(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from .agreement import format_gray, format_truth, measure_gray, measure_truth

    truth = measure_truth(args.n, args.seed)
    print(f"## Ground truth ({truth['clean']['n']} scenes, {args.n} per task, seed {args.seed})")
    print(
        "pos: own prompt judged strict 1; neg: a hard negative judged strict 0; agree: same verdict on the own prompt"
    )
    print(format_truth(truth), flush=True)
    print(f"\n## Gray zones: rejection rates (n = {args.n} scenes per cell, hard-edged, seed {args.seed})")
    print(format_gray(measure_gray(args.n, args.seed)), flush=True)


def _train_detector_flags(p: argparse.ArgumentParser) -> None:
    from .detector.net import WEIGHTS

    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenes", type=int, default=8000, help="training scenes (10 %% more are held out)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--out", default=str(WEIGHTS))


def _train_detector(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    import math
    import time

    import numpy as np
    import torch

    from .detector.net import CLASSES
    from .detector.train import accuracy, examples, fit, save

    torch.set_num_threads(1)
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    x, y = examples(args.scenes, rng)
    xv, yv = examples(max(1, math.ceil(args.scenes / 10)), rng)
    counts = {c: int((y == i).sum()) for i, c in enumerate(CLASSES)}
    print(f"{len(y)} training patches {counts}, {len(yv)} held out; data {time.time() - t0:.0f} s", flush=True)
    model = fit(x, y, args.epochs, args.seed)
    print("held-out accuracy:", {k: round(v, 4) for k, v in accuracy(model, xv, yv).items()})
    save(model, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.2f} MB) in {time.time() - t0:.0f} s")


def commands(arch: str = "sd3") -> dict:
    """command -> (one-line description, flags, action); ``arch``: the architecture whose flags ``pretrain`` shows."""
    return {
        "pretrain": (
            "Pretrain a small ShapesWorld text-to-image model (SD3 or SD architecture) on CPU.",
            _pretrain_flags(arch),
            _pretrain,
        ),
        "split": (
            "Regenerate the ShapesWorld train/test prompt split (deterministic; no RNG, SHA-256 ranks).",
            _split_flags,
            _split,
        ),
        "calibration": (
            "Measure the ShapesWorld judge: agreement with the ground truth under mild perturbations (default), "
            "or with --calibrate every calibration table (agreement, gray-zone rejection, fits).",
            _calibration_flags,
            _calibration,
        ),
        "agreement": ("The world judge and the independent detector side by side.", _agreement_flags, _agreement),
        "train-detector": (
            "Train the detector's shape classifier from a seed.",
            _train_detector_flags,
            _train_detector,
        ),
    }


def build_parser(arch: str = "sd3") -> argparse.ArgumentParser:
    """The top parser; ``pretrain`` carries the config flags of ``arch``."""
    from worlds.commands import command_parser

    return command_parser(PROG, __doc__.split("\n\n")[0], commands(arch))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status. ``pretrain``'s flags depend on ``--arch``, read first."""
    from worlds.commands import run_command

    from .pretrain import ARCHS

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--arch", choices=sorted(ARCHS), default="sd3")
    arch = pre.parse_known_args(argv)[0].arch
    return run_command(build_parser(arch), argv)


if __name__ == "__main__":
    sys.exit(main())
