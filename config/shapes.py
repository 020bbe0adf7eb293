"""ShapesWorld recipes on the shipped base models (worlds/shapes/models/sd, sd3): GRPO, DiffusionNFT (sd_nft, sd3_nft).

    python scripts/train.py                                     # = config/quickstart.py = sd_nft (DiffusionNFT)
    python scripts/train.py --config config/shapes.py:sd_quick  # GRPO on the SD (UNet + DDIM) model (= quickstart.py:grpo)
    python scripts/train.py --config config/shapes.py:sd3_quick # GRPO on the SD3 model
    python scripts/train.py --config config/shapes.py:sd3_long  # the long recipes (hours on a CPU)
    python scripts/train.py --config config/shapes.py:sd_long

Reward: the ShapesWorld judge (reward_models/shapes.py) on train-split prompts; evaluation: the same
judge on the held-out test split (compositions never seen in training), deterministic ODE / DDIM η=0
samples from fixed seeds, 48 images per task, ``eval/task_mean/strict`` being the headline number.

Choices for a CPU budget, from the runs recorded in docs/experiments/2026-11-22-shapesworld-grpo.md:
  - prompts.stratify_by = "task": the train split is 75 % position prompts; equal shares per task
    put every task in every epoch (8 prompts each at 256 images per epoch);
  - the partial score (fraction of the prompt's constraints met) rather than the 0/1 strict score:
    at the base model's ~5 % strict on position prompts, a group of 8 is all-zero with probability
    0.95⁸ ≈ 0.66, and an all-zero group has advantage 0;
  - sample.share_group_noise: a group's images start from the same initial noise, so reward
    differences within a group come from the policy's own SDE / DDIM noise, not from the initial
    latent the policy does not choose (DanceGRPO does the same);
  - a Flow-GRPO-Fast window on the first 4 of 10 steps (SDE for SD3, DDIM η = 1 for SD): layout and
    counts are decided early; the later steps are deterministic and cost no training;
  - one plain-SGD step per epoch over all its images: single-sample policy gradients are very
    noisy (two 64-image halves of one epoch's gradient have cosine ≈ 0.0–0.04 here), so every step
    averages the largest batch the epoch has, and moves along that average rather than along AdamW's
    per-coordinate normalisation of it, which is mostly noise.
Per-process numbers scale with WORLD_SIZE (config/recipes.py); the quick recipes are sized for one
process on a 2-core CPU.
"""

from config.base import get_config as base_config
from config.recipes import set_forward_objective, sized
from ddpo_grpo.distributed import world_size
from worlds.shapes import SHAPES_SD, SHAPES_SD3


def _shapes(model: str):
    """Fields shared by every ShapesWorld recipe."""
    config = base_config()
    config.pretrained.model = model
    config.logging.tracker = "none"
    config.logging.image_freq = 0  # the before/after grid of the run report shows the samples
    config.save_freq = 5

    s = config.sample
    s.resolution = 64  # the models' native size (16×16×4 latents)
    s.max_sequence_length = 8  # SD3: zero "T5" tokens appended (the model has no T5)
    s.num_steps = 10
    s.eval_num_steps = 20  # deterministic evaluation samples, as the base accuracy was measured
    s.guidance_scale = 4.5
    s.group_size = 8
    s.batch_size = 16
    s.share_group_noise = True

    t = config.train
    t.use_lora = True
    t.lora_rank = 16
    t.lora_alpha = 16.0
    # Plain gradient steps of norm lr × grad_norm ≈ 0.35 (the logged train/grad_norm of 256-image
    # steps is ≈ 1.4e-3 for SD3's adapters, ≈ 0.65e-3 for SD's): steps of norm 0.25–0.5 along a
    # 512-image gradient raised the reward, steps of 2 lowered it whichever the sign (docs/experiments/).
    t.optimizer = "sgd"
    t.learning_rate = 250.0
    t.clip_range = 1e-2 * 4 * 16 * 16  # 1e-2 per latent dimension × d (64 px: 4×16×16); see config/base.py
    t.adv_mode = "zscore"
    t.batch_size = 16

    config.prompts.source = "shapes_train"
    config.prompts.stratify_by = "task"
    config.reward.fns = {"shapes": 1.0}
    config.reward.kwargs = {"shapes": {"score": "partial"}}

    e = config.eval
    e.prompts = "shapes_test"
    e.reward = "shapes"
    e.reward_kwargs = {"score": "strict"}
    e.group_by = "task"
    e.per_group = 48
    e.freq = 10
    return config


def _early_window(config):
    """Stochastic (and trained) steps 0–3 of 10, deterministic ODE / DDIM η=0 steps afterwards
    (Flow-GRPO-Fast's window, placed where layout and counts are decided). The kernel and its noise level are
    the family's defaults: the Flow-GRPO SDE with a = 0.7 for SD3, DDIM with η = 1 for SD."""
    config.sample.kernel = ""
    config.sample.noise_level = None
    config.sample.sde_window_size = 4
    config.sample.sde_window_range = (0, 0)
    return config


# Sizes (config/recipes.py's ``sized``): one optimizer step per epoch, averaging all its images, not two half-epoch
# steps: at SD's lr 500, sd_long with two 256-image steps per 512-image epoch fell from 0.53 to 0.20 held-out strict
# within 10 epochs (22 steps of norm ≈ 0.4 whose mostly-noise directions add up), while one 512-image step per epoch
# (norm ≈ 0.22) held (docs/experiments/).


