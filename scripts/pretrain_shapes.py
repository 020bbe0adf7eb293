"""Pretrain a small ShapesWorld text-to-image model (SD3 architecture) from scratch on CPU.

Algorithm (details, shapes and equations in ``ddpo_grpo/shapes/pretrain.py``):

1. AutoencoderKL 64×64×3 ↔ 16×16×4, trained on fresh renders of train-split prompts with an
   object-weighted L1+MSE reconstruction loss and an LDM-sized KL term; then
   ``shift_factor = mean(z)`` and ``scaling_factor = 1/std(z)`` go into the VAE config.
2. Two CLIPTextModelWithProjection encoders (word-level CLIP BPE: one token per grammar word) and an
   SD3Transformer2DModel trained jointly by rectified flow (x_t = (1−t)x₀ + tε, target ε − x₀,
   logit-normal t), 10 % empty prompts for CFG, VAE frozen, EMA of the weights.
3. The EMA weights are saved as a ``StableDiffusion3Pipeline`` (no T5,
   ``FlowMatchEulerDiscreteScheduler(shift=1.0)``) in ``<out>/final`` and evaluated from disk with
   the ShapesWorld judge on test-split prompts.

Deliberate departures from SD3 training: tiny models trained from scratch instead of pretrained
CLIP/T5; the pipeline's N zero "T5" tokens are trained as one null token with a ``log N`` attention
bias, N log-uniform in [1, 256] (exactly equivalent; makes the model indifferent to the sampler's
``max_sequence_length``); no resolution-dependent shift (shift 1).

Data are rendered on the fly from the *train* split only (tasks balanced); evaluation uses the *test*
split. Every ``--ckpt_every`` steps an atomic checkpoint (``ddpo_grpo.checkpoint``) is written to
``<out>/checkpoints/``; ``--resume`` continues the run exactly, with the config saved in the
checkpoint (``--threads`` and the evaluation/bookkeeping flags may change; a larger ``--flow_steps``
extends a finished or running run, re-stretching the cosine LR schedule over the new total).
Progress and evaluations: ``<out>/pretrain_log.jsonl``.

Launch (≈ 45 min on one CPU thread with the defaults) and resume::

    nohup .venv/bin/python scripts/pretrain_shapes.py --out /tmp/shapes_pretrain/sd3 --threads 1 \
        > /tmp/shapes_pretrain/sd3.log 2>&1 &
    nohup .venv/bin/python scripts/pretrain_shapes.py --out /tmp/shapes_pretrain/sd3 --threads 1 --resume \
        >> /tmp/shapes_pretrain/sd3.log 2>&1 &

Load the result::

    StableDiffusion3Pipeline.from_pretrained("/tmp/shapes_pretrain/sd3/final", text_encoder_3=None, tokenizer_3=None)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# command-line flags that are not PretrainConfig fields
_NOT_CONFIG = {"out", "resume", "threads", "tiny"}


def _field_parser(tp):
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return lambda s: tuple(inner(x) for x in s.split(",") if x.strip())
    if origin is typing.Union:  # Optional[str]
        return lambda s: None if s.lower() in ("none", "") else s
    return tp


def build_parser() -> argparse.ArgumentParser:
    from ddpo_grpo.shapes.pretrain import PretrainConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="run directory (checkpoints/, final/, pretrain_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the newest checkpoint in --out")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tiny", action="store_true", help="toy sizes for smoke tests (pretrain.tiny_config)")
    hints = typing.get_type_hints(PretrainConfig)
    defaults = PretrainConfig()
    for f in dataclasses.fields(PretrainConfig):
        default = getattr(defaults, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        # SUPPRESS: only flags given on the command line appear in the namespace
        p.add_argument(f"--{f.name}", type=_field_parser(hints[f.name]), default=argparse.SUPPRESS,
                       help=f"(default: {shown})")
    return p


def main(argv=None) -> None:
    args = vars(build_parser().parse_args(argv))
    import torch

    torch.set_num_threads(max(1, args["threads"]))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddpo_grpo.shapes.pretrain import RESUME_MUTABLE, PretrainConfig, run, tiny_config

    given = {k: v for k, v in args.items() if k not in _NOT_CONFIG}
    cfg = tiny_config(**given) if args["tiny"] else PretrainConfig(**given)
    overrides = {}
    if args["resume"]:
        from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint

        found = list_checkpoints(args["out"])
        if found:
            saved = load_checkpoint(found[-1])["state"]["config"]
            differ = {k: (v, saved[k]) for k, v in dataclasses.asdict(cfg).items()
                      if k in given and (list(v) if isinstance(v, tuple) else v) != saved[k]}
            clash = {k: ab for k, ab in differ.items() if k not in RESUME_MUTABLE}
            if clash:
                sys.exit("--resume uses the run's saved config; these flags differ from it: "
                         + ", ".join(f"--{k}={a} (saved {b})" for k, (a, b) in clash.items())
                         + f". Drop them, or start a new --out (changeable on resume: {', '.join(RESUME_MUTABLE)}).")
            overrides = {k: a for k, (a, _) in differ.items()}
    final = run(cfg, args["out"], resume=args["resume"], log=lambda s: print(s, flush=True), overrides=overrides)
    print(f"done: {final}", flush=True)


if __name__ == "__main__":
    main()
