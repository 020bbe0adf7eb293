"""MotionWorld GRPO on the shipped text-to-motion base model (worlds/motion/models/mdm, MDM architecture).

    python scripts/train.py --config config/motion.py:motion_quick   # ≈ 12 min on a 2-core CPU
    python scripts/train.py --config config/motion.py:motion_long    # the long recipe (hours on a CPU)
    python scripts/train.py --config config/motion.py:motion_ppo     # MDM users' multi-epoch PPO setting
    python scripts/train.py --config config/motion.py:physics        # physical plausibility (≈ 15 min)
    python scripts/train.py --config config/motion.py:motion_tiny    # the machinery on a tiny random MDM

Reward (``motion_quick``, ``motion_long``): the MotionWorld judge's graded score (``motion_judge``,
``score="soft"``: the fraction of the prompt's checks that hold, with partial credit for near misses) on
train-split prompts, with a KL term to the base model (``train.beta`` = 1). ``motion_ppo`` keeps the
partial score (the fraction of checks that hold) 1.0 plus the physics score (``motion_physics``:
exp(−2·skate − 5e-7·jerk)) 0.2. ``physics`` trains by DiffusionNFT on the dense physics reward — skating, jerk,
the worst foot depth below the floor and floating (:data:`PHYSICS_WEIGHTS`) — plus the judge's ``soft`` score,
anchored to the base model by a KL term (β = 3), so that text matching falls as little as it can; its evaluation
scores the strict judge and the physics metrics (``eval.motion_physics/*``) before and after.
Evaluation: the strict judge on the held-out test split (compositions never seen in training: 11
simultaneous and 51 sequence prompts), a balanced set per task, deterministic DDIM (η = 0) from fixed
seeds, 20 steps, CFG 2.5 (MDM's scale) — ``eval/task_mean/strict`` is the headline number; before and
after training.

Kernels (``sample.kernel``, both exact Gaussian transitions of ``ddpo_grpo.kernels``): "ddim" with ``sample.noise_level``
= 1 (the recipes' default: DDIM η = 1 is the DDPM posterior with fixed-small variance on the respaced
schedule, and its η = 0 twin is the deterministic evaluation sampler) or "ddpm" (MDM's ancestral sampler;
at evaluation's noise level 0 it is the posterior-mean chain). Switch with
``--config.sample.kernel=ddpm`` (and ``--config.sample.noise_level``).

The denoiser is 0.64 M parameters over 96 frames × 263 features; LoRA adapters (rank 8) on its attention and
feed-forward layers are trained. What the recipes achieve is measured in worlds/motion/README.md ("GRPO"):
``motion_quick`` holds held-out strict (0.480 → 0.480 / 0.470 / 0.510 over three seeds, evaluator numbers
unchanged) but does not raise it; without the KL anchor every judge-driven run lost accuracy. ``physics`` lowers
skate to 0.80× the base on average over three seeds and costs 6–17.5 points of held-out strict
(docs/experiments/2026-11-26-motion-base.md).
"""

from config.base import get_config as base_config
from config.recipes import set_forward_objective, sized
from worlds.motion import MDM_DIR

#: sampling / evaluation steps and CFG scale of every recipe (the base model was measured with these)
STEPS = 20
GUIDANCE = 2.5


def _motion(model: str = MDM_DIR):
    """Fields shared by every MotionWorld recipe."""
    config = base_config()
    config.pretrained.model = model
    config.logging.tracker = "none"
    config.logging.image_freq = 0  # the before/after grid of the run report shows the motions
    config.logging.num_images = 6
    config.save_freq = 5

    s = config.sample
    s.kernel = "ddim"
    s.noise_level = 1.0
    s.num_steps = STEPS
    s.eval_num_steps = STEPS
    s.guidance_scale = GUIDANCE
    s.group_size = 8
    s.batch_size = 16
    s.share_group_noise = True  # a group's motions start from one noise: differences come from the policy's steps
    s.sde_window_size = 8  # steps 0-7 of 20 stochastic (η = 1) and trained; the rest deterministic (η = 0)
    s.sde_window_range = (0, 0)

    t = config.train
    t.use_lora = True
    t.lora_rank = 8
    t.lora_alpha = 8.0
    t.optimizer = "adamw"
    t.learning_rate = 3e-4
    t.batch_size = 16
    t.adv_mode = "zscore"

    config.prompts.source = "motion_train"
    config.reward.fns = {"motion_judge": 1.0, "motion_physics": 0.2}
    config.reward.kwargs = {"motion_judge": {"score": "partial"}}

    e = config.eval
    e.prompts = "motion_test"
    e.reward = "motion_judge"
    e.reward_kwargs = {"score": "strict"}
    e.group_by = "task"
    e.per_group = 100
    return config