def sd3_quick():
    """The GRPO quickstart: 256 images per epoch (32 prompts, 8 per task, × 8), 1 optimizer step per epoch,
    40 epochs (10,240 images): the 15-minute budget alone on a 2-core CPU (14 min 14 s measured there,
    0.276 → 0.339 held-out strict under the old judge, before issue 27 tightened it; docs/experiments/). Held-out evaluation before and after training only (≈ 16 s each)."""
    config = sized(_early_window(_shapes(SHAPES_SD3)), epochs=40, per_epoch=256, eval_freq=40)
    # --config.num_epochs trades time for gain: 16 epochs took 6 min 49 s alone and moved held-out strict by -1, 0
    # and +1.6 points in three runs (docs/experiments/), 40 epochs by +2.6 and +6.3
    config.probe.freq = 10  # the paired probe (64 fixed samples) before training and every 10 epochs: ≈ 8 s each
    return config


def sd3_nft():
    """DiffusionNFT (``train.objective = "nft"``) on the shipped SD3 model: 256 images per epoch, 16 epochs (4,096
    images), 8 AdamW updates per epoch (4 steps of 64 images × 2 inner epochs over the epoch's samples).

    A forward-process objective needs no transition log-probs, so the rollouts are the deterministic ODE
    (noise_level 0) and each group member starts from its own noise (share_group_noise off); each final
    sample is noised again at 4 timesteps (train.forward_timesteps) and trained with the flow-matching loss
    weighted as NFT prescribes (ddpo_grpo/losses.py). This is scripts/benchmark_learning.py's ``nft_multi``
    and the quickstart until the judge was tightened (issue 27; the SD3 base now scores 0.089, and the
    quickstart is sd_nft). Under the old judge: held-out strict 0.276 → 0.365 / 0.349 (seeds 0 / 1, 822 s / 802 s beside another
    job), against 0.276 → 0.292 / 0.276 for the GRPO recipe at the same 4,096 images
    (docs/experiments/2026-11-23-objectives-benchmark.md)."""
    config = sized(_early_window(_shapes(SHAPES_SD3)), epochs=16, per_epoch=256, eval_freq=16)
    config.train.batch_size = min(config.train.batch_size, 64 // world_size())  # 8 processes: minibatches of 8
    set_forward_objective(config, images_per_step=64, inner_epochs=2)  # 4 steps per inner epoch
    config.probe.freq = 4
    # wall time: 7 min 24 s alone, default threads (0.276 → 0.328 held-out strict, old judge)
    return config


def _sd():
    config = _early_window(_shapes(SHAPES_SD))
    config.train.learning_rate = 500.0  # SD's adapter gradients are about half as large as SD3's
    return config


def sd_nft():
    """DiffusionNFT on the shipped SD (UNet + DDIM) model, the quickstart: 256 images per epoch, 12 epochs (3,072
    images), 8 AdamW updates per epoch (4 steps of 64 images × 2 inner epochs), rollouts by DDIM η = 0.

    Why SD and not SD3: under the tightened judge the SD3 base scores 0.089 held-out strict, so most groups are
    all-wrong and teach nothing; the SD base scores 0.495 and leaves room in counting and position. The sizes are
    sd3_nft's (the recipe's reasons are documented there) at 12 epochs. Held out by the world judge and by
    ``shapes_detector`` (no code shared with the training reward). Measured (512 held-out images, 128 per task,
    ``scripts/evaluate.py --compare worlds/shapes/models/sd --reward shapes,shapes_detector``), task-mean strict
    gain with its paired 95 % interval, seeds 0 / 1: judge +6.6 [+3.3, +9.9] / +5.5 [+2.0, +8.9], detector +5.9
    [+3.0, +8.7] / +4.1 [+1.1, +7.1]; the two scorers' gains differ by +0.8 [-1.7, +3.3] / +1.4 [-1.5, +4.3] —
    the same gain, mostly in counting (+14 to +20 points) and two objects; position does not move. The +10-point
    target of issue 27 is not reached (docs/experiments/2026-11-26-independent-judge.md)."""
    config = sized(_sd(), epochs=12, per_epoch=256, eval_freq=12)
    config.train.batch_size = min(config.train.batch_size, 64 // world_size())
    set_forward_objective(config, images_per_step=64, inner_epochs=2)
    # held out by the world judge (headline eval/*) and by the detector that shares no code with it (eval.shapes_detector/*)
    config.eval.reward = "shapes,shapes_detector"
    config.eval.reward_kwargs = {"shapes": {"score": "strict"}, "shapes_detector": {"score": "strict"}}
    config.probe.freq = 4
    # measured: 654 s for these sizes (seed 0 with the strict score as reward) at load average 1-1.5 on a 2-core
    # machine; the two runs of the table above took 33 and 38 min beside three other jobs
    return config


def sd_quick():
    """The SD (UNet + DDIM) counterpart of sd3_quick: DDPO's stochastic DDIM (η = 1) in the same window,
    the same sizes (≈ 13 min alone on a 2-core CPU)."""
    return sized(_sd(), epochs=40, per_epoch=256, eval_freq=40)


def sd3_long():
    """The long recipe: 512 images per epoch (64 prompts × 8) and one step each, 300 epochs (153,600 images)."""
    return sized(_early_window(_shapes(SHAPES_SD3)), epochs=300, per_epoch=512, eval_freq=25)


def sd_long():
    """The long recipe for the SD model (same sizes as sd3_long)."""
    return sized(_sd(), epochs=300, per_epoch=512, eval_freq=25)


EXPERIMENTS = ("sd3_quick", "sd3_nft", "sd_nft", "sd_quick", "sd3_long", "sd_long")


def get_config(name="sd3_quick"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/shapes.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
