"""Pretrain a small ShapesWorld text-to-image model (SD3 or SD architecture) on CPU.

``--arch sd3`` (default) trains everything from scratch; ``--arch sd`` then builds the SD-architecture
counterpart on top of an SD3 result (``--base``). Each architecture's settings are the fields of its
config dataclass, one flag each (``--arch sd --help`` lists the SD ones).

``--arch sd3`` (``worlds/shapes/pretrain/sd3.py``): an AutoencoderKL 64×64×3 ↔ 16×16×4 on fresh
renders, then two word-level CLIP text encoders and an SD3Transformer2DModel by rectified flow, saved as a
``StableDiffusion3Pipeline`` (no T5). ``--arch sd`` (``worlds/shapes/pretrain/sd.py``): a
``StableDiffusionPipeline`` whose frozen VAE, tokenizer and (first two layers of) text encoder come from
``--base`` (default: the shipped SD3 model), a UNet2DConditionModel trained by DDPM on SD's schedule.
Both run the core's pretraining loop (``ddpo_grpo/pretraining/``): data rendered on the fly from the *train*
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

from ddpo_grpo.pretraining.cli import add_config_flags, add_run_flags, main_for
from worlds.shapes.pretrain import ARCHS, recipe


def build_parser(arch: str = "sd3") -> argparse.ArgumentParser:
    """The flags: the run's own, then one per field of ``arch``'s config dataclass."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--arch",
        choices=sorted(ARCHS),
        default="sd3",
        help="sd3: StableDiffusion3Pipeline from scratch; sd: StableDiffusionPipeline on --base's "
        f"VAE/tokenizer/text encoder. The config flags below are those of --arch (now: {arch})",
    )
    add_run_flags(p)
    add_config_flags(p, recipe(arch).config_class)
    return p


def main(argv=None) -> None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--arch", choices=sorted(ARCHS), default="sd3")
    arch = pre.parse_known_args(argv)[0].arch
    main_for(recipe(arch), argv, build_parser(arch), label=f"--arch {arch}", skip=("arch",))


if __name__ == "__main__":
    main()
