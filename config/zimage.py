"""GRPO on Z-Image-Turbo: Flow-Factory's recipe (github.com/X-GenGroup/Flow-Factory,
``examples/grpo/lora/z_image_turbo/default.yaml``).

    python scripts/train.py --config config/zimage.py:pickscore
    python scripts/train.py --config config/zimage.py:tiny      # the tiny offline Z-Image (tests, smoke runs)

pickscore follows that file: Tongyi-MAI/Z-Image-Turbo at 512 px, bf16, 6 steps per training rollout (10 for
evaluation), no CFG (its guidance 0 is the pipeline's g; ours is w = 1 + g = 1: the Turbo model is distilled),
Flow-GRPO's SDE at noise level 0.7 on ONE step per rollout, drawn from steps 1 … 3 (its ``num_sde_steps: 1``,
``sde_steps: [1, 2, 3]``; the others are ODE steps), that step trained; groups of 16, 48 prompts = 768 images per
epoch, two optimizer steps per epoch, per-group advantages (``global_std: false``), no KL (β = 0), PPO clip 1e-4 per
latent dimension (× d = 16·64·64 here), advantages clipped to ±5, AdamW lr 3e-4 with weight decay 1e-4, an EMA,
LoRA r = 64 / α = 128 on Flow-Factory's default Z-Image targets (the attention projections and the SwiGLU
feed-forward ``w1``, ``w2``, ``w3``), the pipeline's text length (512), the VAE in the weight dtype (Flow-Factory
casts every frozen component to it). The scheduler's shift (3) is the checkpoint's. Every number beside its source,
and the departures (the EMA's schedule): docs/recipes.md.
"""

from config.recipes import LATENT_DIMS_512, flow_factory_grpo
from config.tiny import tiny_family

#: Flow-Factory's default LoRA targets for Z-Image (src/flow_factory/models/z_image/z_image.py)
LORA_TARGETS = (
    "attention.to_k",
    "attention.to_q",
    "attention.to_v",
    "attention.to_out.0",
    "feed_forward.w1",
    "feed_forward.w2",
    "feed_forward.w3",
)


def pickscore():
    """768 images / (P × 8 per batch) = 96/P batches per process; 2 optimizer steps per epoch, each over one trained
    step per sample.

    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    return flow_factory_grpo(
        "Tongyi-MAI/Z-Image-Turbo",
        save_freq=40,
        resolution=512,
        num_steps=6,
        eval_num_steps=10,
        guidance_scale=1.0,  # Turbo: no CFG (Flow-Factory's guidance_scale 0 is the pipeline's g; w = 1 + g)
        noise_level=0.7,
        window_range=(1, 3),  # one SDE step, at step 1, 2 or 3
        batch_size=8,
        learning_rate=3e-4,  # AdamW with the base config's weight decay 1e-4 (Flow-Factory's)
        latent_dims=LATENT_DIMS_512,  # Z-Image's latent at 512 px: 16 channels × 64 × 64
        lora_targets=LORA_TARGETS,
    )


def tiny():
    """The tiny offline Z-Image (config/tiny.py)."""
    return tiny_family("zimage")


EXPERIMENTS = ("pickscore", "tiny")


def get_config(name="pickscore"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/zimage.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
