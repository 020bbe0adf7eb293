"""Flow-GRPO on Wan 2.1 text-to-video (github.com/yifan123/flow_grpo, ``general_ocr_wan2_1`` in ``config/grpo.py``) and
the same sampling for Wan 2.2 image-to-video (two experts).

    python scripts/train.py --config config/wan.py:t2v
    python scripts/train.py --config config/wan.py:i2v --config.prompts.source=first_frames.jsonl
    python scripts/train.py --config config/wan.py:tiny       # tiny offline variants: tiny, tiny_i2v

t2v follows ``general_ocr_wan2_1``: Wan-AI/Wan2.1-T2V-1.3B-Diffusers, 33 frames, 20 steps per training rollout (50 for
evaluation), CFG 4.5, groups of 4, 8 videos per batch × 2 batches = 16 videos per process per epoch, one optimizer
step per epoch (gradient accumulation over both batches, at train batch 8), KL β = 0.004, lr 1e-4, PPO clip 1e-3 per
latent dimension (× d = 16·9·30·30 here), every step but the last trained (0.99 of 20 → 19), an EMA, bf16, LoRA. Its
240 × 416 videos are square here: 240 × 240 (sample.resolution; a multiple of 16). Its reward (video OCR) is not
shipped: ``redness`` stands in (frame-wise mean; replace with your video reward). The released checkpoints ship a UniPC
scheduler; the policy samples its σ grid with Flow-GRPO's SDE (ddpo_grpo/policies/wan.py), as flow_grpo's Wan trainer
does. flow_grpo's noise level default 0.7 applies. LoRA r = 32 / α = 64 is ours.
i2v: Wan-AI/Wan2.2-I2V-A14B-Diffusers (``transformer`` high noise, ``transformer_2`` low noise, boundary 0.9) on rows
with a ``source_image`` (the first frame), otherwise t2v's recipe; sample.experts picks the LoRA'd expert(s),
sample.guidance_scale_2 the low-noise expert's guidance (None = sample.guidance_scale).
"""

from config.base import get_config as base_config
from config.tiny import tiny_family

LATENT_DIMS = 16 * 9 * 30 * 30  # Wan's latent of 33 frames at 240 px: 16 channels × 9 latent frames × 30 × 30


def t2v():
    """Wan 2.1 T2V 1.3B: 16 videos per process per epoch (8 per batch × 2), one optimizer step."""
    config = base_config()
    config.num_epochs = 100000  # run until stopped by hand (as Flow-GRPO)
    config.save_freq = 60
    config.mixed_precision = "bf16"
    config.pretrained.model = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    s = config.sample
    s.resolution, s.num_frames, s.num_steps, s.eval_num_steps = 240, 33, 20, 50
    s.guidance_scale = 4.5
    s.kernel, s.noise_level = "flow_grpo", 0.7
    s.max_sequence_length = 512  # the pipeline's default text length
    s.batch_size, s.num_batches_per_epoch, s.group_size = 8, 2, 4
    t = config.train
    t.batch_size, t.gradient_accumulation_steps = 8, 1
    t.learning_rate = 1e-4
    t.clip_range = 1e-3 * LATENT_DIMS
    t.beta = 0.004
    t.timestep_fraction = 19 / 20
    t.use_lora, t.lora_rank, t.lora_alpha = True, 32, 64.0
    t.ema = True
    config.reward.fns = {"redness": 1.0}
    config.reward.frame_reduction = "mean"
    return config


def i2v():
    """Wan 2.2 I2V A14B (two experts) on rows with a first frame (source_image)."""
    config = t2v()
    config.pretrained.model = "Wan-AI/Wan2.2-I2V-A14B-Diffusers"
    config.sample.experts = ""  # LoRA on both experts
    config.sample.guidance_scale_2 = None  # the low-noise expert's CFG w (None = sample.guidance_scale)
    # each sample's steps in order, as flow_grpo's Wan trainer keeps them: every minibatch column then holds one
    # expert's steps on every process (training passes 1.8x faster than with shuffled steps on the tiny model, 2 CPU
    # processes: docs/experiments/2026-11-27-wan-grid-guidance-experts.md)
    config.train.shuffle_steps = False
    config.prompts.source = "shapes_edit_train"  # replace with your rows (a .jsonl with source_image)
    return config


def tiny():
    """The tiny offline Wan 2.1-style text-to-video (config/tiny.py): 5 frames of 32 px."""
    return tiny_family("wan", video=True)


def tiny_i2v():
    """The tiny offline Wan 2.2-style image-to-video with two experts, on ShapesWorld first frames."""
    return tiny_family("wan_i2v", image_conditioned=True, video=True)


EXPERIMENTS = ("t2v", "i2v", "tiny", "tiny_i2v")


def get_config(name="t2v"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/wan.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
