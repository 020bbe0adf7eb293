"""The helpers the recipe files share: per-process numbers from global sizes, and the published recipes' common
blocks (Flow-GRPO's, Flow-Factory's), each taking the numbers its recipe states beside their source.

No GPU count is written down in a recipe: the GLOBAL sizes (images per epoch, images per optimizer step) are fixed
and the per-process numbers are derived from the process count P (``ddpo_grpo.distributed.world_size``: WORLD_SIZE,
set by ``accelerate launch`` / ``torchrun``; 1 for a plain ``python scripts/train.py``). A P that does not divide
them raises ValueError when the config is loaded. The derived numbers are computed once, at load: a command-line
override of sample.batch_size or train.batch_size must come with matching
--config.sample.num_batches_per_epoch / --config.train.gradient_accumulation_steps.

    set_epoch_size(config, images_per_epoch)        sample.num_batches_per_epoch
    set_optimizer_batch(config, images_per_step)    train.gradient_accumulation_steps
    sized(config, epochs=, per_epoch=, eval_freq=)  run length, eval cadence, both of the above
    set_forward_objective(config, ...)              a forward-process objective (DiffusionNFT) on ODE rollouts
    flow_grpo(model, ...)                           Flow-GRPO's recipe block (SD3.5, FLUX.1, Qwen-Image)
    flow_factory_grpo(model, ...)                   Flow-Factory's GRPO LoRA block (Z-Image-Turbo, Wan 2.2 A14B)
"""

from config.base import get_config as base_config
from ddpo_grpo.distributed import world_size

#: the latent of a 16-channel, 8× downsampling VAE at 512 px (SD3.5, FLUX.1, Qwen-Image, Z-Image): 16 × 64 × 64
LATENT_DIMS_512 = 16 * 64 * 64
#: the joint (MM-DiT) attention's projections, both streams: Flow-GRPO's LoRA targets for SD3.5 (scripts/train_sd3.py,
#: in sorted order there), the first eight of its FLUX.1 (scripts/train_flux.py) and Qwen-Image (train_qwenimage*.py)
JOINT_ATTENTION_LORA = (
    "attn.to_k",
    "attn.to_q",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
)
#: ddpo-pytorch's images per epoch (config/dgx.py: 8 GPUs × 8 per batch × 4 batches), kept by config/sd.py, sdxl.py
DDPO_IMAGES_PER_EPOCH = 256
#: Flow-Factory's samples per epoch (examples/grpo/lora/*: unique_sample_num_per_epoch 48 × group_size 16)
FLOW_FACTORY_SAMPLES_PER_EPOCH = 48 * 16


# ---- per-process numbers from global sizes ------------------------------------------------------


def set_epoch_size(config, images_per_epoch: int):
    """Set sample.num_batches_per_epoch = images_per_epoch / (P × sample.batch_size); ValueError if inexact."""
    p = world_size()
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
    p = world_size()
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


def sized(config, *, epochs: int, per_epoch: int, eval_freq: int, per_step: int | None = None):
    """Run length and global batch sizes: ``epochs`` epochs of ``per_epoch`` samples, optimizer steps of ``per_step``
    samples (None = ``per_epoch``: one step per epoch, averaging all its samples), evaluated every ``eval_freq``."""
    config.num_epochs = epochs
    config.eval.freq = eval_freq
    set_epoch_size(config, per_epoch)
    return set_optimizer_batch(config, per_epoch if per_step is None else per_step)


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


# ---- the published recipes' common blocks -------------------------------------------------------


def run_until_stopped(config, *, model: str, save_freq: int):
    """A published recipe's run: bf16, ``model``, no epoch limit (Flow-GRPO and Flow-Factory run until stopped by
    hand; watch the eval reward), a checkpoint every ``save_freq`` epochs."""
    config.num_epochs = 100000
    config.save_freq = save_freq
    config.mixed_precision = "bf16"
    config.pretrained.model = model
    return config


