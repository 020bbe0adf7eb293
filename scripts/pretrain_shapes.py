"""Pretrain a small ShapesWorld text-to-image model (SD3 or SD architecture) on CPU.

``--arch sd3`` (default) trains everything from scratch; ``--arch sd`` then builds the SD-architecture
counterpart on top of an SD3 result (``--base``). Each architecture's settings are the fields of its
config dataclass, one flag each (``--arch sd --help`` lists the SD ones).

``--arch sd3`` (``worlds/shapes/pretrain/sd3.py``): an AutoencoderKL 64×64×3 ↔ 16×16×4 on fresh
renders, then two word-level CLIP text encoders and an SD3Transformer2DModel by rectified flow, saved as a
``StableDiffusion3Pipeline`` (no T5). ``--arch sd`` (``worlds/shapes/pretrain/sd.py``): a
``StableDiffusionPipeline`` whose frozen VAE, tokenizer and (first two layers of) text encoder come from
``--base`` (default: the shipped SD3 model), a UNet2DConditionModel trained by DDPM on SD's schedule.
Both run the same loop (``worlds/shapes/pretrain/loop.py``): data rendered on the fly from the *train*
split, EMA of the weights, evaluations on the *test* split with the library's deterministic evaluation
(``<out>/pretrain_log.jsonl``), atomic checkpoints every ``--ckpt_every`` steps in ``<out>/checkpoints/``,
the EMA pipeline in ``<out>/final`` and its evaluation in ``<out>/final_eval.json``.

``--resume`` continues the run exactly, with the config saved in the checkpoint (``--threads`` and the
evaluation/bookkeeping flags may change; a larger ``--flow_steps`` / ``--steps`` extends a finished or
running run, re-stretching the cosine LR schedule over the new total).

Launch (≈ 45 min on one CPU thread with the defaults) and resume::

    nohup .venv/bin/python scripts/pretrain_shapes.py --out /tmp/shapes_pretrain/sd3 --threads 1 \
        > /tmp/shapes_pretrain/sd3.log 2>&1 &
    nohup .venv/bin/python scripts/pretrain_shapes.py --out /tmp/shapes_pretrain/sd3 --threads 1 --resume \
        >> /tmp/shapes_pretrain/sd3.log 2>&1 &

    # SD architecture on the shipped SD3 model's VAE / tokenizer / text encoder (≈ 40 min on one thread)
    nohup env OMP_NUM_THREADS=1 .venv/bin/python scripts/pretrain_shapes.py --arch sd --out /tmp/shapes_pretrain/sd \
        --threads 1 > /tmp/shapes_pretrain/sd.log 2>&1 &
    # resume it: the same line with --resume (the saved config is reused, so --arch sd is all it needs)

    # continue a finished SD3 run for 8000 more flow steps, 30 % of its images near misses of their captions
    # (the README's base-model experiment; --caption_noise and a larger --flow_steps may change on --resume)
    nohup .venv/bin/python scripts/pretrain_shapes.py --out /tmp/shapes_pretrain/sd3 --threads 1 --resume \
        --flow_steps 13000 --caption_noise 0.3 >> /tmp/shapes_pretrain/sd3.log 2>&1 &

Load the results::

    StableDiffusion3Pipeline.from_pretrained("/tmp/shapes_pretrain/sd3/final", text_encoder_3=None, tokenizer_3=None)
    StableDiffusionPipeline.from_pretrained("/tmp/shapes_pretrain/sd/final")
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing

from worlds.shapes.pretrain import ARCHS, ResumeError, recipe, run

# command-line flags that are not config fields
_NOT_CONFIG = {"arch", "out", "resume", "threads", "tiny"}


def _field_parser(tp):
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return lambda s: tuple(inner(x) for x in s.split(",") if x.strip())
    if origin in (typing.Union, types.UnionType):  # str | None
        return lambda s: None if s.lower() in ("none", "") else s
    return tp


def build_parser(arch: str = "sd3") -> argparse.ArgumentParser:
    """The flags: the run's own, then one per field of ``arch``'s config dataclass."""
    config_cls = recipe(arch).config_class
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arch", choices=sorted(ARCHS), default="sd3",
                   help="sd3: StableDiffusion3Pipeline from scratch; sd: StableDiffusionPipeline on --base's "
                        f"VAE/tokenizer/text encoder. The config flags below are those of --arch (now: {arch})")
    p.add_argument("--out", required=True, help="run directory (checkpoints/, final/, pretrain_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the newest checkpoint in --out")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tiny", action="store_true", help="toy sizes for smoke tests (the config's tiny())")
    hints = typing.get_type_hints(config_cls)
    defaults = config_cls()
    for f in dataclasses.fields(config_cls):
        default = getattr(defaults, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        # SUPPRESS: only flags given on the command line appear in the namespace
        p.add_argument(f"--{f.name}", type=_field_parser(hints[f.name]), default=argparse.SUPPRESS,
                       help=f"(default: {shown})")
    return p


def main(argv=None) -> None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--arch", choices=sorted(ARCHS), default="sd3")
    arch = pre.parse_known_args(argv)[0].arch
    args = vars(build_parser(arch).parse_args(argv))
    import torch

    torch.set_num_threads(max(1, args["threads"]))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    recipe_cls = recipe(arch)
    given = {k: v for k, v in args.items() if k not in _NOT_CONFIG}
    cfg = recipe_cls.config_class.tiny(**given) if args["tiny"] else recipe_cls.config_class(**given)
    try:
        final = run(recipe_cls, cfg, args["out"], resume=args["resume"], log=lambda s: print(s, flush=True),
                    overrides=given)
    except ResumeError as exc:
        sys.exit(f"--resume {args['out']} (--arch {arch}): {exc}")
    print(f"done: {final}", flush=True)


if __name__ == "__main__":
    main()
