"""Pretrain a small ShapesWorld text-to-image model (SD3 or SD architecture) on CPU.

``--arch sd3`` (default) trains everything from scratch; ``--arch sd`` then builds the SD-architecture
counterpart on top of an SD3 result (``--base``). Each architecture's settings are the fields of its
config dataclass, one flag each (``--arch sd --help`` lists the SD ones).

``--arch sd3`` (details, shapes and equations in ``ddpo_grpo/shapes/pretrain.py``):

1. AutoencoderKL 64×64×3 ↔ 16×16×4, trained on fresh renders of train-split prompts with an
   object-weighted L1+MSE reconstruction loss and an LDM-sized KL term; then
   ``shift_factor = mean(z)`` and ``scaling_factor = 1/std(z)`` go into the VAE config.
2. Two CLIPTextModelWithProjection encoders (word-level CLIP BPE: one token per grammar word) and an
   SD3Transformer2DModel trained jointly by rectified flow (x_t = (1−t)x₀ + tε, target ε − x₀,
   logit-normal t), 10 % empty prompts for CFG, VAE frozen, EMA of the weights.
3. The EMA weights are saved as a ``StableDiffusion3Pipeline`` (no T5,
   ``FlowMatchEulerDiscreteScheduler(shift=1.0)``) in ``<out>/final`` and evaluated from disk with
   the ShapesWorld judge on test-split prompts.

``--arch sd`` (details in ``ddpo_grpo/shapes/pretrain_sd.py``): a ``StableDiffusionPipeline`` whose
VAE (frozen, same weights; latents ``z = s·E(x)`` with ``s = 1/RMS(E(x))`` re-measured and no shift,
since the SD pipeline decodes ``z / s``) and word-level tokenizer come from ``--base`` (default: the
shipped SD3 model), whose ``text_encoder``'s first two layers initialise the ``CLIPTextModel`` (its
``last_hidden_state`` is then SD3's penultimate-layer feature up to the final LayerNorm); a 1.7 M
parameter ``UNet2DConditionModel`` is trained from scratch by DDPM epsilon prediction on SD's
``scaled_linear`` schedule (T = 1000), jointly with the text encoder at a quarter of the learning
rate, 10 % empty prompts, EMA; saved with a ``DDIMScheduler`` for the DDPO policy.

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
import importlib
import os
import sys
import typing

# command-line flags that are not config fields
_NOT_CONFIG = {"arch", "out", "resume", "threads", "tiny"}
# --arch -> (module with run / tiny_config / RESUME_MUTABLE, its config dataclass)
ARCHS = {"sd3": ("worlds.shapes.pretrain_sd3", "PretrainConfig"),
         "sd": ("worlds.shapes.pretrain_sd", "PretrainSDConfig")}


def _arch(name: str):
    """``(module, config class)`` of an architecture."""
    module_name, cls_name = ARCHS[name]
    module = importlib.import_module(module_name)
    return module, getattr(module, cls_name)


def _field_parser(tp):
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return lambda s: tuple(inner(x) for x in s.split(",") if x.strip())
    if origin is typing.Union:  # Optional[str]
        return lambda s: None if s.lower() in ("none", "") else s
    return tp


def build_parser(arch: str = "sd3") -> argparse.ArgumentParser:
    """The flags: the run's own, then one per field of ``arch``'s config dataclass."""
    _, config_cls = _arch(arch)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arch", choices=sorted(ARCHS), default="sd3",
                   help="sd3: StableDiffusion3Pipeline from scratch; sd: StableDiffusionPipeline on --base's "
                        "VAE/tokenizer/text encoder. The config flags below are those of --arch (now: %s)" % arch)
    p.add_argument("--out", required=True, help="run directory (checkpoints/, final/, pretrain_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the newest checkpoint in --out")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tiny", action="store_true", help="toy sizes for smoke tests (the module's tiny_config)")
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
    module, config_cls = _arch(arch)
    mutable = module.RESUME_MUTABLE

    given = {k: v for k, v in args.items() if k not in _NOT_CONFIG}
    cfg = module.tiny_config(**given) if args["tiny"] else config_cls(**given)
    overrides = {}
    if args["resume"]:
        from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint

        found = list_checkpoints(args["out"])
        if found:
            saved = load_checkpoint(found[-1])["state"]["config"]
            if set(saved) - {f.name for f in dataclasses.fields(config_cls)}:  # fields added later may be missing
                sys.exit(f"{args['out']} holds a run of another architecture than --arch {arch}; "
                         f"resume it with the --arch it was started with ({', '.join(sorted(ARCHS))})")
            saved = config_cls.filled(saved)  # a field the run predates has its default
            differ = {k: (v, saved[k]) for k, v in dataclasses.asdict(cfg).items()
                      if k in given and (list(v) if isinstance(v, tuple) else v) != saved[k]}
            clash = {k: ab for k, ab in differ.items() if k not in mutable}
            if clash:
                sys.exit("--resume uses the run's saved config; these flags differ from it: "
                         + ", ".join(f"--{k}={a} (saved {b})" for k, (a, b) in clash.items())
                         + f". Drop them, or start a new --out (changeable on resume: {', '.join(mutable)}).")
            overrides = {k: a for k, (a, _) in differ.items()}
    final = module.run(cfg, args["out"], resume=args["resume"], log=lambda s: print(s, flush=True),
                       overrides=overrides)
    print(f"done: {final}", flush=True)


if __name__ == "__main__":
    main()
