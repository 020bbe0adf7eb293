"""DDPO experiments on Stable Diffusion 1.5 (Black et al. 2023, github.com/kvablack/ddpo-pytorch).

    python scripts/train.py --config config/sd.py:compressibility
    accelerate launch --num_processes 8 scripts/train.py --config config/sd.py:aesthetic

Recipe (values from ddpo-pytorch's published ``config/dgx.py``): DDIM with η = 1, 50 steps, CFG 5.0,
512 px, LoRA, lr 3e-4, PPO clip 1e-4, advantages clipped to ±5, every step trained, one inner epoch,
256 images per epoch (8 GPUs × 8 × 4 there), per-prompt reward buffers across epochs.

Departure: DDPO draws one image per prompt and normalises by each prompt's reward history; GRPO
needs groups, so here each prompt gets 4 images (64 prompts per epoch) and train.adv_mode "buffer"
pools a prompt's rewards across epochs as ddpo-pytorch's stat tracker does.

Per-process numbers are derived from the process count P (WORLD_SIZE); see config/recipes.py for the
helpers and for what a command-line override of a batch size then requires. Every number beside its source, and the
departures: docs/recipes.md.
"""

from config.base import get_config as base_config
from config.recipes import DDPO_IMAGES_PER_EPOCH, set_epoch_size, set_optimizer_batch


def compressibility():
    """JPEG compressibility (reward = −size in kB).

    256 images / (P × 8 per batch) = 32/P batches per process = 64 prompts × 4;
    64 images per optimizer step / (P × 4 per minibatch) = 16/P accumulated minibatches
    → 4 optimizer steps per epoch, each over all 50 transitions of its samples.
    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = base_config()
    config.num_epochs = 100
    config.mixed_precision = "fp16"
    # The runwayml repo was withdrawn from the hub; this is its maintained mirror. DDPO's paper used
    # SD v1.4 ("CompVis/stable-diffusion-v1-4"). A local pipeline directory works too.
    config.pretrained.model = "stable-diffusion-v1-5/stable-diffusion-v1-5"

    s = config.sample
    s.resolution = 512
    s.num_steps = 50
    s.eval_num_steps = 50
    s.guidance_scale = 5.0
    s.kernel = "ddim"
    s.noise_level = 1.0  # DDIM η = 1 (DDPO)
    s.group_size = 4
    s.batch_size = 8
    set_epoch_size(config, DDPO_IMAGES_PER_EPOCH)

    t = config.train
    t.batch_size = 4
    set_optimizer_batch(config, 64)
    t.learning_rate = 3e-4
    t.num_inner_epochs = 1
    t.clip_range = 1e-4 * 4 * 64 * 64  # DDPO's 1e-4 per latent dimension × d (512 px: 4×64×64)
    t.adv_clip_max = 5.0
    t.adv_mode = "buffer"
    t.adv_buffer_size = 16
    t.adv_min_count = 16
    t.beta = 0.0
    t.timestep_fraction = 1.0
    t.use_lora = True
    t.lora_rank = 4
    t.lora_alpha = 4.0

    config.reward.fns = {"jpeg_compressibility": 1.0}
    config.reward.kwargs = {}
    config.prompts.source = "animals"  # 45 common animals, as ddpo-pytorch's simple animal prompts
    return config


def incompressibility():
    """JPEG incompressibility (reward = +size in kB); batch arithmetic as compressibility.

    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = compressibility()
    config.reward.fns = {"jpeg_incompressibility": 1.0}
    return config


def aesthetic():
    """LAION aesthetic predictor score.

    256 images / (P × 8 per batch) = 32/P batches per process = 64 prompts × 4;
    128 images per optimizer step / (P × 4 per minibatch) = 32/P accumulated minibatches
    → 2 optimizer steps per epoch (ddpo-pytorch: this reward is harder, so larger steps).
    Hardware: 8 × 80 GiB GPUs (the planner's margin: tests/test_planner.py).
    """
    config = compressibility()
    config.num_epochs = 200
    set_optimizer_batch(config, 128)
    config.train.adv_buffer_size = 32
    config.train.adv_min_count = 16
    # LAION aesthetic predictor on CLIP ViT-L/14 features. Its MLP head is a separate download
    # (sac+logos+ava1-l14-linearMSE.pth, see docs/rewards.md):
    #   --config.reward.kwargs="{'aesthetic': {'head_path': '/path/to/sac+logos+ava1-l14-linearMSE.pth'}}"
    config.reward.fns = {"aesthetic": 1.0}
    config.prompts.source = "animals"
    return config


def get_config(name):
    return globals()[name]()
