"""Flow-GRPO experiments on Stable Diffusion 3.5 Medium (Liu et al. 2025, github.com/yifan123/flow_grpo).

    python scripts/train.py --config config/sd3.py:pickscore
    accelerate launch --num_processes 8 scripts/train.py --config config/sd3.py:pickscore_fast

Recipe shared by every experiment here (values from Flow-GRPO's published ``config/grpo.py`` and
``scripts/train_sd3.py``): 10 SDE steps per training rollout (40 ODE steps for evaluation), CFG 4.5, 512 px, group
of 24 images per prompt, 48 prompts = 1152 images per epoch, two optimizer steps per epoch, 128 T5 tokens, LoRA
r=32 / α=64 on the joint attention's projections (``attn.*``, not SD3.5's second attention ``attn2``), the VAE in
float32, lr 3e-4, PPO clip 1e-4, KL β·KL(π_θ ‖ π_ref) to the base model. Every number beside its source, and the
departures (bf16 where Flow-GRPO's base config leaves fp16; the EMA's schedule): docs/recipes.md.

Per-process numbers come from the process count P (config/recipes.py: the GLOBAL sizes are fixed; a P that does
not divide them raises ValueError at load).
"""

# (the helpers that lived here until the recipes moved to config/recipes.py, importable from here one release)
from config.recipes import JOINT_ATTENTION_LORA, flow_grpo, set_epoch_size, set_forward_objective, set_optimizer_batch  # noqa: F401
from ddpo_grpo.distributed import world_size as num_processes  # noqa: F401

FLOW_GRPO_IMAGES_PER_EPOCH = 48 * 24  # 48 prompts × group of 24 = 1152
#: Flow-GRPO's LoRA targets for SD3.5 (scripts/train_sd3.py, train_sd3_fast.py): the joint attention's projections,
#: in that file's (sorted) order
LORA_TARGETS = tuple(sorted(JOINT_ATTENTION_LORA))


# ---- the shared Flow-GRPO recipe ----------------------------------------------------------------


def _flow_grpo(reward_name: str):
    # 9 per process is Flow-GRPO's value: with 1152 = 2^7 × 9 images per epoch and 576 = 2^6 × 9 per
    # optimizer step, every power-of-two P up to 64 divides both.
    # 1152 images / (P × 9 per batch) = 128/P batches per process;
    # (128/P × 9) samples / 9 per minibatch = 128/P minibatches per process;
    # 576 images per optimizer step / (P × 9) = 64/P accumulated minibatches → 2 optimizer steps per epoch.
    config = flow_grpo(
        "stabilityai/stable-diffusion-3.5-medium",
        save_freq=60,
        num_steps=10,
        eval_num_steps=40,
        guidance_scale=4.5,
        noise_level=0.7,
        group_size=24,
        batch_size=9,
        images_per_epoch=FLOW_GRPO_IMAGES_PER_EPOCH,
        # Flow-GRPO encodes prompts with 128 T5 tokens (its train_sd3.py), not diffusers' default 256.
        max_sequence_length=128,
        vae_dtype="fp32",  # Flow-GRPO's train_sd3.py keeps the VAE in float32
        beta=0.04,
        lora=(32, 64.0, LORA_TARGETS),
        ema=True,  # logged samples and the export use the EMA weights, as Flow-GRPO's evaluation does
    )
    t = config.train
    t.num_inner_epochs = 1
    t.adv_clip_max = 5.0
    # Flow-GRPO's KL is the Gaussian KL × |Δσ| (÷ g² only, not ÷ the transition variance g²|Δσ|): with
    # this estimator β means what Flow-GRPO's β means (losses.flow_grpo_kl; docs/migration.md)
    t.kl_estimator = "flow_grpo"
    # Flow-GRPO trains int(0.99 × 10) = 9 of the 10 steps, skipping the last, almost-clean one;
    # here ⌈0.9 × 10⌉ = 9 first steps gives the same set.
    t.timestep_fraction = 0.9
    t.timestep_selection = "first"

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
