r"""ArithmeticWorld's commands: ``python -m worlds.arithmetic <command> [flags]`` (``--help`` lists them,
``<command> --help`` its flags).

* ``pretrain`` — pretrain the tiny ``Qwen2ForCausalLM`` base model from scratch on CPU
  (:mod:`worlds.arithmetic.pretrain`; one flag per field of its config). ``<out>/final`` holds the model, its
  tokenizer and generation config, ``<out>/pretrain_log.jsonl`` the losses and quick held-out measurements.
  Reproduce the shipped ``worlds/arithmetic/models/base`` (the defaults, seed 0)::

      OMP_NUM_THREADS=1 python -m worlds.arithmetic pretrain --out /tmp/arith_pretrain

* ``measure`` — held-out pass@1 (temperature 1), pass@k, greedy exact match and mean response length of a model
  directory (:mod:`worlds.arithmetic.measure`)::

      OMP_NUM_THREADS=1 python -m worlds.arithmetic measure --model worlds/arithmetic/models/base

* ``split`` — regenerate the train / held-out prompt files (deterministic; the rule is in
  :mod:`worlds.arithmetic.problems`); ``--check`` exits 1 if the shipped files differ from a regeneration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROG = "python -m worlds.arithmetic"


def _pretrain_flags(p: argparse.ArgumentParser) -> None:
    from .pretrain import ArithmeticConfig

    p.add_argument("--out", required=True, help="run folder (pretrain_log.jsonl, final/, step_<n>/)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (the shipped model: 1)")
    for f in dataclasses.fields(ArithmeticConfig):
        p.add_argument(f"--{f.name}", type=type(f.default), default=f.default)


def _pretrain(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    import torch

    from .pretrain import ArithmeticConfig, train

    torch.set_num_threads(max(1, args.threads))
    cfg = ArithmeticConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ArithmeticConfig)})
    try:
        cfg.validate()
    except ValueError as exc:
        p.error(str(exc))
    train(cfg, args.out)
    print(f"wrote {Path(args.out) / 'final'}")


def _measure_flags(p: argparse.ArgumentParser) -> None:
    from .problems import DATA_DIR

    p.add_argument("--model", default=str(Path(__file__).resolve().parent / "models" / "base"), help="model folder")
    p.add_argument("--split", choices=("train", "test"), default="test", help=f"prompt file in {DATA_DIR}")
    p.add_argument("--k", type=int, default=8, help="samples per prompt (temperature 1.0, top-p 1.0)")
    p.add_argument("--limit", type=int, default=0, help="only the first N prompts (0: all)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the result as JSON here")


def _measure(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    import time

    import torch

    from .measure import format_figures, load, measure
    from .problems import load_split

    if args.k < 1 or args.limit < 0:
        p.error("--k must be >= 1 and --limit >= 0")
    torch.set_num_threads(max(1, args.threads))
    rows = load_split(args.split)
    rows = rows[: args.limit] if args.limit else rows
    t0 = time.time()
    res = measure(*load(args.model), rows, k=args.k, seed=args.seed)
    print(f"{args.model} on {len(rows)} {args.split} prompts, k={args.k}, seed {args.seed} ({time.time() - t0:.0f} s)")
    print(format_figures(res, args.split))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")


def _split_flags(p: argparse.ArgumentParser) -> None:
    from .problems import DATA_DIR, SPLIT_SEED

    p.add_argument("--out", default=str(DATA_DIR), help="output directory")
    p.add_argument("--seed", type=int, default=SPLIT_SEED, help="split seed (the shipped split uses %(default)s)")
    p.add_argument("--check", action="store_true", help="only compare the files in --out with a regeneration")


def _split(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    from .problems import write_split

    out = Path(args.out)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write_split(Path(tmp), args.seed)
            stale = [str(out / f.name) for f in fresh.values() if not (out / f.name).is_file() or
                     (out / f.name).read_bytes() != f.read_bytes()]  # fmt: skip
        if stale:
            print(f"out of date: {', '.join(stale)}; run `{PROG} split`", file=sys.stderr)
            return 1
        print(f"{out}: arithmetic split (seed {args.seed}) is up to date")
        return 0
    for path in write_split(out, args.seed).values():
        print(f"wrote {path}")
    return 0


COMMANDS = {
    "pretrain": ("Pretrain ArithmeticWorld's tiny Qwen2 base model from scratch on CPU.", _pretrain_flags, _pretrain),
    "measure": ("Held-out pass@1 / pass@k / greedy exact match / length of a model.", _measure_flags, _measure),
    "split": ("Regenerate ArithmeticWorld's train / held-out prompt files.", _split_flags, _split),
}


def build_parser() -> argparse.ArgumentParser:
    from worlds.commands import command_parser

    return command_parser(PROG, __doc__.split("\n\n")[0], COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status."""
    from worlds.commands import run_command

    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
