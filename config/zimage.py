"""GRPO on Z-Image (Tongyi-MAI/Z-Image-Turbo): Flow-GRPO's SD3 PickScore recipe (config/sd3.py) with Z-Image's sampling.

    python scripts/train.py --config config/zimage.py:pickscore
    python scripts/train.py --config config/zimage.py:tiny      # the tiny offline Z-Image (tests, smoke runs)

No GRPO recipe for Z-Image is published that we know of. This keeps Flow-GRPO's ``pickscore_sd3`` (groups of 24, 48
prompts = 1152 images per epoch, two optimizer steps per epoch, flow_grpo noise level 0.7, β = 0.01, global_std
advantages, an EMA, LoRA r = 32 / α = 64, lr 3e-4, PPO clip 1e-4 per latent dimension, × d = 16·64·64 at 512 px) and
takes from Z-Image-Turbo's own usage what differs: 8 sampling steps and no CFG (guidance 1: the Turbo model is
distilled), its scheduler's shift 3 (read from the checkpoint).
"""

from config.base import get_config as base_config
from config.sd3 import FLOW_GRPO_IMAGES_PER_EPOCH, FLOW_GRPO_IMAGES_PER_STEP, set_epoch_size, set_optimizer_batch
from config.tiny import tiny_family


def pickscore():
    """1152 images / (P × 9 per batch) = 128/P batches per process; 2 optimizer steps per epoch."""
    config = base_config()
    config.num_epochs = 100000
    config.save_freq = 60
    config.mixed_precision = "bf16"
    config.pretrained.model = "Tongyi-MAI/Z-Image-Turbo"
    s = config.sample
    s.resolution, s.num_steps, s.eval_num_steps = 512, 8, 8
    s.guidance_scale = 1.0  # Turbo: no CFG
    s.kernel, s.noise_level = "flow_grpo", 0.7
    s.group_size, s.batch_size = 24, 9
    s.max_sequence_length = 512
    set_epoch_size(config, FLOW_GRPO_IMAGES_PER_EPOCH)
    t = config.train
    t.batch_size = 9
    set_optimizer_batch(config, FLOW_GRPO_IMAGES_PER_STEP)
    t.learning_rate = 3e-4
    t.clip_range = 1e-4 * 16 * 64 * 64
    t.adv_mode = "global_std"
    t.beta = 0.01
    t.kl_estimator = "flow_grpo"
    t.use_lora, t.lora_rank, t.lora_alpha = True, 32, 64.0
    t.ema = True
    config.reward.fns = {"pickscore": 1.0}
    return config


def tiny():
    """The tiny offline Z-Image (config/tiny.py)."""
    return tiny_family("zimage")


EXPERIMENTS = ("pickscore", "tiny")


def get_config(name="pickscore"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/zimage.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
