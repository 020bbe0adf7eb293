"""Image restoration on ShapesWorld with the shipped InstructPix2Pix model (worlds/shapes_i2i/models/ip2p).

    python scripts/train.py --config config/restore.py:quick              # 9 min beside another job
    python scripts/train.py --config config/restore.py:quick_grpo         # baseline: pure GRPO
    python scripts/train.py --config config/restore.py:quick_supervised   # baseline: the supervised loss alone
    python scripts/train.py --config config/restore.py:long               # hours

Measured (docs/experiments/2026-11-23-image-conditioned.md; seeds 0 / 1 / 2): held-out PSNR 25.31 dB → staged
(quick) 28.22 / 27.50 / 27.51, pure GRPO 27.64 / 27.72 / 27.86, supervised alone 25.62 (seed 0): staged and
pure GRPO tie (27.74 dB on both three-seed means), both far above the supervised loss alone. DiffusionNFT in
place of GRPO (config/edit.py's objective) did worse here: 27.32 dB pure, 26.89 dB staged (seed 0).

Rows: ``shapes_restore_train`` (a degraded ShapesWorld render as ``source_image``, the clean one as ``ground_truth``,
the degradation in ``degradation``; the fixed instruction "restore the image"), balanced over the degradation
kinds; evaluation on ``shapes_restore_test`` (held-out compositions and a held-out level of every kind), 8
deterministic samples per degradation level, grouped by ``degradation_name`` (eval/ssim/<level>, eval/psnr/<level>).
Reward: ``psnr_ssim`` = 0.5·min(PSNR, 40 dB)/40 dB + 0.5·SSIM against the ground truth.

Supervised mixing (fields the trainer reads once it mixes a supervised loss in; see ddpo_grpo/schedules.py):
"staged" — 2 epochs of the supervised loss alone (regressing the ground truth through ``policy.forward_process``),
a 4-epoch hand-over, then pure GRPO (λ_sup floor 0). The data-consistency term ‖D(x̂) − y‖² with each row's own
degradation D (``train.degradation = "row"``, ddpo_grpo/consistency.py) is off (``train.consistency_weight``
0; one flag turns it on). Measured: keeping λ_sup ≥ 0.1 and the consistency term at 0.1 after the hand-over
cost 0.1–0.9 dB (27.36 / 27.40 dB against 28.22 / 27.50 dB, seeds 0 / 1) and fell below pure GRPO.

Sampling: DDIM η = 1 on a 4-step window placed at random in the 10 steps (fine detail is decided late, layout
early; a random window trains both), text guidance s_T = sample.guidance_scale and image guidance
s_I = sample.image_guidance_scale as the pipeline computes them. ``sample.share_group_noise``: every row's prompt
is the same instruction, and the trainer keys groups by prompt — with shared noise each group keeps its own key
(advantages.group_keys), so groups of different source images are never pooled.
"""

from config.base import get_config as base_config
from config.recipes import sized
from worlds.shapes_i2i import SHAPES_IP2P


def image_conditioned(model: str, *, train_rows: str, test_rows: str, stratify_by: str, eval_group_by: str):
    """Fields shared by the restoration and editing recipes (also used by config/edit.py)."""
    config = base_config()
    config.pretrained.model = model
    config.logging.tracker = "none"
    config.logging.image_freq = 0
    config.save_freq = 5

    s = config.sample
    s.resolution = 64
    s.num_steps = 10
    s.eval_num_steps = 20
    s.guidance_scale = 4.5  # s_T (text)
    # s_I (image): on the shipped model, s_I 2.5 beat the pipeline's default 1.5 on both tasks (restoration SSIM
    # 0.955 vs 0.937, edit success up on every type) at s_T 4.5; 3.5 and 5 were no better (worlds/shapes_i2i/README.md)
    s.image_guidance_scale = 2.5
    s.noise_level = 1.0  # DDIM η = 1
    s.sde_window_size = 4
    s.sde_window_range = None  # anywhere in the 10 steps
    s.group_size = 8
    s.batch_size = 16
    s.share_group_noise = True

    t = config.train
    t.use_lora = True
    t.lora_rank = 16
    t.lora_alpha = 16.0
    # AdamW, not config/shapes.py's SGD at lr 500: the supervised term's gradient is on another scale than the
    # policy gradient's, and SGD at 500 destroyed the model within two hand-over epochs (restoration reward
    # 0.79 → 0.14, grad norm 0.36; docs/experiments/2026-11-23-image-conditioned.md); AdamW's steps have a fixed
    # size whatever the mix
    t.optimizer = "adamw"
    t.learning_rate = 1e-3
    t.warmup_steps = 2
    t.clip_range = 1e-2 * 4 * 16 * 16
    t.adv_mode = "zscore"
    t.batch_size = 16

    config.prompts.source = train_rows
    config.prompts.stratify_by = stratify_by

    e = config.eval
    e.prompts = test_rows
    e.group_by = eval_group_by
    e.per_group = 8
    return config


