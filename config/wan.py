"""Flow-GRPO on Wan 2.1 text-to-video (github.com/yifan123/flow_grpo, ``general_ocr_wan2_1`` in ``config/grpo.py``) and
Flow-Factory's GRPO LoRA recipes for Wan 2.2 A14B (github.com/X-GenGroup/Flow-Factory, ``examples/grpo/lora/wan22/``).

    python scripts/train.py --config config/wan.py:t2v
    python scripts/train.py --config config/wan.py:t2v_a14b
    python scripts/train.py --config config/wan.py:i2v --config.prompts.source=first_frames.jsonl
    python scripts/train.py --config config/wan.py:tiny       # tiny offline variants: tiny, tiny_i2v

t2v follows ``general_ocr_wan2_1`` and ``scripts/train_wan2_1.py``: Wan-AI/Wan2.1-T2V-1.3B-Diffusers, 33 frames, 20
steps per training rollout (50 for evaluation), CFG 4.5, groups of 4, 8 videos per batch × 2 batches = 16 videos per
process per epoch, two optimizer steps per epoch (train batch 8, no accumulation), KL β = 0.004, lr 1e-4, PPO clip
1e-3 per latent dimension (× d = 16·9·30·30 here), every step but the last trained (0.99 of 20 → 19), per-group
advantages, an EMA, bf16, the VAE in float32, 512 UMT5 tokens, LoRA r = 32 / α = 64 on the attention projections. Its
240 × 416 videos are square here: 240 × 240 (sample.resolution; a multiple of 16). Its reward (video OCR) is not
shipped: ``redness`` stands in (frame-wise mean; replace with your video reward). Its trainer samples Wan with its own
SDE (std σ_min + (σ_max − σ_min)·σ, no noise level); the policy uses Flow-GRPO's SDE at the noise level 0.7 on the
checkpoint's own UniPC σ grid (ddpo_grpo/policies/wan.py).
t2v_a14b follows Flow-Factory's ``wan22/t2v.yaml``: Wan-AI/Wan2.2-T2V-A14B-Diffusers (``transformer`` high noise,
``transformer_2`` low noise), 480 px, 5 frames, 10 steps (28 for evaluation), guidance 4.0 on the high-noise expert
and 3.0 on the low-noise one (``sample.guidance_scale_2``), ONE
SDE step per rollout (noise level 0.9) drawn from steps 1 … 3 and trained, groups of 16, 48 prompts = 768 videos
per epoch, two optimizer steps per epoch, no KL, PPO clip 1e-4 per latent dimension, lr 1e-4, LoRA r = 64 / α = 128
on both experts' attention and feed-forward, PickScore frame-wise.
i2v follows ``wan22/i2v.yaml``: Wan-AI/Wan2.2-I2V-A14B-Diffusers on rows with a ``source_image`` (the first frame),
8 steps, guidance 3.5, the SDE step at step 1, LoRA on the high-noise expert only (its ``transformer.default``),
otherwise as t2v_a14b. Flow-Factory keeps the VAE in the weight dtype (bf16). Every number beside its source, and
the departures: docs/recipes.md.
"""

from config.base import get_config as base_config
from config.recipes import flow_factory_grpo, run_until_stopped
from config.tiny import tiny_family

LATENT_DIMS = 16 * 9 * 30 * 30  # Wan's latent of 33 frames at 240 px: 16 channels × 9 latent frames × 30 × 30
LATENT_DIMS_A14B = 16 * 2 * 60 * 60  # 5 frames at 480 px: 16 channels × 2 latent frames × 60 × 60
#: Flow-GRPO's Wan LoRA targets (scripts/train_wan2_1.py; the add_* projections exist in image-conditioned Wan only)
LORA_TARGETS = ("add_k_proj", "add_q_proj", "add_v_proj", "to_add_out", "to_k", "to_out.0", "to_q", "to_v")
#: Flow-Factory's default Wan LoRA targets (src/flow_factory/models/wan/wan2_t2v.py, wan2_i2v.py)
A14B_LORA_TARGETS = (
    "attn1.to_q",
    "attn1.to_k",
    "attn1.to_v",
    "attn1.to_out.0",
    "attn2.to_q",
    "attn2.to_k",
    "attn2.to_v",
    "attn2.to_out.0",
    "ffn.net.0.proj",
    "ffn.net.2",
)


