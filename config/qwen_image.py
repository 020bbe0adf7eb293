"""Flow-GRPO on Qwen-Image, Qwen-Image-Edit and Qwen-Image-Edit-2509 (github.com/yifan123/flow_grpo, ``config/grpo.py``).

    python scripts/train.py --config config/qwen_image.py:pickscore
    python scripts/train.py --config config/qwen_image.py:edit --config.prompts.source=edits.jsonl
    python scripts/train.py --config config/qwen_image.py:tiny         # tiny offline variants: tiny, tiny_edit,
                                                                       # tiny_edit_plus

pickscore follows ``pickscore_qwenimage`` and ``scripts/train_qwenimage.py``: Qwen/Qwen-Image at 512 px, 10 steps per
training rollout (50 for evaluation), true CFG 4 (with Qwen-Image's norm-preserving rescale) against the negative
prompt " ", groups of 16, 32 prompts = 512 images per epoch, two optimizer steps per epoch, Flow-GRPO-Fast: only a
window of 2 steps is stochastic (noise level 1.2) and trained, its start in the first half (Flow-GRPO's
(0, num_steps // 2) with an exclusive end for the whole window = starts 0…3 here), β = 0, global_std advantages, no
EMA, bf16, the VAE in float32, LoRA r = 64 / α = 128 on the attention projections and both streams' MLPs; the base
config's lr 3e-4 and PPO clip 1e-4 per latent dimension (× d = 16·64·64 here); the pipeline's text length (512).
edit follows ``counting_qwenimage_edit`` (Qwen/Qwen-Image-Edit, noise level 1.0, no Fast window: Flow-GRPO then makes
steps 0 … T−2 stochastic and trains them, the last step deterministic — here a window of T−1 steps starting at 0;
sources at the pipeline's 1024·1024 pixels); edit_plus ``repairany_qwenimage_edit_plus_fast`` and
``scripts/train_qwenimage_edit_plus.py`` (Qwen/Qwen-Image-Edit-2509, groups of 4, 32 prompts = 128 images per
epoch, a window of 4 at noise level 0.9, sources at 512·512 pixels: its sampler's ``calculate_dimensions(512*512)``).
Their rewards (GenEval counting 0.8 + image similarity 0.2) are not shipped: these train ``clip_score`` 0.8 +
``ssim`` to the row's ground_truth 0.2 on rows with a ``source_image`` (prompts.source). Every number beside its
source, and the departures: docs/recipes.md.
"""

from config.recipes import JOINT_ATTENTION_LORA, flow_grpo
from config.tiny import tiny_family

#: Flow-GRPO's LoRA targets for the Qwen-Image family (scripts/train_qwenimage*.py): the joint attention's
#: projections and both streams' MLPs
LORA_TARGETS = (
    *JOINT_ATTENTION_LORA,
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
)


def _flow_grpo_qwen(
    model: str, group_size: int, images_per_epoch: int, noise_level: float, window: int, window_range: tuple | None
):
    config = flow_grpo(
        model,
        save_freq=30,
        num_steps=10,
        eval_num_steps=50,
        guidance_scale=4.0,
        noise_level=noise_level,
        group_size=group_size,
        batch_size=4,  # Flow-GRPO's train_batch_size
        images_per_epoch=images_per_epoch,
        max_sequence_length=0,  # the pipeline's default text length (512), as Flow-GRPO's samplers
        vae_dtype="fp32",  # Flow-GRPO's Qwen trainers keep the VAE in float32
        beta=0.0,
        lora=(64, 128.0, LORA_TARGETS),
        ema=False,
    )
    s = config.sample
    s.negative_prompt = " "  # Flow-GRPO's Qwen trainers pass " " as the negative prompt
    s.sde_window_size = window
    s.sde_window_range = window_range
    config.distributed.strategy = "fsdp"  # Flow-GRPO's Qwen trainers: FSDP FULL_SHARD (scripts/train_qwenimage*.py)
    config.train.gradient_checkpointing = True  # with activation checkpointing (its config.activation_checkpointing)
    return config


def _fast_window(num_steps: int, window: int) -> tuple:
    """Flow-GRPO-Fast's window starts: (0, num_steps // 2) with an exclusive end for the whole window, inclusive here."""
    return (0, num_steps // 2 - window)


def pickscore():
    """Qwen-Image on PickScore: 512 images / (P × 4 per batch) = 128/P batches per process; 2 optimizer steps.

    Hardware: 32 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo_qwen("Qwen/Qwen-Image", 16, 32 * 16, 1.2, 2, _fast_window(10, 2))
    config.reward.fns = {"pickscore": 1.0}
    return config


def edit():
    """Qwen-Image-Edit on an editing set (rows with source_image and ground_truth): 512 images per epoch; steps
    0 … 8 of 10 stochastic and trained, the last deterministic (Flow-GRPO's window (0, T − 1) without Fast).

    Hardware: 32 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo_qwen("Qwen/Qwen-Image-Edit", 16, 32 * 16, 1.0, 10 - 1, (0, 0))
    config.reward.fns = {"clip_score": 0.8, "ssim": 0.2}
    config.prompts.source = "shapes_edit_train"  # replace with your edits (a .jsonl of rows with source_image)
    return config


def edit_plus():
    """Qwen-Image-Edit-2509 (Edit-Plus; rows may give several source images): groups of 4, 128 images per epoch, sources
    at 512·512 pixels.

    Hardware: 2 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo_qwen("Qwen/Qwen-Image-Edit-2509", 4, 32 * 4, 0.9, 4, _fast_window(10, 4))
    config.sample.source_pixels = 512 * 512  # Flow-GRPO's Edit-Plus sampler: calculate_dimensions(512 * 512, ...)
    # on its 2 GPUs the whole 20 B denoiser gathered for sampling does not leave 10 % of 80 GiB: gathered per block
    # and step, as Flow-GRPO's FSDP forward does
    config.distributed.gather_for_sampling = False
    config.reward.fns = {"clip_score": 0.8, "ssim": 0.2}
    config.prompts.source = "shapes_edit_train"
    return config


def tiny():
    """The tiny offline Qwen-Image (config/tiny.py); its char-level template needs ~150 text tokens."""
    return tiny_family("qwen_image", max_sequence_length=256)


def tiny_edit():
    config = tiny_family("qwen_image_edit", image_conditioned=True)
    config.sample.source_pixels = 32 * 32  # not the pipeline's 1024² (cheap; the adapter test kit checks both)
    return config


def tiny_edit_plus():
    config = tiny_edit()
    config.pretrained.tiny = "qwen_image_edit_plus"
    return config


EXPERIMENTS = ("pickscore", "edit", "edit_plus", "tiny", "tiny_edit", "tiny_edit_plus")


def get_config(name="pickscore"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/qwen_image.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
