"""Flow-GRPO on FLUX.1-dev and FLUX.1 Kontext-dev (Liu et al. 2025, github.com/yifan123/flow_grpo).

    python scripts/train.py --config config/flux.py:pickscore
    python scripts/train.py --config config/flux.py:kontext --config.prompts.source=edits.jsonl
    python scripts/train.py --config config/flux.py:tiny          # the tiny offline FLUX (tests, smoke runs)

pickscore follows Flow-GRPO's ``pickscore_flux`` (its ``config/grpo.py``) and ``scripts/train_flux.py``:
black-forest-labs/FLUX.1-dev at 512 px, 6 SDE steps per training rollout (28 for evaluation), the distilled guidance
3.5 in one pass (no true CFG), flow_grpo noise level 0.9, groups of 24, 48 prompts = 1152 images per epoch, two
optimizer steps per epoch, every step but the last trained (timestep_fraction 0.99 of 6 → 5 there, ⌈5/6 · 6⌉ = 5
here), no KL (β = 0), advantages over the whole epoch's std (global_std), an EMA of the weights, bf16; the base
config's lr 3e-4, PPO clip 1e-4 per latent dimension (here × d = 16·64·64 per sample). From the trainer: 128 T5
tokens (FLUX attends to T5's padding, so the length changes the samples), LoRA r = 64 / α = 128 on the attention
projections and both feed-forwards (``ff``, ``ff_context``), the VAE in float32. ``kontext`` follows
``counting_flux_kontext`` and ``scripts/train_flux_kontext.py``: FLUX.1-Kontext-dev, distilled guidance 2.5, groups of
21 (48 prompts × 21 = 1008 images), the same sampling and text length, LoRA also on ``proj_mlp``, the VAE in the
weight dtype (that trainer's choice); its rewards (GenEval counting 0.5 + image similarity 0.5) are not shipped
here, so it trains ``clip_score`` 0.5 + ``ssim`` to the row's ``ground_truth`` 0.5 on rows with a ``source_image``
(set prompts.source). Every number beside its source, and the departures: docs/recipes.md. Per-process numbers come
from the process count (config/recipes.py).
"""

from config.recipes import JOINT_ATTENTION_LORA, flow_grpo
from config.tiny import tiny_family

#: Flow-GRPO's LoRA targets for FLUX.1-dev (scripts/train_flux.py): the joint attention's projections and both
#: feed-forwards; Kontext's trainer adds the single blocks' ``proj_mlp``
LORA_TARGETS = (
    *JOINT_ATTENTION_LORA,
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
)


def _flow_grpo_flux(
    model: str, distilled_guidance: float, group_size: int, images_per_epoch: int, lora_targets: tuple, vae_dtype: str
):
    config = flow_grpo(
        model,
        save_freq=30,
        num_steps=6,
        eval_num_steps=28,
        guidance_scale=1.0,  # no true CFG: the distilled guidance is an input of the single pass
        noise_level=0.9,
        group_size=group_size,
        batch_size=3,  # Flow-GRPO's train_batch_size
        images_per_epoch=images_per_epoch,
        max_sequence_length=128,  # Flow-GRPO's FLUX trainers encode 128 T5 tokens (the pipeline's default is 512)
        vae_dtype=vae_dtype,
        beta=0.0,
        lora=(64, 128.0, lora_targets),
        ema=True,
    )
    config.sample.distilled_guidance = distilled_guidance
    config.train.timestep_fraction = 5 / 6
    return config


def pickscore():
    """FLUX.1-dev on PickScore: 1152 images / (P × 3 per batch) = 384/P batches per process; 2 optimizer steps.

    Hardware: 32 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo_flux("black-forest-labs/FLUX.1-dev", 3.5, 24, 48 * 24, LORA_TARGETS, "fp32")
    config.reward.fns = {"pickscore": 1.0}
    return config


def kontext():
    """FLUX.1 Kontext-dev on an editing set (rows with source_image and ground_truth): 1008 images per epoch.

    Hardware: 28 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo_flux(
        "black-forest-labs/FLUX.1-Kontext-dev", 2.5, 21, 48 * 21, (*LORA_TARGETS, "proj_mlp"), "auto"
    )
    config.reward.fns = {"clip_score": 0.5, "ssim": 0.5}
    config.distributed.strategy = "fsdp"  # Flow-GRPO shards it with DeepSpeed ZeRO-2 (scripts/multi_node/flux_kontext)
    config.prompts.source = "shapes_edit_train"  # replace with your edits (a .jsonl of rows with source_image)
    return config


def tiny():
    """The tiny offline FLUX (config/tiny.py)."""
    return tiny_family("flux")


def tiny_kontext():
    """The tiny offline FLUX.1 Kontext on ShapesWorld edit rows (config/tiny.py)."""
    return tiny_family("kontext", image_conditioned=True)


EXPERIMENTS = ("pickscore", "kontext", "tiny", "tiny_kontext")


def get_config(name="pickscore"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/flux.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
