"""Train the MotionWorld text–motion evaluator (``worlds/motion/evaluator_train.py``) on CPU.

Every field of the recipe (:class:`worlds.motion.evaluator_train.TrainConfig`) and of the architecture
(:class:`worlds.motion.evaluator.EvaluatorConfig`) is a flag; the defaults reproduce the shipped model
(``worlds/motion/models/evaluator``) from ``--seed 0``. The run folder ``--out`` holds ``checkpoint.pt``
(every ``--eval_every`` steps), ``train_log.jsonl`` and the final model in ``final/``; ``--export`` also
writes the final model there.

Reproduce the shipped evaluator (≈ 20 min on one thread; 2 shared cores: run it niced in the background)::

    OMP_NUM_THREADS=1 nohup nice .venv/bin/python scripts/train_motion_evaluator.py --out /tmp/motion_eval \
        --export worlds/motion/models/evaluator > /tmp/motion_eval.log 2>&1 &
    # after an interruption: the same line with --resume (the saved recipe is reused)

Then measure it: ``python -m worlds.motion.evaluator`` (the README's table).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from worlds.motion.evaluator import EvaluatorConfig
from worlds.motion.evaluator_train import TrainConfig, train


def _flag_type(default):
    if isinstance(default, bool):
        return lambda s: s.lower() in ("1", "true", "yes")
    if isinstance(default, tuple):
        kind = type(default[0])
        return lambda s: tuple(kind(x) for x in s.split(",") if x.strip())
    return type(default)


def build_parser() -> argparse.ArgumentParser:
    """The run's flags, then one per recipe field and one per architecture field."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
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
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    base = TrainConfig.tiny() if args.tiny else TrainConfig()
    given = {k: v for k, v in vars(args).items() if v is not None}
    model_kw = {f.name: given[f.name] for f in dataclasses.fields(EvaluatorConfig) if f.name in given}
    train_kw = {f.name: given[f.name] for f in dataclasses.fields(TrainConfig) if f.name in given and f.name != "model"}
    try:
        cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, **model_kw), **train_kw)
        train(cfg, args.out, resume=args.resume, export=args.export)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
