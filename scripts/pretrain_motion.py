"""Pretrain MotionWorld's text-to-motion base model (MDM architecture) from scratch on CPU.

The recipe is ``worlds/motion/pretrain.py`` (its config fields are the flags below, ``--help`` lists them):
generated clips of the *train*-split prompts, an MDM-style transformer predicting x₀ under a cosine DDPM
schedule with a word-level CLIP text encoder trained jointly, EMA of the weights, evaluations of the
held-out *test* split (strict judge and physics per task) in ``<out>/pretrain_log.jsonl``, atomic
checkpoints every ``--ckpt_every`` steps in ``<out>/checkpoints/``, the EMA pipeline (a ``DenoiserPipeline``)
in ``<out>/final`` and its evaluation in ``<out>/final_eval.json``. The loop is the core's
(``ddpo_grpo/pretraining/``).

``--resume`` continues the run exactly (same thread count), with the config saved in its checkpoint
(evaluation / bookkeeping flags may change; a larger ``--steps`` extends it).

Reproduce the shipped ``worlds/motion/models/mdm`` (the defaults, seed 0; 16 min on one CPU thread beside another run)::

    nohup env OMP_NUM_THREADS=1 python scripts/pretrain_motion.py --out /tmp/motion_pretrain/mdm --threads 1 \
        > /tmp/motion_pretrain/mdm.log 2>&1 &
    # resume after an interruption: the same line with --resume

Load the result: ``ddpo_grpo.policies.load_pipeline("/tmp/motion_pretrain/mdm/final")``.
"""

from __future__ import annotations

from ddpo_grpo.pretraining.cli import config_parser, main_for
from worlds.motion.pretrain import MDMRecipe


def build_parser():
    return config_parser(MDMRecipe.config_class, __doc__.split("\n\n")[0])


def main(argv=None):
    return main_for(MDMRecipe, argv, build_parser(), label="MDM")


if __name__ == "__main__":
    main()
