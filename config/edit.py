"""Instruction editing on ShapesWorld with the shipped InstructPix2Pix model (worlds/shapes_i2i/models/ip2p).

    python scripts/train.py --config config/edit.py:quick   # ≈ 15 min on a 2-core CPU (estimate)
    python scripts/train.py --config config/edit.py:long    # hours

Rows: ``shapes_edit_train`` (a source render, an instruction — recolor / add / remove / move — the target
described for the ShapesWorld judge, the objects the edit must leave in place, and one valid target render as
``ground_truth``), balanced over edit types; evaluation on ``shapes_edit_test`` (edits into or out of held-out
compositions), 24 deterministic samples per edit type (eval/success/<type>, eval/strict/<type>,
eval/preservation/<type>). Reward: ``edit`` with score "mix" = (partial + preservation) / 2 (dense; both halves
needed); the headline metric is ``eval/group_mean/success``.

Supervised mixing (fields the trainer reads once it mixes a supervised loss in): a lighter "staged" schedule
than restoration's — the ground truth of an add / move is one valid target among many, so the supervised term
only anchors the model (1 supervised epoch, 3 hand-over epochs, floor 0.05); no consistency term (an edit has
no degradation).
"""

from config.restore import _sized, _supervised, image_conditioned
from worlds.shapes_i2i import SHAPES_IP2P


def _edit():
    config = image_conditioned(
        SHAPES_IP2P,
        train_rows="shapes_edit_train",
        test_rows="shapes_edit_test",
        stratify_by="group",
        eval_group_by="group",
    )
    config.reward.fns = {"edit": 1.0}
    config.reward.kwargs = {"edit": {"score": "mix"}}
    config.eval.reward = "edit"
    config.eval.reward_kwargs = {"score": "success"}
    config.eval.per_group = 24
    return _supervised(config, weight=0.5, floor=0.05, warmup=1, ramp=3, consistency=0.0, degradation="")


def quick():
    """128 images per epoch (16 edits × 8), 24 epochs (3,072 images); eval before and after (96 images)."""
    return _sized(_edit(), epochs=24, images_per_epoch=128, eval_freq=24)


def long():
    """512 images per epoch (64 × 8), 200 epochs; eval every 20 epochs."""
    config = _sized(_edit(), epochs=200, images_per_epoch=512, eval_freq=20)
    config.train.sup_warmup_epochs, config.train.sup_ramp_epochs = 3, 15
    return config


EXPERIMENTS = ("quick", "long")


def get_config(name="quick"):
    if name not in EXPERIMENTS:
        raise ValueError(f"config/edit.py has no experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return globals()[name]()
