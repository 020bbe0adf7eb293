r"""MotionWorld's commands: ``python -m worlds.motion <command> [flags]`` (``--help`` lists them, ``<command> --help``
its flags).

* ``pretrain`` — pretrain the text-to-motion base model (MDM architecture) from scratch on CPU. The recipe is
  :mod:`worlds.motion.pretrain` (its config fields are the flags): generated clips of the *train*-split prompts,
  an MDM-style transformer predicting x₀ under a cosine DDPM schedule with a word-level CLIP text encoder
  trained jointly, EMA of the weights, evaluations of the held-out *test* split (strict judge and physics per
  task) in ``<out>/pretrain_log.jsonl``, atomic checkpoints every ``--ckpt_every`` steps in
  ``<out>/checkpoints/``, the EMA pipeline (a ``DenoiserPipeline``) in ``<out>/final`` and its evaluation in
  ``<out>/final_eval.json``. The loop is the core's (``ddpo_grpo/pretraining/``). ``--resume`` continues the
  run exactly (same thread count), with the config saved in its checkpoint (evaluation / bookkeeping flags may
  change; a larger ``--steps`` extends it). Reproduce the shipped ``worlds/motion/models/mdm`` (the defaults,
  seed 0; 16 min on one CPU thread beside another run)::

      nohup env OMP_NUM_THREADS=1 python -m worlds.motion pretrain --out /tmp/motion_pretrain/mdm --threads 1 \
          > /tmp/motion_pretrain/mdm.log 2>&1 &
      # resume after an interruption: the same line with --resume

  Load the result: ``ddpo_grpo.policies.load_pipeline("/tmp/motion_pretrain/mdm/final")``.
* ``train-evaluator`` — train the text–motion evaluator (:mod:`worlds.motion.evaluator_train`) on CPU. Every
  field of the recipe (:class:`~worlds.motion.evaluator_train.TrainConfig`) and of the architecture
  (:class:`~worlds.motion.evaluator_model.EvaluatorConfig`) is a flag; the defaults reproduce the shipped model
  (``worlds/motion/models/evaluator``) from ``--seed 0``. The run folder ``--out`` holds ``checkpoint.pt``
  (every ``--eval_every`` steps), ``train_log.jsonl`` and the final model in ``final/``; ``--export`` also
  writes the final model there. Reproduce the shipped evaluator (≈ 20 min on one thread)::

      OMP_NUM_THREADS=1 nohup nice python -m worlds.motion train-evaluator --out /tmp/motion_eval \
          --export worlds/motion/models/evaluator > /tmp/motion_eval.log 2>&1 &
      # after an interruption: the same line with --resume (the saved recipe is reused)

* ``measure-evaluator`` — the evaluator's set metrics and reward separation on real, perturbed and mismatched
  clips (:mod:`worlds.motion.evaluator_measure`; the README's table).
* ``judge-agreement`` — the judge's strict agreement with the generator's labels (:mod:`worlds.motion.agreement`).
* ``physics`` — the physics metrics on generated clips, clean and altered (:mod:`worlds.motion.physics`).
* ``table`` — the HumanML3D-style table with standard errors of motions written by ``scripts/sample.py``
  (:mod:`worlds.motion.table`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from worlds.commands import pretrain_command

PROG = "python -m worlds.motion"


def _flag_type(default):
    if isinstance(default, bool):
        return lambda s: s.lower() in ("1", "true", "yes")
    if isinstance(default, tuple):
        kind = type(default[0])
        return lambda s: tuple(kind(x) for x in s.split(",") if x.strip())
    return type(default)


def _train_evaluator_flags(p: argparse.ArgumentParser) -> None:
    """The run's flags, then one per recipe field and one per architecture field."""
    from .evaluator_model import EvaluatorConfig
    from .evaluator_train import TrainConfig

    p.add_argument("--out", required=True, help="run folder (checkpoint.pt, train_log.jsonl, final/)")
    p.add_argument("--export", default=None, help="also write the final model into this folder")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tiny", action="store_true", help="toy sizes (TrainConfig.tiny()) for smoke tests")
    train_defaults, model_defaults = TrainConfig(), EvaluatorConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name != "model":
            value = getattr(train_defaults, f.name)
            p.add_argument(f"--{f.name}", type=_flag_type(value), default=None, help=f"recipe (default {value})")
    for f in dataclasses.fields(EvaluatorConfig):
        value = getattr(model_defaults, f.name)
        p.add_argument(f"--{f.name}", type=_flag_type(value), default=None, help=f"architecture (default {value})")


def _train_evaluator(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    import torch

    from .evaluator_model import EvaluatorConfig
    from .evaluator_train import TrainConfig, train

    torch.set_num_threads(max(1, args.threads))
    base = TrainConfig.tiny() if args.tiny else TrainConfig()
    given = {k: v for k, v in vars(args).items() if v is not None}
    model_kw = {f.name: given[f.name] for f in dataclasses.fields(EvaluatorConfig) if f.name in given}
    train_kw = {f.name: given[f.name] for f in dataclasses.fields(TrainConfig) if f.name in given and f.name != "model"}
    try:
        cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, **model_kw), **train_kw)
        train(cfg, args.out, resume=args.resume, export=args.export)
    except (ValueError, FileNotFoundError) as exc:
        from ddpo_grpo.cli import UsageError

        raise UsageError(str(exc)) from exc  # (one line, exit status 2; --debug: the traceback)
    return 0