def _anchored(config):
    """The best measured setting (worlds/motion/README.md, "Why it does not learn"): the judge's graded
    ``soft`` score alone, lr 1e-3, and a KL term to the base model (``train.beta`` = 1) that stops the
    drift 64 motions' noisy updates otherwise cause (a random reward costs 18 points of held-out strict)."""
    config.reward.fns = {"motion_judge": 1.0}
    config.reward.kwargs = {"motion_judge": {"score": "soft"}}
    config.train.learning_rate = 1e-3
    config.train.beta = 1.0
    return config


def motion_quick():
    """The 15-minute recipe: 64 motions per epoch (8 prompts × 8), one optimizer step per epoch, anchored."""
    return _anchored(sized(_motion(), epochs=40, per_epoch=64, per_step=64, eval_freq=40))


def motion_long():
    """The long recipe: 128 motions per epoch (16 prompts × 8), 400 epochs, evaluated every 25, anchored."""
    return _anchored(sized(_motion(), epochs=400, per_epoch=128, per_step=64, eval_freq=25))


#: ``physics``'s reward weights (worlds/motion/physics.py): exp(−λ·metric) per term, each per unit of its metric —
#: 0.5 m/s of skate, 2e6 m²/s⁶ of jerk, 10 cm under the floor (worst foot) or 10 cm of floating each cost a factor e
PHYSICS_WEIGHTS = {"lambda_skate": 2.0, "lambda_jerk": 5e-7, "lambda_penetration": 10.0, "lambda_floating": 10.0}


def physics():
    """Physical plausibility (issue 26, item 2): the dense ``motion_physics`` reward of :data:`PHYSICS_WEIGHTS`
    plus the judge's graded ``soft`` score as the text-matching anchor (weights 1 and 1), by DiffusionNFT
    (``train.objective = "nft"``: deterministic DDIM rollouts, 16 AdamW updates per epoch of 64 motions — steps
    of 16 × 4 passes) with the KL term β·(f_θ − f_ref)² to the base model at ``train.beta`` = 3; 30 epochs.
    Evaluated with the strict judge and the physics metrics. Measured over seeds 0 / 1 / 2 (worlds/motion/README.md,
    "GRPO"): skate 0.86 / 0.76 / 0.78× the base, held-out strict −6.0 / −7.5 / −17.5 points — short of issue 26's
    0.7× at no more than −3; physics alone at β 10 (0.90×, −8, seed 0) and the GRPO form (one step per epoch:
    0.98× on the previous base) did worse."""
    config = sized(_motion(), epochs=30, per_epoch=64, per_step=16, eval_freq=30)
    set_forward_objective(config, images_per_step=16, inner_epochs=4)
    config.reward.fns = {"motion_physics": 1.0, "motion_judge": 1.0}
    config.reward.kwargs = {"motion_physics": dict(PHYSICS_WEIGHTS), "motion_judge": {"score": "soft"}}
    config.train.beta = 3.0
    config.eval.reward = "motion_judge,motion_physics"
    config.eval.reward_kwargs = {"motion_judge": {"score": "strict"}, "motion_physics": dict(PHYSICS_WEIGHTS)}
    return config


def motion_ppo():
    """MDM users' multi-epoch setting: 4 PPO passes over each epoch's transitions, stopped early once the
    mean approx KL to the sampler exceeds 0.01, on MDM's own ancestral (DDPM) kernel."""
    config = sized(_motion(), epochs=40, per_epoch=64, per_step=32, eval_freq=40)
    config.sample.kernel = "ddpm"
    config.train.num_inner_epochs = 4
    config.train.kl_threshold = 0.01
    return config


def motion_tiny():
    """The machinery on a tiny random MDM (worlds/motion/tiny.py, built on load): 2 epochs of 16 motions."""
    import worlds.motion.tiny as tiny

    config = _motion(f"{tiny.__file__}:build_tiny_mdm")
    config.num_epochs = 2
    config.sample.num_steps = 4
    config.sample.eval_num_steps = 4
    config.sample.sde_window_size = 2
    config.sample.group_size = 4
    config.sample.batch_size = 8
    config.sample.num_batches_per_epoch = 2
    config.train.batch_size = 8
    config.eval.freq = 2
    config.eval.per_group = 2
    config.logging.num_images = 2
    config.logging.progress = False
    return config


EXPERIMENTS = ("motion_quick", "motion_long", "motion_ppo", "physics", "motion_tiny")


def get_config(name="motion_quick"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/motion.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