def supervised(config, *, weight: float, floor: float, warmup: int, ramp: int, consistency: float, degradation: str):
    """A supervised loss mixed into GRPO (ddpo_grpo/schedules.py; also used by config/edit.py)."""
    t = config.train
    t.sup_weight = weight  # λ_sup at the start
    t.sup_schedule = "staged"  # "constant" | "linear" | "staged"
    t.sup_warmup_epochs = warmup  # supervised only
    t.sup_ramp_epochs = ramp  # λ_sup falls to the floor while λ_pg rises to 1
    t.sup_floor = floor
    t.consistency_weight = consistency  # ‖D(x̂) − y‖², D = train.degradation
    t.degradation = degradation  # "row" = each row's `degradation` field | a spec ("blur:1.5") | "" = none
    return config


def _restore():
    config = image_conditioned(
        SHAPES_IP2P,
        train_rows="shapes_restore_train",
        test_rows="shapes_restore_test",
        stratify_by="group",
        eval_group_by="degradation_name",
    )
    config.reward.fns = {"psnr_ssim": 1.0}
    config.reward.kwargs = {"psnr_ssim": {"psnr_weight": 0.5, "ssim_weight": 0.5, "psnr_scale_db": 40.0}}
    config.eval.reward = "psnr_ssim"
    return supervised(config, weight=1.0, floor=0.0, warmup=2, ramp=4, consistency=0.0, degradation="row")


def quick():
    """128 images per epoch (16 source images × 8), 24 epochs (3,072 images); eval before and after (96 images)."""
    return sized(_restore(), epochs=24, per_epoch=128, eval_freq=24)


def quick_grpo():
    """Baseline: the quick recipe as pure GRPO (no supervised or consistency term), same epochs."""
    config = quick()
    config.train.sup_weight = 0.0
    config.train.sup_schedule = "constant"
    config.train.sup_warmup_epochs = config.train.sup_ramp_epochs = 0
    config.train.sup_floor = config.train.consistency_weight = 0.0
    config.train.degradation = ""
    return config


def quick_supervised():
    """Baseline: the supervised loss alone (every epoch supervised-only: no sampling, no reward), for about the
    quick recipe's wall time: a supervised epoch costs about a ninth of a GRPO epoch."""
    config = quick()
    config.num_epochs = config.eval.freq = QUICK_SUPERVISED_EPOCHS
    config.train.sup_warmup_epochs = QUICK_SUPERVISED_EPOCHS
    config.train.sup_ramp_epochs = 0
    return config


def long():
    """512 images per epoch (64 × 8), 200 epochs; eval every 20 epochs; a longer hand-over."""
    config = sized(_restore(), epochs=200, per_epoch=512, eval_freq=20)
    config.train.sup_warmup_epochs, config.train.sup_ramp_epochs = 5, 20
    return config


EXPERIMENTS = ("quick", "quick_grpo", "quick_supervised", "long")
#: supervised-only epochs of quick_supervised: about quick's training time (3 s per supervised epoch against 26 s
#: per GRPO epoch, measured side by side)
QUICK_SUPERVISED_EPOCHS = 200


def get_config(name="quick"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/restore.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
