r"""The image-to-image worlds' commands: ``python -m worlds.shapes_i2i <command> [flags]`` (``--help`` lists them,
``<command> --help`` its flags).

* ``pretrain`` — fine-tune the shipped ShapesWorld SD model into the InstructPix2Pix model (restoration +
  editing) on the core pretraining loop (:mod:`worlds.shapes_i2i.pretrain`; one flag per config field)::

      nohup nice env OMP_NUM_THREADS=1 .venv/bin/python -m worlds.shapes_i2i pretrain --out /tmp/i2i --threads 1 \
          > /tmp/i2i.log 2>&1 &

* ``split`` — write (``--write``) or check (``--check``, the default) the shipped splits
  ``data/{restore,edit}_{train,test}.jsonl`` (:mod:`worlds.shapes_i2i.data`).
* ``measure`` — base numbers of a model: PSNR / SSIM per degradation level, edit accuracy per edit type
  (:mod:`worlds.shapes_i2i.measure`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from worlds.commands import pretrain_command

PROG = "python -m worlds.shapes_i2i"


def _split_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--write", action="store_true", help="regenerate data/*.jsonl from the seed")
    p.add_argument("--check", action="store_true", help="verify the shipped files")


def _split(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    from .data import _load, check, write_split

    if args.write:
        for path in write_split():
            print(f"wrote {path}")
        _load.cache_clear()
    if args.check or not args.write:
        problems = check()
        print("\n".join(problems) or "the shipped splits match make_split(SPLIT_SEED)")
        return 1 if problems else 0
    return 0


def _measure_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="", help="pipeline directory (default: the shipped model)")
    p.add_argument("--run", default="", help="a pretraining run directory: evaluate its newest checkpoint's EMA")
    p.add_argument("--per_group", type=int, default=48)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--text", type=float, default=4.5, help="text guidance scale s_T")
    p.add_argument("--image", type=float, default=2.5, help="image guidance scale s_I")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default="", help="also write the result here")


def _measure(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    import torch

    from ddpo_grpo.policies import load_pipeline
    from foundation.atomic_io import atomic_write_text

    from . import SHAPES_IP2P
    from .measure import format_tables, measure, pipeline_of_run

    torch.set_num_threads(args.threads)
    pipe = pipeline_of_run(args.run) if args.run else load_pipeline(args.model or SHAPES_IP2P)
    result = measure(pipe, per_group=args.per_group, steps=args.steps, text=args.text, image=args.image)
    print(json.dumps(result["settings"]))
    print(format_tables(result))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1))


#: command -> (one-line description, flags, action)
COMMANDS = {
    "pretrain": pretrain_command(
        "worlds.shapes_i2i.pretrain",
        "IP2PConfig",
        "IP2PRecipe",
        "shapes_i2i",
        "Pretrain the ShapesWorld InstructPix2Pix model (restoration + editing).",
    ),
    "split": ("Write or check the shipped image-to-image splits.", _split_flags, _split),
    "measure": (
        "Base numbers of an image-to-image model: PSNR / SSIM per degradation level, edit accuracy per edit type.",
        _measure_flags,
        _measure,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The top parser with one subparser per :data:`COMMANDS` entry."""
    from worlds.commands import command_parser

    return command_parser(PROG, __doc__.split("\n\n")[0], COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status."""
    from worlds.commands import run_command

    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
