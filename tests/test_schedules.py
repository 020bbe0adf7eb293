"""The (λ_sup, λ_pg) schedule of supervised-loss mixing (ddpo_grpo/schedules.py)."""

import ml_collections
import pytest

from ddpo_grpo.schedules import check, loss_weights


def _config(**train):
    return ml_collections.ConfigDict(
        {
            "train": {
                "sup_weight": 1.0,
                "sup_schedule": "constant",
                "sup_warmup_epochs": 0,
                "sup_ramp_epochs": 0,
                "sup_floor": 0.0,
                **train,
            }
        }
    )


def _table(cfg, n):
    return [tuple(round(v, 6) for v in loss_weights(e, cfg)) for e in range(n)]


def test_constant_and_off():
    assert _table(_config(sup_weight=0.3), 3) == [(0.3, 1.0)] * 3
    assert loss_weights(5, _config(sup_weight=0.0, sup_schedule="staged", sup_warmup_epochs=3)) == (0.0, 1.0)
    assert loss_weights(7, ml_collections.ConfigDict({"train": {"learning_rate": 1.0}})) == (0.0, 1.0)  # predates them


def test_linear_decay_to_floor():
    cfg = _config(sup_schedule="linear", sup_ramp_epochs=4, sup_floor=0.2)
    assert _table(cfg, 6) == [(1.0, 1.0), (0.8, 1.0), (0.6, 1.0), (0.4, 1.0), (0.2, 1.0), (0.2, 1.0)]
    assert loss_weights(2, cfg.train) == loss_weights(2, cfg) == loss_weights(2, dict(cfg.train))  # any view


def test_staged():
    cfg = _config(sup_schedule="staged", sup_warmup_epochs=2, sup_ramp_epochs=3, sup_floor=0.1)
    assert _table(cfg, 7) == [(1.0, 0.0), (1.0, 0.0), (0.775, 0.25), (0.55, 0.5), (0.325, 0.75), (0.1, 1.0), (0.1, 1.0)]
    cfg.train.sup_ramp_epochs = 0  # switch at once after the supervised epochs
    assert _table(cfg, 4) == [(1.0, 0.0), (1.0, 0.0), (0.1, 1.0), (0.1, 1.0)]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sup_schedule": "cosine"}, "train.sup_schedule='cosine' is not one of"),
        ({"sup_weight": -1.0}, "train.sup_weight=-1.0 must be a number ≥ 0"),
        ({"sup_schedule": "linear", "sup_ramp_epochs": 0}, "needs train.sup_ramp_epochs ≥ 1"),
        ({"sup_schedule": "staged", "sup_floor": 2.0}, "train.sup_floor=2.0 must be ≤ train.sup_weight=1.0"),
        ({"sup_warmup_epochs": 3}, "only applies to train.sup_schedule='staged'"),
        ({"sup_ramp_epochs": 1.5}, "train.sup_ramp_epochs=1.5 must be an integer ≥ 0"),
    ],
)
def test_bad_fields_named(fields, message):
    cfg = _config(**fields)
    assert any(message in p for p in check(cfg))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loss_weights(0, cfg)
    with pytest.raises(ValueError, match="epoch must be an integer"):
        loss_weights(-1, _config())
