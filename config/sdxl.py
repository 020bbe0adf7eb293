"""DDPO on Stable Diffusion XL: ddpo-pytorch's published aesthetic recipe (Black et al. 2023, ``config/dgx.py``
``aesthetic``, as config/sd.py has it for SD 1.5) on stabilityai/stable-diffusion-xl-base-1.0 at its native 1024 px.

    python scripts/train.py --config config/sdxl.py:aesthetic
    python scripts/train.py --config config/sdxl.py:tiny      # the tiny offline SDXL (tests, smoke runs)

No GRPO recipe for SDXL is published that we know of; this is DDPO's: DDIM with η = 1 (the checkpoint ships Euler;
the policy samples its noise schedule with the DDIM kernel, ddpo_grpo/policies/sdxl.py), 50 steps, CFG 5, LoRA r = 4
on the attention projections, lr 3e-4, PPO clip 1e-4 per latent dimension (× d = 4·128·128 here), advantages clipped
to ±5, 256 images per epoch in groups of 4 with per-prompt reward buffers (config/sd.py's departure for GRPO's
groups), two optimizer steps per epoch, 200 epochs, fp16, the LAION aesthetic reward. The VAE follows the checkpoint's
rule (``sample.vae_dtype`` "auto"): the SDXL-base VAE says ``force_upcast`` and overflows in float16, so it runs in
float32 (DDPO's SD 1.x VAE ran in float16). Every number beside its source: docs/recipes.md. Per-process numbers come
from the process count (config/recipes.py).
"""

from config.base import get_config as base_config
from config.recipes import DDPO_IMAGES_PER_EPOCH, set_epoch_size, set_optimizer_batch
from config.tiny import tiny_family

LATENT_DIMS_1024 = 4 * 128 * 128


def aesthetic():
    """256 images / (P × 4 per batch) = 64/P batches per process; 2 optimizer steps per epoch.

    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = base_config()
    config.num_epochs = 200  # DDPO's aesthetic recipe
    config.mixed_precision = "fp16"
    config.pretrained.model = "stabilityai/stable-diffusion-xl-base-1.0"
    s = config.sample
    s.resolution, s.num_steps, s.eval_num_steps = 1024, 50, 50
    s.kernel, s.noise_level, s.guidance_scale = "ddim", 1.0, 5.0
    s.group_size, s.batch_size = 4, 4
    s.vae_dtype = "auto"  # fp16 weights + force_upcast: the VAE decodes in float32, as StableDiffusionXLPipeline
    set_epoch_size(config, DDPO_IMAGES_PER_EPOCH)
    t = config.train
    t.batch_size = 2
    set_optimizer_batch(config, DDPO_IMAGES_PER_EPOCH // 2)
    t.learning_rate = 3e-4
    t.clip_range = 1e-4 * LATENT_DIMS_1024
    t.adv_clip_max = 5.0
    t.adv_mode = "buffer"
    t.use_lora, t.lora_rank, t.lora_alpha = True, 4, 4.0
    config.reward.fns = {"aesthetic": 1.0}
    config.prompts.source = "animals"
    return config


def tiny():
    """The tiny offline SDXL (config/tiny.py), sampled by the DDIM kernel at η = 1."""
    config = tiny_family("sdxl")
    config.sample.noise_level = 1.0
    return config


EXPERIMENTS = ("aesthetic", "tiny")


def get_config(name="aesthetic"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/sdxl.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