def flow_grpo(
    model: str,
    *,
    save_freq: int,
    num_steps: int,
    eval_num_steps: int,
    guidance_scale: float,
    noise_level: float,
    group_size: int,
    batch_size: int,
    images_per_epoch: int,
    max_sequence_length: int,
    vae_dtype: str,
    beta: float,
    lora: tuple[int, float, tuple[str, ...]],
    ema: bool,
):
    """Flow-GRPO's block (github.com/yifan123/flow_grpo, ``config/grpo.py`` and ``scripts/train_*.py``), the numbers
    its SD3.5, FLUX.1 and Qwen-Image recipes share: 512 px, its SDE (``flow_grpo``), ``batch_size`` per process for
    sampling and training, ``images_per_epoch`` in two optimizer steps, lr 3e-4, PPO clip 1e-4 per latent dimension
    (× d = 16·64·64 per sample), advantages over the whole epoch's std (``global_std``); ``lora`` = (rank, alpha,
    targets). The caller states the rest beside its source."""
    config = run_until_stopped(base_config(), model=model, save_freq=save_freq)
    s = config.sample
    s.resolution, s.num_steps, s.eval_num_steps = 512, num_steps, eval_num_steps
    s.guidance_scale = guidance_scale
    s.kernel, s.noise_level = "flow_grpo", noise_level
    s.group_size = group_size
    s.max_sequence_length = max_sequence_length
    s.vae_dtype = vae_dtype
    s.batch_size = batch_size
    set_epoch_size(config, images_per_epoch)
    t = config.train
    t.batch_size = batch_size
    set_optimizer_batch(config, images_per_epoch // 2)  # two optimizer steps per epoch
    t.learning_rate = 3e-4
    t.clip_range = 1e-4 * LATENT_DIMS_512
    # Flow-GRPO's configs set global_std=True: A = (r − μ_prompt) / σ over the whole epoch's rewards, which keeps
    # near-flat groups from being blown up to ±1 (plain GRPO would be "zscore")
    t.adv_mode = "global_std"
    t.beta = beta
    t.use_lora = True
    t.lora_rank, t.lora_alpha, t.lora_target_modules = lora
    t.ema = ema
    return config


def flow_factory_grpo(
    model: str,
    *,
    save_freq: int,
    resolution: int,
    num_steps: int,
    eval_num_steps: int,
    guidance_scale: float,
    noise_level: float,
    window_range: tuple[int, int],
    batch_size: int,
    learning_rate: float,
    latent_dims: int,
    lora_targets: tuple[str, ...],
):
    """Flow-Factory's GRPO LoRA block (github.com/X-GenGroup/Flow-Factory, ``examples/grpo/lora/*``), the numbers its
    Z-Image-Turbo and Wan 2.2 A14B recipes share: its SDE (``flow_grpo``) on ONE step per rollout drawn from
    ``window_range`` (its ``num_sde_steps: 1``, ``sde_steps``; the others ODE steps), that step trained; groups of 16,
    48 prompts = 768 samples per epoch in two optimizer steps, ``batch_size`` per process for sampling and training,
    per-group advantages (``global_std: false``) clipped to ±5, no KL (β = 0), PPO clip 1e-4 per latent dimension
    (× ``latent_dims``), LoRA r = 64 / α = 128 on ``lora_targets``, an EMA, the pipeline's text length (512), the
    PickScore reward. The caller states the rest beside its source."""
    config = run_until_stopped(base_config(), model=model, save_freq=save_freq)
    s = config.sample
    s.resolution, s.num_steps, s.eval_num_steps = resolution, num_steps, eval_num_steps
    s.guidance_scale = guidance_scale
    s.kernel, s.noise_level = "flow_grpo", noise_level
    s.sde_window_size, s.sde_window_range = 1, window_range
    s.max_sequence_length = 0  # the pipeline's default (512), as Flow-Factory's encoders
    s.group_size, s.batch_size = 16, batch_size
    set_epoch_size(config, FLOW_FACTORY_SAMPLES_PER_EPOCH)
    t = config.train
    t.batch_size = batch_size
    set_optimizer_batch(config, FLOW_FACTORY_SAMPLES_PER_EPOCH // 2)
    t.learning_rate = learning_rate
    t.clip_range = 1e-4 * latent_dims
    t.adv_clip_max = 5.0
    t.adv_mode = "zscore"
    t.beta = 0.0
    t.use_lora, t.lora_rank, t.lora_alpha = True, 64, 128.0
    t.lora_target_modules = lora_targets
    t.ema = True
    config.reward.fns = {"pickscore": 1.0}
    return config
