"""Flow-GRPO experiments on Stable Diffusion 3.5 Medium (Liu et al. 2025, github.com/yifan123/flow_grpo).

    python scripts/train.py --config config/sd3.py:pickscore
    accelerate launch --num_processes 8 scripts/train.py --config config/sd3.py:pickscore_fast

Recipe shared by every experiment here (values from Flow-GRPO's published ``config/grpo.py`` and
``scripts/train_sd3.py``): 10 SDE steps per training rollout (40 ODE steps for evaluation), CFG 4.5, 512 px, group
of 24 images per prompt, 48 prompts = 1152 images per epoch, two optimizer steps per epoch, 128 T5 tokens, LoRA
r=32 / α=64 on the joint attention's projections (``attn.*``, not SD3.5's second attention ``attn2``), the VAE in
float32, lr 3e-4, PPO clip 1e-4, KL β·KL(π_θ ‖ π_ref) to the base model. Every number beside its source, and the
departures (bf16 where Flow-GRPO's base config leaves fp16; the EMA's schedule): docs/recipes.md.

No GPU count is written down: the GLOBAL sizes (images per epoch, images per optimizer step) are fixed
and the per-process numbers are derived from the process count P, read from WORLD_SIZE (set by
``accelerate launch`` / ``torchrun``; 1 for a plain ``python scripts/train.py``). A P that does not divide
them raises ValueError when the config is loaded. The derived numbers are computed once, at load:
a command-line override of sample.batch_size or train.batch_size must come with matching
--config.sample.num_batches_per_epoch / --config.train.gradient_accumulation_steps.

``num_processes``, ``set_epoch_size``, ``set_optimizer_batch`` and ``set_forward_objective`` are shared with the
other recipe files.
"""

import os

from config.base import get_config as base_config

FLOW_GRPO_IMAGES_PER_EPOCH = 48 * 24  # 48 prompts × group of 24 = 1152
FLOW_GRPO_IMAGES_PER_STEP = FLOW_GRPO_IMAGES_PER_EPOCH // 2  # two optimizer steps per epoch
#: Flow-GRPO's LoRA targets for SD3.5 (scripts/train_sd3.py, train_sd3_fast.py): the joint attention's projections
LORA_TARGETS = (
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "attn.to_k",
    "attn.to_out.0",
    "attn.to_q",
    "attn.to_v",
)


# ---- helpers: per-process numbers from global sizes -------------------------------------------


def num_processes() -> int:
    """The number of training processes P: WORLD_SIZE (set by accelerate launch / torchrun), else 1."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        p = int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE={raw!r} is not an integer process count") from None
    if p < 1:
        raise ValueError(f"WORLD_SIZE={raw!r} must be ≥ 1")
    return p


def set_epoch_size(config, images_per_epoch: int):
    """Set sample.num_batches_per_epoch = images_per_epoch / (P × sample.batch_size); ValueError if inexact."""
    p = num_processes()
    per_batch = p * config.sample.batch_size  # images per sampling batch, all processes together
    if images_per_epoch % per_batch:
        raise ValueError(
            f"sample.num_batches_per_epoch: {images_per_epoch} images per epoch cannot be split into batches of "
            f"processes × sample.batch_size = {p} × {config.sample.batch_size} = {per_batch}; launch a process "
            f"count (WORLD_SIZE={p}) or set a sample.batch_size such that the product divides {images_per_epoch}"
        )
    config.sample.num_batches_per_epoch = images_per_epoch // per_batch
    return config


def set_optimizer_batch(config, images_per_step: int):
    """Set train.gradient_accumulation_steps = images_per_step / (P × train.batch_size); ValueError if inexact."""
    p = num_processes()
    per_minibatch = p * config.train.batch_size  # samples per minibatch, all processes together
    if images_per_step % per_minibatch:
        raise ValueError(
            f"train.gradient_accumulation_steps: {images_per_step} images per optimizer step cannot be split into "
            f"minibatches of processes × train.batch_size = {p} × {config.train.batch_size} = {per_minibatch}; "
            f"launch a process count (WORLD_SIZE={p}) or set a train.batch_size such that the product divides "
            f"{images_per_step}"
        )
    config.train.gradient_accumulation_steps = images_per_step // per_minibatch
    return config


def set_forward_objective(config, *, images_per_step: int, inner_epochs: int, objective: str = "nft"):
    """Train with a forward-process objective (``train.objective``, ddpo_grpo/losses.py; DiffusionNFT by default)
    on deterministic rollouts: such an objective needs no transition log-probs, so every step is the ODE
    (flow kernels: noise_level 0) or DDIM η = 0 (denoising kernels), and each group member starts from its own
    noise. Each final sample is noised again at 4 timesteps (train.forward_timesteps); AdamW lr 1e-3 without
    weight decay; ``images_per_step`` per optimizer step, ``inner_epochs`` passes over each epoch's samples."""
    s = config.sample
    s.noise_level = 0.0
    s.share_group_noise = False
    s.sde_window_size = 0
    t = config.train
    t.objective = objective
    t.optimizer = "adamw"
    t.learning_rate = 1e-3
    t.adam_weight_decay = 0.0
    t.forward_timesteps = 4
    t.num_inner_epochs = inner_epochs
    return set_optimizer_batch(config, images_per_step)


# ---- the shared Flow-GRPO recipe ----------------------------------------------------------------