def t2v():
    """Wan 2.1 T2V 1.3B: 16 videos per process per epoch (8 per batch × 2), two optimizer steps.

    Hardware: 1 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = run_until_stopped(base_config(), model="Wan-AI/Wan2.1-T2V-1.3B-Diffusers", save_freq=60)
    s = config.sample
    s.resolution, s.num_frames, s.num_steps, s.eval_num_steps = 240, 33, 20, 50
    s.guidance_scale = 4.5
    s.kernel, s.noise_level = "flow_grpo", 0.7
    s.max_sequence_length = 0  # the pipeline's default (512), as Flow-GRPO's Wan trainer
    s.vae_dtype = "fp32"  # Flow-GRPO's train_wan2_1.py keeps the VAE in float32
    s.batch_size, s.num_batches_per_epoch, s.group_size = 8, 2, 4
    t = config.train
    t.batch_size, t.gradient_accumulation_steps = 8, 1
    t.learning_rate = 1e-4
    t.clip_range = 1e-3 * LATENT_DIMS
    t.beta = 0.004
    t.timestep_fraction = 19 / 20
    t.use_lora, t.lora_rank, t.lora_alpha = True, 32, 64.0
    t.lora_target_modules = LORA_TARGETS
    t.ema = True
    t.gradient_checkpointing = True  # train_wan2_1.py: transformer.enable_gradient_checkpointing()
    config.reward.fns = {"redness": 1.0}
    config.reward.frame_reduction = "mean"
    return config


def _flow_factory_a14b(model: str, num_steps: int, guidance: float, guidance_2, window_range: tuple, experts: str):
    """Flow-Factory's Wan 2.2 A14B GRPO LoRA recipe: 768 videos / (P × 1 per batch) = 768/P batches per process, two
    optimizer steps per epoch (384 videos each), one trained SDE step per video."""
    config = flow_factory_grpo(
        model,
        save_freq=20,
        resolution=480,
        num_steps=num_steps,
        eval_num_steps=28,
        guidance_scale=guidance,  # the high-noise expert's CFG w
        noise_level=0.9,
        window_range=window_range,
        batch_size=1,
        learning_rate=1e-4,
        latent_dims=LATENT_DIMS_A14B,
        lora_targets=A14B_LORA_TARGETS,
    )
    s = config.sample
    s.num_frames = 5
    s.guidance_scale_2 = guidance_2  # the low-noise expert's (None = guidance)
    s.experts = experts
    # sharded as Flow-Factory shards its Wan 2.2 runs (DeepSpeed ZeRO-2, or FSDP2 as its t2v.yaml advises), the text
    # encoder off the GPU between uses as its models' off_load_text_encoder: the planner's 80 GiB needs both
    config.distributed.strategy = "fsdp"
    s.offload_encoders = True
    # each sample's steps in order (flow_grpo's Wan trainer keeps them so too): a minibatch column then holds one
    # expert's steps on every process (training passes 1.8x faster than shuffled steps on the tiny two-expert Wan, 2 CPU
    # processes: docs/experiments/2026-11-27-wan-grid-guidance-experts.md)
    config.train.shuffle_steps = False
    config.reward.frame_reduction = "mean"
    return config


def t2v_a14b():
    """Wan 2.2 T2V A14B (two experts, both LoRA'd): 10 steps, guidance 4.0 (3.0 on the low-noise expert).

    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    return _flow_factory_a14b("Wan-AI/Wan2.2-T2V-A14B-Diffusers", 10, 4.0, 3.0, (1, 3), "")


def i2v():
    """Wan 2.2 I2V A14B (two experts, the high-noise one LoRA'd) on rows with a first frame (source_image).

    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_factory_a14b("Wan-AI/Wan2.2-I2V-A14B-Diffusers", 8, 3.5, None, (1, 1), "transformer")
    config.prompts.source = "shapes_edit_train"  # replace with your rows (a .jsonl with source_image)
    return config


def tiny():
    """The tiny offline Wan 2.1-style text-to-video (config/tiny.py): 5 frames of 32 px."""
    return tiny_family("wan", video=True)


def tiny_i2v():
    """The tiny offline Wan 2.2-style image-to-video with two experts, on ShapesWorld first frames."""
    return tiny_family("wan_i2v", image_conditioned=True, video=True)


EXPERIMENTS = ("t2v", "t2v_a14b", "i2v", "tiny", "tiny_i2v")


def get_config(name="t2v"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/wan.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
