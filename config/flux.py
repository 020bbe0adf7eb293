"""Flow-GRPO on FLUX.1-dev and FLUX.1 Kontext-dev (Liu et al. 2025, github.com/yifan123/flow_grpo).

    python scripts/train.py --config config/flux.py:pickscore
    python scripts/train.py --config config/flux.py:kontext --config.prompts.source=edits.jsonl
    python scripts/train.py --config config/flux.py:tiny          # the tiny offline FLUX (tests, smoke runs)

pickscore follows Flow-GRPO's ``pickscore_flux`` (its ``config/grpo.py``): black-forest-labs/FLUX.1-dev at 512 px,
6 SDE steps per training rollout (28 for evaluation), the distilled guidance 3.5 in one pass (no true CFG), flow_grpo
noise level 0.9, groups of 24, 48 prompts = 1152 images per epoch, two optimizer steps per epoch, every step but the
last trained (timestep_fraction 0.99 of 6 → 5 there, ⌈5/6 · 6⌉ = 5 here), no KL (β = 0), advantages over the whole
epoch's std (global_std), an EMA of the weights, bf16; the base config's lr 3e-4, PPO clip 1e-4 per latent dimension
(here × d = 16·64·64 per sample). LoRA r = 32 / α = 64 on the attention projections is ours (the recipe file does not
state it). ``kontext`` follows ``counting_flux_kontext``: FLUX.1-Kontext-dev, distilled guidance 2.5, groups of 21 (48
prompts × 21 = 1008 images), the same sampling; its rewards (GenEval counting 0.5 + image similarity 0.5) are not
shipped here, so it trains ``clip_score`` 0.5 + ``ssim`` to the row's ``ground_truth`` 0.5 on rows with a
``source_image`` (set prompts.source). Per-process numbers come from the process count (config/sd3.py's helpers).
"""

from config.base import get_config as base_config
from config.sd3 import set_epoch_size, set_optimizer_batch
from config.tiny import tiny_family

LATENT_DIMS_512 = 16 * 64 * 64  # FLUX.1's latent at 512 px: 16 channels × 64 × 64


def _flow_grpo_flux(model: str, distilled_guidance: float, group_size: int, images_per_epoch: int):
    config = base_config()
    config.num_epochs = 100000  # run until stopped by hand (as Flow-GRPO)
    config.save_freq = 30
    config.mixed_precision = "bf16"
    config.pretrained.model = model
    s = config.sample
    s.resolution = 512
    s.num_steps = 6
    s.eval_num_steps = 28
    s.guidance_scale = 1.0  # no true CFG: the distilled guidance is an input of the single pass
    s.distilled_guidance = distilled_guidance
    s.kernel = "flow_grpo"
    s.noise_level = 0.9
    s.group_size = group_size
    s.max_sequence_length = 512  # FLUX.1-dev's T5 length
    s.batch_size = 3  # Flow-GRPO's train_batch_size
    set_epoch_size(config, images_per_epoch)
    t = config.train
    t.batch_size = 3
    set_optimizer_batch(config, images_per_epoch // 2)  # two optimizer steps per epoch
    t.learning_rate = 3e-4
    t.clip_range = 1e-4 * LATENT_DIMS_512
    t.adv_mode = "global_std"
    t.beta = 0.0
    t.timestep_fraction = 5 / 6
    t.use_lora, t.lora_rank, t.lora_alpha = True, 32, 64.0
    t.ema = True
    return config


def pickscore():
    """FLUX.1-dev on PickScore: 1152 images / (P × 3 per batch) = 384/P batches per process; 2 optimizer steps."""
    config = _flow_grpo_flux("black-forest-labs/FLUX.1-dev", 3.5, 24, 48 * 24)
    config.reward.fns = {"pickscore": 1.0}
    return config


def kontext():
    """FLUX.1 Kontext-dev on an editing set (rows with source_image and ground_truth): 1008 images per epoch."""
    config = _flow_grpo_flux("black-forest-labs/FLUX.1-Kontext-dev", 2.5, 21, 48 * 21)
    config.reward.fns = {"clip_score": 0.5, "ssim": 0.5}
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