def _flow_grpo(reward_name: str):
    config = base_config()
    config.num_epochs = 100000  # run until stopped by hand (as Flow-GRPO); watch the eval reward
    config.save_freq = 60
    config.mixed_precision = "bf16"
    config.pretrained.model = "stabilityai/stable-diffusion-3.5-medium"

    s = config.sample
    s.resolution = 512
    s.num_steps = 10
    s.eval_num_steps = 40
    s.guidance_scale = 4.5
    s.kernel = "flow_grpo"
    s.noise_level = 0.7
    s.group_size = 24
    # Flow-GRPO encodes prompts with 128 T5 tokens (its train_sd3.py), not diffusers' default 256.
    s.max_sequence_length = 128
    s.vae_dtype = "fp32"  # Flow-GRPO's train_sd3.py keeps the VAE in float32
    # 9 per process is Flow-GRPO's value: with 1152 = 2^7 × 9 images per epoch and 576 = 2^6 × 9 per
    # optimizer step, every power-of-two P up to 64 divides both.
    # 1152 images / (P × 9 per batch) = 128/P batches per process.
    s.batch_size = 9
    set_epoch_size(config, FLOW_GRPO_IMAGES_PER_EPOCH)

    t = config.train
    # (128/P × 9) samples / 9 per minibatch = 128/P minibatches per process;
    # 576 images per optimizer step / (P × 9) = 64/P accumulated minibatches → 2 optimizer steps per epoch.
    t.batch_size = 9
    set_optimizer_batch(config, FLOW_GRPO_IMAGES_PER_STEP)
    t.learning_rate = 3e-4
    t.num_inner_epochs = 1
    t.clip_range = 1e-4 * 16 * 64 * 64  # Flow-GRPO's 1e-4 per latent dimension × d (512 px: 16×64×64)
    t.adv_clip_max = 5.0
    # Flow-GRPO's configs set global_std=True: A = (r − μ_prompt) / σ over the whole epoch's rewards,
    # which keeps near-flat groups from being blown up to ±1 (plain GRPO would be "zscore").
    t.adv_mode = "global_std"
    t.beta = 0.04
    # Flow-GRPO's KL is the Gaussian KL × |Δσ| (÷ g² only, not ÷ the transition variance g²|Δσ|): with
    # this estimator β means what Flow-GRPO's β means (losses.flow_grpo_kl; docs/migration.md)
    t.kl_estimator = "flow_grpo"
    # Flow-GRPO trains int(0.99 × 10) = 9 of the 10 steps, skipping the last, almost-clean one;
    # here ⌈0.9 × 10⌉ = 9 first steps gives the same set.
    t.timestep_fraction = 0.9
    t.timestep_selection = "first"
    t.use_lora = True
    t.lora_rank = 32
    t.lora_alpha = 64.0
    t.lora_target_modules = LORA_TARGETS
    t.ema = True  # logged samples and the export use the EMA weights, as Flow-GRPO's evaluation does

    config.reward.fns = {reward_name: 1.0}
    config.reward.kwargs = {}
    return config


# ---- experiments --------------------------------------------------------------------------------


def pickscore():
    """PickScore (human-preference) reward.

    1152 images / (P × 9 per batch) = 128/P batches per process; 48 prompts × 24; 2 optimizer steps per epoch.
    Hardware: 32 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = _flow_grpo("pickscore")
    config.train.beta = 0.01  # Flow-GRPO's pickscore_sd3 uses β = 0.01 (0.04 is for GenEval / OCR)
    # Flow-GRPO trains PickScore on its "pickscore" prompt set; until that ships, the built-in list.
    config.prompts.source = "simple"
    return config


def pickscore_fast():
    """Flow-GRPO-Fast on PickScore: Flow-GRPO's ``pickscore_sd3_fast_nocfg`` (with ``scripts/train_sd3_fast.py``).

    Only a window of 3 consecutive steps, placed at random among the first half of the 10-step
    schedule, is stochastic and trained; the other 7 are deterministic ODE steps. CFG is off, so every
    step is one denoiser pass. With beta 0 there is no reference forward either. Groups of 18:
    64 prompts × 18 = 1152 images / (P × 9 per batch) = 128/P batches per process; 2 optimizer steps per
    epoch, each over K = 3 transitions per sample instead of 9.
    Hardware: 32 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = pickscore()
    s, t = config.sample, config.train
    s.group_size = 18  # 64 prompts × 18 = 1152 images per epoch
    s.sde_window_size = 3
    # Window start ∈ {0, 1, 2} (inclusive): the window stays inside steps 0..4, the noisy first half.
    # Flow-GRPO writes this as (0, num_steps // 2) with an exclusive end for the whole window.
    s.sde_window_range = (0, 2)
    s.kernel = "cps"  # coefficients-preserving sampling: noise_level is η ∈ [0, 1]
    s.noise_level = 0.8
    s.guidance_scale = 1.0  # no CFG; set 4.5 (with train.cfg True) to keep guidance
    t.cfg = False
    t.timestep_fraction = 1.0  # train every step of the window
    t.clip_range = 1e-5 * 16 * 64 * 64  # 1e-5 per latent dimension × d
    t.beta = 0.0
    return config


EXPERIMENTS = ("pickscore", "pickscore_fast")


def get_config(name):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/sd3.py has no experiment {name!r}; choose {' or '.join(EXPERIMENTS)}")
    return globals()[name]()