def _measure_evaluator_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=("train", "test"), default="test")
    p.add_argument("--clips", type=int, default=4, help="clips per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=None, help="joint frames of every clip (default: natural)")
    p.add_argument("--model", default=None, help="evaluator folder (default: the shipped one)")
    p.add_argument("--json", default=None, help="also write the result as JSON here")


def _measure_evaluator(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    import torch

    from foundation.atomic_io import atomic_write_text

    from .evaluator_measure import format_measurement, measure
    from .evaluator_model import load_evaluator

    if args.clips < 1:
        p.error("--clips must be >= 1")
    torch.set_num_threads(1)
    res = measure(args.split, args.clips, args.seed, load_evaluator(args.model), frames=args.frames)
    print(format_measurement(res))
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(res, indent=1) + "\n")


def _judge_agreement_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=40, help="clips per task for the perturbation table")
    p.add_argument("--every", type=int, default=0, help="also judge K clean clips of every prompt")
    p.add_argument("--seed", type=int, default=0)


def _judge_agreement(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from .agreement import format_table, measure_agreement, measure_every

    if args.n < 1 or args.every < 0:
        p.error("--n must be >= 1 and --every >= 0")
    print("cells: generated clips judged strict=1 against their own prompt / against a wrong prompt judged strict=0")
    print(format_table(measure_agreement(args.n, args.seed)))
    if args.every:
        print(
            f"\nevery prompt x {args.every} clean clips; pos = strict 1 on its prompt, neg = strict 0 on every "
            "wrong prompt (mismatches)"
        )
        print("| task | clips | pos | wrong prompts | neg |\n|---|---|---|---|---|")
        for t, r in measure_every(args.every, args.seed).items():
            print(f"| {t} | {r['clips']} | {r['pos']:.4f} | {r['wrong_prompts']} | {r['neg']:.4f} |")


def _physics_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=100, help="clips")
    p.add_argument("--seed", type=int, default=0)


def _physics(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from .physics import measure

    if args.n < 1:
        p.error("--n must be >= 1")
    res = measure(args.n, args.seed)
    cols = ("skate", "penetration", "floating", "accel", "jerk", "bone_drift", "bone_cv_max", "score")
    print("cells: mean [min, max] over clips; skate m/s, penetration and floating m, accel m²/s⁴, jerk m²/s⁶")
    print("| condition | " + " | ".join(cols) + " |\n" + "|---" * (len(cols) + 1) + "|")
    for c, d in res.items():
        print(f"| {c} | " + " | ".join(f"{d[k][0]:.3g} [{d[k][1]:.3g}, {d[k][2]:.3g}]" for k in cols) + " |")


def _table_flags(p: argparse.ArgumentParser) -> None:
    from .table import BOOTSTRAP

    p.add_argument("samples", help="a scripts/sample.py output directory (index.jsonl + <stem>.npy)")
    p.add_argument("--compare", default=None, help="a base model's directory on the same prompts and seeds")
    p.add_argument("--boot", type=int, default=BOOTSTRAP, help="bootstrap replicates of the set metrics' SEs")
    p.add_argument("--seed", type=int, default=0)


def _table(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    from .files import MotionFileError
    from .table import format_table, motion_table, score_dir

    if args.boot < 0:
        p.error(f"--boot must be >= 0, got {args.boot}")
    try:
        feats, prompts, values, groups = score_dir(args.samples)
        base = None
        if args.compare:
            b_feats, b_prompts, b_values, _ = score_dir(args.compare)
            base = {"features": b_feats, "prompts": b_prompts, "values": b_values}
        table = motion_table(feats, prompts, values, groups, base=base, boot=args.boot, seed=args.seed)
    except (MotionFileError, ValueError) as exc:
        p.error(str(exc))
    print(format_table(table))


#: command -> (one-line description, flags, action)
COMMANDS = {
    "pretrain": pretrain_command(
        "worlds.motion.pretrain",
        "MotionConfig",
        "MDMRecipe",
        "MDM",
        "Pretrain MotionWorld's text-to-motion base model (MDM architecture) from scratch on CPU.",
    ),
    "train-evaluator": (
        "Train the MotionWorld text–motion evaluator on CPU.",
        _train_evaluator_flags,
        _train_evaluator,
    ),
    "measure-evaluator": (
        "Measure the MotionWorld evaluator's set metrics and reward separation.",
        _measure_evaluator_flags,
        _measure_evaluator,
    ),
    "judge-agreement": (
        "Measure the MotionWorld judge's strict agreement with the generator.",
        _judge_agreement_flags,
        _judge_agreement,
    ),
    "physics": ("MotionWorld physics metrics on generated clips, clean and altered.", _physics_flags, _physics),
    "table": (
        "The HumanML3D-style table (with standard errors) of motions written by scripts/sample.py.",
        _table_flags,
        _table,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The top parser with one subparser per :data:`COMMANDS` entry."""
    from worlds.commands import command_parser

    return command_parser(PROG, __doc__.split("\n\n")[0], COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (0 unless it says otherwise)."""
    from worlds.commands import run_command

    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
